"""The comparison's default tolerances are stated in the suite, and agree with assert_close's."""

from __future__ import annotations

import itertools

import pytest
import torch

from harness.checks.compare import DEFAULT_TOLERANCES, compare_tensors, default_tolerances

DTYPES = [*DEFAULT_TOLERANCES, torch.int64, torch.bool]


@pytest.mark.parametrize("a, b", list(itertools.product(DTYPES, repeat=2)))
def test_the_stated_defaults_are_the_ones_assert_close_applies(a, b):
    x, y = torch.zeros(2, dtype=a), torch.zeros(2, dtype=b)
    expected: tuple[float, float]
    try:
        from torch.testing._comparison import default_tolerances as torchs

        expected = torchs(x, y)
    except ImportError:  # torch moved its private helper: the table still stands alone
        pytest.skip("torch's private default_tolerances is gone")
    assert default_tolerances(x, y) == expected


def test_the_compare_uses_them_when_the_entry_states_none():
    e = torch.ones(3)
    inside = e + 0.5e-6  # within float32's (1.3e-6, 1e-5)
    outside = e + 1e-4
    assert compare_tensors(inside, e, rtol=None, atol=None, label="out") is None
    assert compare_tensors(outside, e, rtol=None, atol=None, label="out") is not None
