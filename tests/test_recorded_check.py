"""``afdb check --recorded`` on recordings made in-process (``harness.recording``).

Each check is shown to catch a planted bug and to pass its correct twin: the declarations
(a straight-through gradient fails undeclared, passes declared), the note on a failing
gradient that no recorded call needs (present only where the argument never had
requires_grad), the verdict lines of Functions that cannot be checked, and the CLI's
usage errors (one line, exit 2).
"""

from __future__ import annotations

import pytest
import torch

from harness.cli.main import main
from harness.core.errors import UsageError
from harness.core.schema import read_report
from harness.recording import recording
from harness.recording.model import RecordedCall, RecordedFunction, Recording, SkippedCall
from harness.sources.declare import parse_declaration, parse_declarations
from tests import recorded_functions as rf

FAST = [
    "--checks",
    "vmap,vjp,jacrev",
    "-n",
    "0",
]


def _x(*shape: int, seed: int = 0, grad: bool = False) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=gen, dtype=torch.float64).requires_grad_(grad)


def _record(tmp_path, body) -> str:
    out = str(tmp_path / "rec")
    with recording(out):
        body()
    return out


# --- declarations ---------------------------------------------------------------------------


def test_a_declaration_sets_the_gradient_and_capabilities():
    d = parse_declaration("mylib.ops:RoundSTE gradient=custom nondiff-args=2,1 no-double-backward")
    assert d.target == "mylib.ops:RoundSTE"
    assert d.gradient == "custom"
    assert d.capabilities == {"nondiff_args": (1, 2), "double_backward": False}


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ("RoundSTE gradient=custom", "start with the Function's recorded target"),
        ("m:F gradient=surrogate", "gradient='surrogate'"),
        ("m:F colour=blue", "unknown key 'colour'"),
        ("m:F nondiff-args=x", "not a list of argument positions"),
        ("m:F randomness=yes", "randomness takes no value"),
        ("m:F dtypes=float99", "dtypes='float99'"),
    ],
)
def test_a_wrong_declaration_is_one_line(line, says):
    with pytest.raises(UsageError) as e:
        parse_declaration(line)
    assert says in str(e.value) and "\n" not in str(e.value)


def test_a_target_declared_twice_is_refused():
    with pytest.raises(UsageError, match="declared twice"):
        parse_declarations(["m:F gradient=custom", "# a comment", "", "m:F nondiff-args=1"])


# --- the check ------------------------------------------------------------------------------


def test_a_straight_through_gradient_fails_undeclared_and_passes_declared(tmp_path, capsys):
    out = _record(tmp_path, lambda: rf.Ste.apply(_x(5, 7, grad=True) * 3).sum().backward())
    target = "tests.recorded_functions:Ste"
    assert main(["check", "--recorded", out, *FAST]) == 1
    text = capsys.readouterr().out
    assert f"  {target}  FAIL: " in text
    assert main(["check", "--recorded", out, *FAST, "--declare", f"{target} gradient=custom"]) == 0
    text = capsys.readouterr().out
    assert f"  {target}  conforms (" in text
    assert "1 Function called by 1 test: 1 conform, 0 fail" in text


def _mul_calls(cls, w_grad: bool):
    def body():
        cls.apply(_x(5, 7, grad=True), _x(5, 7, seed=1, grad=w_grad)).sum().backward()

    return body


def test_a_failing_gradient_no_recorded_call_needs_is_named(tmp_path, capsys):
    # its backward returns None for w: nondiff-args=1 is offered (tests/test_recorded_hints.py
    # shows a wrong or conditional gradient is not)
    out = _record(tmp_path, _mul_calls(rf.MulDropsW, w_grad=False))
    report = tmp_path / "r.json"
    assert main(["check", "--recorded", out, *FAST, "--json", str(report)]) == 1
    text = capsys.readouterr().out
    assert "in a gradient no recorded call needs" in text
    cases = read_report(str(report))["cases"]
    failing = [c for c in cases if c.get("status") == "fail"]
    assert failing and all(
        c["message"].startswith("[no recorded call needs this gradient: argument 1 never had")
        and "'tests.recorded_functions:MulDropsW nondiff-args=1'" in c["message"]
        for c in failing
    )


def test_a_gradient_some_call_needs_gets_no_such_note(tmp_path, capsys):
    out = _record(tmp_path, _mul_calls(rf.MulLosesW, w_grad=True))
    assert main(["check", "--recorded", out, *FAST]) == 1
    text = capsys.readouterr().out
    assert "no recorded call needs" not in text


def test_the_correct_twin_conforms(tmp_path, capsys):
    out = _record(tmp_path, _mul_calls(rf.Mul, w_grad=False))
    assert main(["check", "--recorded", out, *FAST]) == 0
    assert "tests.recorded_functions:Mul  conforms (" in capsys.readouterr().out


def test_declaring_the_argument_nondifferentiable_leaves_it_unchecked(tmp_path, capsys):
    out = _record(tmp_path, _mul_calls(rf.MulLosesW, w_grad=False))
    line = "tests.recorded_functions:MulLosesW nondiff-args=1"
    assert main(["check", "--recorded", out, *FAST, "--declare", line]) == 0


def test_a_legacy_function_gets_the_eager_checks(tmp_path, capsys):
    out = _record(tmp_path, lambda: rf.Legacy.apply(_x(5, 7, grad=True)).sum().backward())
    assert main(["check", "--recorded", out, "-n", "0"]) == 0
    text = capsys.readouterr().out
    assert "tests.recorded_functions:Legacy  legacy: eager checks only, see " in text
    assert "1 conform (all legacy: eager checks only), 0 fail" in text


def test_selection_by_prefix_and_an_unknown_prefix(tmp_path, capsys):
    def body():
        rf.Mul.apply(_x(5, 7), _x(5, 7, seed=1))
        rf.Ste.apply(_x(5, 7))

    out = _record(tmp_path, body)
    assert main(["check", "--recorded", out, "tests.recorded_functions:Mu", *FAST]) == 0
    text = capsys.readouterr().out
    assert "recorded_functions:Mul" in text and "recorded_functions:Ste" not in text
    assert main(["check", "--recorded", out, "tests.recorded_functions:Mux"]) == 2
    err = capsys.readouterr().err
    assert "matches no recorded Function; did you mean tests.recorded_functions:Mul" in err


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["check", "--declare", "m:F gradient=custom", "m:F"], "--declare needs --recorded"),
        (["check", "a:B", "c:D"], "name one TARGET"),
        (["check", "--recorded", "no/such/dir"], "no/such/dir"),
    ],
)
def test_usage_errors_are_one_line(argv, says, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and "\n" not in err and "Traceback" not in err


# --- what cannot be checked is said, never hidden ---------------------------------------------


def _function(target, calls=(), **kw):
    return RecordedFunction(target, "function", False, True, tuple(calls), len(calls), **kw)


def test_functions_that_cannot_be_checked_are_listed_with_the_reason(capsys):
    from harness.cli.main import build_parser
    from harness.session.recorded import check_recording

    x = _x(5, 7, grad=True)
    rec = Recording(
        (
            _function("tests.recorded_functions:Mul", [RecordedCall((x, x.detach()), {}, "t::a")]),
            _function("m:Weird", skipped=(SkippedCall("argument 1 is a `m.Config`", "t::b"),)),
            _function("m:Inner", nested_in=("m:Outer.forward",)),
            _function("m:Vmapped", under_transform=4),
            RecordedFunction(
                "t:f.<locals>.F", "function", False, False, (RecordedCall((x,), {}, "t::c"),), 1
            ),
        ),
        never_called=("m:Unused",),
    )
    args = build_parser().parse_args(["check", "--recorded", "x", *FAST])
    args.argv = ["check"]
    status, _, found = check_recording(args, recording=rec)
    assert status == 0
    text = capsys.readouterr().out
    lines = {v.target: v.line for v in found}
    assert lines["tests.recorded_functions:Mul"].startswith("conforms")
    assert lines["m:Weird"].startswith("not recordable: argument 1 is a `m.Config` (t::b) [")
    assert lines["m:Inner"].startswith("not checked: called only inside m:Outer.forward")
    assert lines["m:Vmapped"].startswith("not recordable: called only under a torch.func")
    assert "checked only in the recording process" in lines["t:f.<locals>.F"]
    # each one ends with the class of its reason and what to do about it
    assert lines["m:Weird"].endswith(
        "[an argument is not data: call it in one test with arguments that are data or "
        "objects (tensors with data, numbers, modules): see docs/recording.md, What is recorded]"
    )
    assert lines["m:Inner"].endswith("[only inside another Function: call it directly in one test]")
    assert lines["m:Vmapped"].endswith(
        "[only under a transform: call it once outside torch.func (eagerly) in one test]"
    )
    assert "[only in a local scope: define the class at module level" in lines["t:f.<locals>.F"]
    assert lines["m:Unused"] == "never called"
    assert (
        "5 Functions called by 3 tests: 1 conform, 0 fail, 4 not checkable (1 not importable "
        "here, 2 not recordable, 1 only called inside another Function), 1 not called"
    ) in text


def test_a_class_that_cannot_be_imported_is_checked_with_the_live_class(capsys):
    from harness.cli.main import build_parser
    from harness.session.recorded import check_recording

    def local(cls):
        class Local(cls):  # a class defined in a function: not importable
            pass

        return Local

    for cls, want in ((rf.Mul, 0), (rf.MulLosesW, 1)):
        live = local(cls)
        target = f"tests.test_recorded_check:{live.__qualname__}"
        x = _x(5, 7, grad=True)
        rec = Recording(
            (
                RecordedFunction(
                    target, "function", False, False, (RecordedCall((x, x * 2), {}, "t"),), 1
                ),
            )
        )
        args = build_parser().parse_args(["check", "--recorded", "x", *FAST])
        args.argv = ["check"]
        status, _, _ = check_recording(args, recording=rec, classes={target: live})
        assert status == want, capsys.readouterr().out


def test_progress_lines_only_when_asked_for_a_terminal(capsys):
    from harness.cli.main import build_parser
    from harness.session.recorded import check_recording

    x = _x(5, 7, grad=True)
    rec = Recording(
        (_function("tests.recorded_functions:Mul", [RecordedCall((x, x * 2), {}, "t")]),)
    )
    for progress, shown in ((True, True), (False, False), (None, False)):  # None: not a tty here
        args = build_parser().parse_args(
            ["check", "--recorded", "x", "--checks", "vmap", "-n", "0"]
        )
        args.argv = ["check"]
        check_recording(args, recording=rec, progress=progress)
        out = capsys.readouterr().out
        assert ("tests.recorded_functions:Mul: " in out) == shown, out
        assert "tests.recorded_functions:Mul  conforms (" in out


def test_last_failed_reruns_only_the_failing_cases_of_a_recorded_report(tmp_path, capsys):
    out = _record(tmp_path, _mul_calls(rf.MulLosesW, w_grad=True))
    report = str(tmp_path / "r.json")
    assert main(["check", "--recorded", out, *FAST, "--json", report]) == 1
    bad = {c["id"] for c in read_report(report)["cases"] if c["status"] == "fail"}
    again = str(tmp_path / "again.json")
    assert main(["check", "--recorded", out, "--last-failed", report, "--json", again]) == 1
    assert {c["id"] for c in read_report(again)["cases"]} == bad
    capsys.readouterr()
    assert main(["run", "--last-failed", report]) == 2
    assert "use `afdb check --recorded DIR --last-failed`" in capsys.readouterr().err


SCRIPT = """
import os
import torch

class Double(torch.autograd.Function):  # in __main__: not importable by another process
    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return 2 * x

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, grad):
        return (3 if os.environ.get("PLANT") else 2) * grad

Double.apply(torch.randn(5, 7, requires_grad=True)).sum().backward()
"""


@pytest.mark.parametrize(("plant", "status"), [("", 0), ("1", 1)])
def test_record_check_checks_a_main_class_in_the_recording_process(tmp_path, plant, status):
    import os
    import subprocess
    import sys
    from pathlib import Path

    (tmp_path / "prog.py").write_text(SCRIPT)
    env = {**os.environ, "PLANT": plant}
    afdb = str(Path(sys.executable).parent / "afdb")
    argv = [afdb, "record", "--check", "prog.py"]
    proc = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == status, proc.stdout + proc.stderr
    word = "conforms (" if not plant else "FAIL: "
    assert f"  __main__:Double  {word}" in proc.stdout
    # another process cannot import it: listed as not checked, never skipped silently
    later = subprocess.run(
        [afdb, "check", "--recorded"], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert later.returncode == 5, later.stdout + later.stderr
    assert (
        "  __main__:Double  not checked: defined where it cannot be imported again" in later.stdout
    )
