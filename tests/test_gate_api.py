"""harness.check / harness.assert_conforms from plain Python, pytest and unittest."""

from __future__ import annotations

import json
import sys
import unittest
from pathlib import Path

import pytest

from harness import UsageError, assert_conforms, check

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
import rotations  # noqa: E402


def test_assert_conforms_passes_quietly_for_a_correct_function():
    result = assert_conforms(rotations.RotatePoints, rotations.rotation_samples, checks=["vmap"])
    assert result.ok and "chose batch size 4" in result.metadata["batch_size_note"]


def test_assert_conforms_gives_each_root_cause_with_message_and_repro():
    with pytest.raises(AssertionError) as info:
        assert_conforms(rotations.BrokenRotatePoints, rotations.rotation_samples, checks=["vmap"])
    text = str(info.value)
    # 17 plans + 1 non-contiguous
    assert text.startswith("BrokenRotatePoints: 8 of 18 cases do not conform, 1 root cause:")
    assert "    vmap in_dims=(None,1),B=4 (Function under vmap vs loop over slices)" in text
    assert (
        "reproduce: afdb repro 'BrokenRotatePoints/vmap/s0/in_dims=(None,1),B=4' "
        "rotations:BrokenRotatePoints --samples rotations:rotation_samples" in text
    )


def test_assert_conforms_in_unittest():
    class Conformance(unittest.TestCase):
        def test_broken(self):
            assert_conforms(
                rotations.BrokenRotatePoints, rotations.rotation_samples, checks=["vmap"]
            )

    result = unittest.TestResult()
    unittest.defaultTestLoader.loadTestsFromTestCase(Conformance).run(result)
    assert len(result.failures) == 1
    assert "do not conform" in result.failures[0][1]


def test_expectations_and_fixed_sizes_from_python(tmp_path):
    exp = tmp_path / "e.json"
    exp.write_text(
        json.dumps(
            {
                "schema": "afdb-expectations/1",
                "expectations": [
                    {"id": "BrokenRotatePoints/vmap", "status": "skip", "reason": "bug #7"}
                ],
            }
        )
    )
    r = check(
        rotations.BrokenRotatePoints,
        rotations.rotation_samples,
        checks=["vmap"],
        expectations=str(exp),
    )
    assert r.ok and {c.status for c in r.cases} == {"skip"}
    with pytest.raises(UsageError, match="argument 1 has size 2 at dim 0"):
        check(rotations.RotatePoints, rotations.rotation_samples, batch_sizes=(2,))


def test_unseeded_samples_and_tuples_are_accepted():
    import torch

    r = check(
        rotations.RotatePoints,
        lambda: [(torch.eye(3, dtype=torch.float64), torch.ones(2, 3, dtype=torch.float64))],
        checks=["vmap"],
    )
    assert r.ok, r.failures()
