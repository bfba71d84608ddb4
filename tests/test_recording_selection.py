"""Issue 36 part 5: a recording keeps the calls that cover the most argument combinations
(every combination's first call before any second), names those it could not keep, and
keeps the same calls for the same program."""

from __future__ import annotations

import torch

from harness.cli.main import main
from harness.recording import load_recording, recording
from harness.recording.selection import combination, select
from tests import data_kinds_functions as dk

COMBOS = [("square", False), ("square", True), ("sine", False), ("sine", True), ("cube", True)]
FAST = ["--checks", "vjp", "-n", "0"]


def _x(n: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(n, generator=gen, dtype=torch.float64).requires_grad_(True)


def _program(cls) -> None:
    """A test suite's calls: ten of the first combination (ten sizes) come first."""
    for n in range(3, 13):
        cls.apply(_x(n, n), "square", False).sum().backward()
    for i, (kind, flip) in enumerate(COMBOS[1:]):
        for n in (4, 5, 6):
            cls.apply(_x(n, 100 * i + n), kind, flip).sum().backward()


def _record(tmp_path, cls, **limits) -> str:
    out = str(tmp_path / "rec")
    with recording(out, **limits):
        _program(cls)
    return out


def test_every_combination_is_kept_before_a_second_call_of_one():
    calls = [(f"k{n}", "A", "t") for n in range(20)] + [
        (f"{c}{n}", c, "t") for c in "BCDE" for n in range(2)
    ]
    kept, not_kept = select(calls, 8)
    combos = [calls[i][1] for i in kept]
    assert sorted(set(combos)) == ["A", "B", "C", "D", "E"]
    assert kept == sorted(kept)  # in the order the calls were made
    assert combos.count("A") == 2 and not not_kept  # 5 firsts, then seconds of A, B, C
    assert select(calls, 8) == (kept, not_kept)  # deterministic


def test_combinations_over_the_cap_are_named():
    calls = [(c, combination([{"str": c}], {}), f"test_{c}") for c in "ABCDE"]
    kept, not_kept = select(calls, 3)
    assert kept == [0, 1, 2]
    assert [(n["combination"], n["where"], n["count"]) for n in not_kept] == [
        ("('D')", "test_D", 1),
        ("('E')", "test_E", 1),
    ]


def test_a_combination_is_values_and_tensor_kinds_not_sizes():
    def node(shape, mode):
        tensor = {"tensor": {"dtype": "float64", "shape": shape, "requires_grad": True}}
        return [tensor, {"str": mode}], {}

    assert combination(*node([3, 4], "zero")) == combination(*node([5, 7], "zero"))
    assert combination(*node([3, 4], "zero")) != combination(*node([3, 4], "reflect"))
    assert combination(*node([3, 4], "zero")) != combination(*node([12], "zero"))


def test_the_default_recording_keeps_each_option_and_finds_the_bug_in_the_last(tmp_path, capsys):
    out = _record(tmp_path, dk.OptionsBuggy)
    (fn,) = load_recording(out).functions
    kept = {(c.args[1], c.args[2]) for c in fn.calls}
    assert kept == set(COMBOS) and not fn.not_kept
    assert main(["check", "--recorded", out, *FAST]) == 1
    assert "tests.data_kinds_functions:OptionsBuggy  FAIL: " in capsys.readouterr().out


def test_the_correct_twin_passes(tmp_path, capsys):
    out = _record(tmp_path, dk.Options)
    assert main(["check", "--recorded", out, *FAST]) == 0
    assert "tests.data_kinds_functions:Options  conforms (" in capsys.readouterr().out


def test_the_same_program_keeps_the_same_calls(tmp_path):
    one = _record(tmp_path / "a", dk.Options)
    two = _record(tmp_path / "b", dk.Options)
    assert (tmp_path / "a" / "rec" / "recording.json").read_bytes() == (
        tmp_path / "b" / "rec" / "recording.json"
    ).read_bytes()
    assert one != two


def test_a_small_cap_names_the_combinations_it_did_not_keep(tmp_path, capsys):
    out = _record(tmp_path, dk.OptionsBuggy, max_calls=3)
    (fn,) = load_recording(out).functions
    assert [n.combination for n in fn.not_kept] == [
        "(float64 1-d tensor, 'sine', True)",
        "(float64 1-d tensor, 'cube', True)",
    ]
    assert main(["recording", out]) == 0
    text = capsys.readouterr().out
    assert "2 argument combinations seen but not kept (over --max-calls): " in text
    assert "(float64 1-d tensor, 'cube', True) x3" in text
