"""Hints on recorded failures that never hide a bug (issue 35 part 2), one declaration per
``reproduce:`` line (35 part 3), and the surrogate-gradient hint (issue 34 part 6).

Each hint is shown where it applies and absent from the twin where it would mislead:
``nondiff-args=N`` only for a Function whose backward returns no gradient for N in any
recorded call (``MulDropsW``), never for one that returns a wrong gradient (``MulLosesW``,
zeros) or one only when another input needs a gradient (``MulWOnlyWithX``, the shape of
pytorch_wavelets' SFB1D bug); the surrogate hint for a Heaviside forward with a sigmoid
backward (still FAIL), not for its declared twin (conforms) nor a smooth wrong backward.
"""

from __future__ import annotations

import shlex

import torch

from harness.cli.main import main
from harness.core.repro_scope import failing_sub_check
from harness.core.schema import read_report
from harness.recording import recording
from tests import recorded_functions as rf

FAST = ["--checks", "vmap,vjp", "-n", "0"]
T = "tests.recorded_functions:"


def _x(*shape: int, seed: int = 0, grad: bool = False) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=gen, dtype=torch.float64).requires_grad_(grad)


def _record(tmp_path, body) -> str:
    out = str(tmp_path / "rec")
    with recording(out):
        body()
    return out


def _mul(cls):
    return lambda: cls.apply(_x(5, 7, grad=True), _x(5, 7, seed=1)).sum().backward()


def _failing(tmp_path, out, *extra):
    report = tmp_path / "r.json"
    status = main(["check", "--recorded", out, *FAST, "--json", str(report), *extra])
    return status, [c for c in read_report(str(report))["cases"] if c["status"] == "fail"]


def test_nondiff_is_offered_where_the_backward_returns_none(tmp_path, capsys):
    status, failing = _failing(tmp_path, _record(tmp_path, _mul(rf.MulDropsW)))
    assert status == 1 and failing
    for c in failing:
        assert f"declare '{T}MulDropsW nondiff-args=1'" in c["message"]
        assert "would hide" not in c["message"]


def test_a_wrong_gradient_is_named_and_nondiff_is_not_offered(tmp_path, capsys):
    status, failing = _failing(tmp_path, _record(tmp_path, _mul(rf.MulLosesW)))
    assert status == 1 and failing
    for c in failing:
        assert "nondiff-args=1'" not in c["message"]
        assert (
            "this case finds it wrong: declaring nondiff-args=1 would hide the bug"
            in (c["message"])
        )


def test_a_gradient_only_when_another_input_needs_one_is_named(tmp_path, capsys):
    status, failing = _failing(tmp_path, _record(tmp_path, _mul(rf.MulWOnlyWithX)))
    assert status == 1 and failing
    for c in failing:
        assert "nondiff-args=1'" not in c["message"]
        assert (
            "gradient for argument 1 only when another argument needs a gradient too"
            in (c["message"])
        )
        assert "would hide" in c["message"]


def test_no_hint_names_an_input_a_recorded_call_differentiated(tmp_path, capsys):
    def body():
        x, w = _x(5, 7, grad=True), _x(5, 7, seed=1, grad=True)
        rf.MulWOnlyWithX.apply(x, w).sum().backward()

    status, failing = _failing(tmp_path, _record(tmp_path, body))
    assert status == 1 and failing
    assert all("nondiff-args" not in c["message"] for c in failing)


def test_a_reproduce_line_names_only_its_own_declaration_and_its_sub_check(tmp_path, capsys):
    def body():
        _mul(rf.MulWOnlyWithX)()
        rf.Ste.apply(_x(5, 7, grad=True) * 3).sum().backward()
        _mul(rf.Mul)()

    out = _record(tmp_path, body)
    decls = [f"{T}Ste gradient=custom", f"{T}Mul nondiff-args=1", f"{T}SmoothWrong gradient=custom"]
    args = [a for d in decls for a in ("--declare", d)]
    status, failing = _failing(tmp_path, out, *args)
    assert status == 1 and failing
    for c in failing:
        argv = shlex.split(c["repro"])
        assert argv.count("--declare") == 0, c["repro"]  # MulWOnlyWithX has no declaration
        assert argv[argv.index("--sub-check") + 1] == "input 1 alone, all outputs"
    # a failing Function with a declaration: its own line, and only it
    status, failing = _failing(
        tmp_path, out, "--declare", f"{T}MulWOnlyWithX no-double-backward", *args
    )
    assert status == 1 and failing
    for c in failing:
        argv = shlex.split(c["repro"])
        assert argv.count("--declare") == 1
        assert argv[argv.index("--declare") + 1] == f"{T}MulWOnlyWithX no-double-backward"


def test_the_failing_sub_check_is_read_from_the_message():
    msg = "failing sub-checks: [input 1 alone, all outputs]; passing: [all inputs, all outputs] -- "
    assert failing_sub_check(
        msg + "vjp: input 1 alone, all outputs (torch.func.vjp, x)", "vjp"
    ) == ("input 1 alone, all outputs")
    eager_only = msg + "vjp: input 1 alone, all outputs (torch.autograd.grad, the backward): ..."
    assert (
        failing_sub_check(eager_only, "vjp") == "input 1 alone, all outputs (torch.autograd.grad)"
    )
    assert (
        failing_sub_check("failing sub-checks: [all inputs, all outputs] [input 0 alone]", "vjp")
        == ""
    )
    assert failing_sub_check("vjp: all inputs: wrong", "vjp") == ""


SURROGATE = "looks like a surrogate/straight-through gradient: if intended, declare"


def _spike(cls):
    return lambda: cls.apply(_x(4, 6, grad=True)).sum().backward()


def test_an_undeclared_surrogate_gradient_says_so_and_still_fails(tmp_path, capsys):
    out = _record(tmp_path, _spike(rf.Spike))
    assert main(["check", "--recorded", out, *FAST]) == 1
    text = capsys.readouterr().out
    line = next(ln for ln in text.splitlines() if ln.startswith(f"  {T}Spike "))
    assert "FAIL: " in line and f"{SURROGATE} '{T}Spike gradient=custom'" in line


def test_the_declared_surrogate_conforms_without_the_hint(tmp_path, capsys):
    out = _record(tmp_path, _spike(rf.Spike))
    assert main(["check", "--recorded", out, *FAST, "--declare", f"{T}Spike gradient=custom"]) == 0
    text = capsys.readouterr().out
    assert f"  {T}Spike  conforms (" in text and SURROGATE not in text


def test_a_smooth_wrong_backward_gets_no_surrogate_hint(tmp_path, capsys):
    out = _record(tmp_path, _spike(rf.SmoothWrong))
    assert main(["check", "--recorded", out, *FAST]) == 1
    text = capsys.readouterr().out
    assert f"  {T}SmoothWrong  FAIL: " in text and SURROGATE not in text


def test_a_user_targets_reproduce_line_names_its_sub_check_and_reproduces(
    tmp_path, capsys, monkeypatch
):
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    monkeypatch.chdir(root)
    src = "tests/recorded_functions.py"
    report = tmp_path / "u.json"
    argv = ["check", f"{src}:MulWOnlyWithX", "--samples", f"{src}:mul_samples", *FAST]
    assert main([*argv, "--json", str(report)]) == 1
    case = next(c for c in read_report(str(report))["cases"] if c["status"] == "fail")
    command = shlex.split(case["repro"])
    assert command[command.index("--sub-check") + 1] == "input 1 alone, all outputs"
    for cls, status in (("MulWOnlyWithX", 1), ("Mul", 0)):
        script = tmp_path / f"{cls}.py"
        twin = [a.replace(":MulWOnlyWithX", f":{cls}") for a in command[1:]]
        twin = [a.replace("MulWOnlyWithX/", f"{cls}/") for a in twin]
        assert main([*twin, "-o", str(script)]) == 0
        run = subprocess.run(
            [sys.executable, str(script)], capture_output=True, text=True, timeout=300
        )
        assert run.returncode == status, run.stdout + run.stderr


def test_the_surrogate_hint_at_float32_calls(tmp_path, capsys):
    def body():
        rf.Spike.apply(_x(4, 6).float().requires_grad_()).sum().backward()
        rf.SmoothWrong.apply(_x(4, 6, seed=1).float().requires_grad_()).sum().backward()

    out = _record(tmp_path, body)
    assert main(["check", "--recorded", out, *FAST]) == 1
    lines = capsys.readouterr().out.splitlines()
    spike = next(ln for ln in lines if ln.startswith(f"  {T}Spike "))
    smooth = next(ln for ln in lines if ln.startswith(f"  {T}SmoothWrong "))
    assert SURROGATE in spike and "FAIL: " in spike
    assert SURROGATE not in smooth and "FAIL: " in smooth
