"""One set of finite differences per input subset serves every sub-check of a vjp case's
identity check (``harness.checks.fd_shared``): the planted first-order bugs still fail
there, their twins pass, and the forward is evaluated a fraction of the times it was."""

from __future__ import annotations

import pytest
import torch

from autograd_function_db._sampling import Maker
from autograd_function_db.entry import Sample, entry
from harness.checks import fd_shared, first_order
from harness.core.options import Options
from harness.engine.runner import run_entries

from . import planted_autodiff as planted

#: Bugs the first-order vjp check catches, each in a sub-check of its own kind: every
#: sub-check wrong, the inputs' order, one output's gradient, non-contiguous grads only.
PAIRS = (
    "backward scaled by a constant",
    "gradients of two inputs swapped",
    "second output's gradient ignored",
    "backward correct only for contiguous grads",
)


@pytest.fixture
def identity_path(monkeypatch):
    """Every Jacobian past the full-Jacobian limit: the vjp checks use random directions."""
    monkeypatch.setattr(first_order, "FULL_JACOBIAN_MAX", 0)


def _run(e, *checks):
    return run_entries([e], Options(checks=checks))


@pytest.mark.parametrize("name", PAIRS)
def test_the_shared_references_catch_each_planted_first_order_bug(identity_path, name):
    pair = planted.PAIRS[name]
    bad = [r for r in _run(pair.bug, "vjp") if r.status != "pass"]
    assert bad and all(r.status == "fail" for r in bad), [(r.id, r.message) for r in bad]
    assert "identity check" in bad[0].message
    twin = _run(pair.twin, "vjp")
    assert {r.status for r in twin} == {"pass"}, [(r.id, r.message) for r in twin]


class _Counted(torch.autograd.Function):
    """(x * y, x + y): two inputs, two outputs, counting its forward calls."""

    calls = 0

    @staticmethod
    def forward(x, y):
        _Counted.calls += 1
        return x * y, x + y

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)

    @staticmethod
    def backward(ctx, gp, gs):
        x, y = ctx.saved_tensors
        return gp * y + gs, gp * x + gs


class _CountedWrong(_Counted):
    """Its twin whose gradient of y is off when only y requires grad."""

    @staticmethod
    def backward(ctx, gp, gs):
        x, y = ctx.saved_tensors
        gy = gp * x + gs
        return gp * y + gs, gy if ctx.needs_input_grad[0] else 1.01 * gy


def _samples(seed, dtype, device):
    m = Maker(seed, dtype, device)
    return [Sample((m.randn(4, 5), m.randn(4, 5)), "2d")]


def _counted(cls):
    return entry(cls.__name__, cls, _samples)


def test_one_set_of_differences_per_input_subset(identity_path, monkeypatch):
    made = []
    real = fd_shared.SharedDifferences

    def keep(*a, **k):
        made.append(real(*a, **k))
        return made[-1]

    monkeypatch.setattr(first_order, "SharedDifferences", keep)
    _Counted.calls = 0
    results = _run(_counted(_Counted), "vjp")
    assert {r.status for r in results} == {"pass"}, [(r.id, r.message) for r in results]
    # 3 input subsets (both, x alone, y alone) x 3 output subsets x 2 hows + the
    # non-contiguous call x 2 hows = 20 sub-checks, each with 3 directions, used to cost
    # 3 x (1 + 8 + 6) forward evaluations: 900. Now: 3 subsets x (1 + 8 + 3 x 6) = 81 for
    # the references, and the Function's own calls (about 2 per sub-check).
    assert [m.evaluated for m in made] == [3]
    assert _Counted.calls < 81 + 3 * 20 + 10


def test_a_bug_in_one_input_subset_still_fails_there(identity_path):
    results = _run(_counted(_CountedWrong), "vjp")
    assert {r.status for r in results} == {"fail"}
    assert "input 1 alone" in results[0].message
