"""One bug, one cause, in every front end (issue 30, part 4).

A wrong backward is one root cause: the float32 leg of vjp and jacrev fold into vjp's
group, which says so; a jacrev failure where vjp passes stays a cause of its own. Console
headlines are short, said once, never cut inside a part; the pytest plugin prints a
section grouped by root cause as the CLI does.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import harness
from harness.cli.main import main
from harness.core.results import CaseResult
from harness.reports.grouping import (
    HEADLINE_CHARS,
    MORE_IN_REPORTS,
    failure_groups,
    message_headline,
    terminal_lines,
)
from tests import planted_causes as pc

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parent.parent
PC = "tests/planted_causes.py"


@pytest.fixture(autouse=True)
def _at_root(monkeypatch):
    monkeypatch.chdir(ROOT)


def _case(check, sample, message, status="fail", leg=False):
    plan = {"id": "dtype=float32", "levels": [], "dtype": "float32"} if leg else None
    suffix = "/dtype=float32" if leg else ""
    return CaseResult(
        f"F/{check}/s{sample}{suffix}", "F", check, sample, f"sample{sample}", plan, status, message
    )


VJP = "vjp: grad of input 0 vs finite differences: 12 of 12 values outside tolerance"
LEG = "float32 leg (the float64 sample cast to float32): " + VJP
JAC = "jacrev: d(output 0)/d(input 0) vs finite differences Jacobian: 12 of 144 values outside"


def test_a_wrong_backward_is_one_root_cause_that_names_what_follows_from_it():
    result = harness.check(pc.TwiceTheGradient, pc.two_samples, checks=["vjp", "jacrev", "jvp"])
    groups = failure_groups(result.cases)
    assert len(groups) == 1, [g.checks for g in groups]
    (g,) = groups
    assert g.checks == ["vjp", "jacrev"] and g.count == 6  # 2 vjp, 2 float32 legs, 2 jacrev
    assert g.follows_text == "the float32 leg and jacrev fail where vjp does"
    head = terminal_lines(groups, limit=5)[0]
    assert head.endswith("(one root cause; the float32 leg and jacrev fail where vjp does)")


def test_dependents_of_a_passing_check_stay_causes_of_their_own():
    # jacrev and the float32 leg fail, vjp passes: two bugs of their own, not consequences
    cases = [
        _case("vjp", 0, "", status="pass"),
        _case("vjp", 0, LEG, leg=True),
        _case("jacrev", 0, JAC),
    ]
    groups = failure_groups(cases)
    assert [g.checks for g in groups] == [["vjp"], ["jacrev"]]
    assert all(not g.follows for g in groups)
    # the twin: vjp fails too, so both fold into its group
    cases[0] = _case("vjp", 0, VJP)
    (g,) = failure_groups(cases)
    assert g.first.id == "F/vjp/s0" and g.follows == ("the float32 leg", "jacrev")


def test_a_dependent_group_following_from_two_groups_stays_apart():
    cases = [
        _case("vjp", 0, VJP),
        _case("vjp", 1, "vjp: something else entirely"),
        _case("jacrev", 0, JAC),
        _case("jacrev", 1, JAC),
    ]
    assert [g.checks for g in failure_groups(cases)] == [["vjp"], ["vjp"], ["jacrev"]]


def test_headlines_are_short_said_once_and_never_cut_inside_a_part():
    part = (
        "vjp: all inputs (torch.func.vjp): grad of input 0 vs finite differences: 12 of 12 outside"
    )
    message = "; ".join(
        [part, part, "rtol=1e-07, atol=1e-07", part]
        + [f"worst at (2, {k}): got 15.{k}, reference 7.5 in sub-check {k}" for k in range(5)]
    )
    head = message_headline(message)
    assert len(head) <= HEADLINE_CHARS + len(MORE_IN_REPORTS) + 2
    assert head.count(part) == 1 and head.endswith(MORE_IN_REPORTS)
    parts = head[: -len(MORE_IN_REPORTS)].rstrip("; ").split("; ")
    assert all(p in message.split("; ") for p in parts)  # whole parts only
    assert message_headline("short; short; short") == "short"  # repeats dropped, nothing cut
    one_long = "the Function raised ValueError: " + "a very long sentence " * 30 + ". More."
    clipped = message_headline(one_long)
    assert len(clipped) < 340 and clipped.endswith(MORE_IN_REPORTS)
    assert one_long.startswith(clipped[: -len(MORE_IN_REPORTS) - 1].rstrip())


def test_the_cli_shows_each_unsupported_reason_once_and_whole(capsys):
    rc = main(
        ["check", "tests/module_samples.py:Shift", "--samples",
         "tests/module_samples.py:integer_samples", "--no-isolate"]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert rc == 0
    reason = "(no floating-point tensor argument: nothing to differentiate)"
    rows = [ln for ln in out.splitlines() if ln.startswith("  ---- ")]
    assert sum(reason in ln for ln in rows) == 1
    assert "  ---- vjp            1 unsupported (as jvp)" in out
    contract = next(ln for ln in out.splitlines() if ln.startswith("  ---- contract"))
    assert contract.endswith("(the vmap checks still test its results))"), contract


def test_the_float32_leg_is_announced_where_it_runs(capsys):
    argv = ["check", f"{PC}:TwiceTheGradient", "--samples", f"{PC}:two_samples", "--no-isolate"]
    main([*argv, "--checks", "vjp"])
    out = capsys.readouterr().out
    assert "dtypes: float64 samples are also checked at float32" in out
    assert "--dtypes float64 to skip" in out
    main([*argv, "--checks", "vjp", "--dtypes", "float64"])
    assert "float64 samples are also checked" not in capsys.readouterr().out
    main([*argv, "--checks", "vmap"])  # no leg check selected: no leg, no announcement
    assert "float64 samples are also checked" not in capsys.readouterr().out


TEST_MODULE = """
from harness.pytest_plugin import conformance_tests
from mylib import BrokenRotatePoints, RotatePoints, rotation_samples

test_broken = conformance_tests(BrokenRotatePoints, rotation_samples, checks=["vmap", "contract"])
test_good = conformance_tests(RotatePoints, rotation_samples, checks=["vmap"])
"""


def test_the_pytest_plugin_summarises_failures_by_root_cause(pytester, monkeypatch):
    pytester.makepyfile(
        mylib=(ROOT / "examples" / "rotations.py").read_text(), test_conformance=TEST_MODULE
    )
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), str(pytester.path)]))
    result = pytester.runpytest_subprocess("-n", "2", "-p", "no:cacheprovider", timeout=300)
    outcomes = result.parseoutcomes()
    assert outcomes["failed"] == 25, outcomes  # one item per case, as before
    text = result.stdout.str()
    section = text.split("afdb: non-conforming cases by root cause", 1)[1]
    section = section.split("short test summary info", 1)[0]
    assert "BrokenRotatePoints: 25 cases do not conform, 1 root cause:" in section
    assert "  FAIL 25 cases in " in section and "(one root cause)" in section
    assert section.count("reproduce: afdb repro") == 1
    assert "RotatePoints/" not in section.replace("BrokenRotatePoints/", "")


def test_a_conforming_session_has_no_root_cause_section(pytester, monkeypatch):
    pytester.makepyfile(
        mylib=(ROOT / "examples" / "rotations.py").read_text(),
        test_conformance=TEST_MODULE.replace("test_broken = ", "_broken = "),
    )
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), str(pytester.path)]))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", timeout=300)
    assert result.ret == 0
    assert "root cause" not in result.stdout.str()


def test_the_markdown_report_says_what_follows_from_the_cause():
    from harness.core.results import RunResult
    from harness.reports.report import to_markdown

    cases = [_case("vjp", 0, VJP), _case("vjp", 0, LEG, leg=True), _case("jacrev", 0, JAC)]
    md = to_markdown(RunResult(cases))
    assert "3 cases in vjp, jacrev (the float32 leg and jacrev fail where vjp does)" in md
