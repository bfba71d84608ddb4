"""Global state a Function leaves changed is put back (issue 34, part 4). Where it changes
nothing computed (threads, the working directory, signal handlers) it is a note: the case
keeps the status its comparisons earned, the note is on the case, in the Function's verdict
line and in the report. Where it changes what the caller's next line computes (autocast,
the default dtype or device, grad or inference mode, modes, anomaly mode, deterministic
algorithms) the case fails (issue 42, part 6).
"""

from __future__ import annotations

import signal

import pytest
import torch
import torch.autograd.forward_ad as fwAD

from harness import check
from harness.api import verdict_line
from harness.core.state_notes import case_note, changes_in, verdict_note
from harness.engine.case_state import GlobalState
from harness.reports.report import to_markdown
from tests import hostile_state as hs


def _set_threads():
    torch.set_num_threads(1 if torch.get_num_threads() != 1 else 2)


def _grad_off():
    torch.set_grad_enabled(False)


def _dtype_64():
    torch.set_default_dtype(torch.float64)


def _dual_level():
    fwAD.enter_dual_level()


def _inference_on():
    torch._C._set_grad_enabled(False)
    torch.inference_mode().__enter__()


def _alarm_handler():
    signal.signal(signal.SIGALRM, lambda *a: None)


#: Every kind of state the suite puts back that changes results, beyond hostile_state's
#: (autocast, device, modes, anomaly, deterministic).
MORE_RESULT_ACTIONS = (
    (_grad_off, "left grad mode disabled"),
    (_dtype_64, "left the default dtype at torch.float64"),
    (_dual_level, "left a forward-AD dual level open"),
    (_inference_on, "left"),
)
#: ... and that changes nothing computed, beyond hostile_state's (threads, working directory).
MORE_NOTE_ACTIONS = ((_alarm_handler, "replaced the SIGALRM handler"),)


@pytest.mark.parametrize(
    ("action", "phrase"),
    [*hs.RESULT_STATE_ACTIONS, *MORE_RESULT_ACTIONS],
    ids=lambda v: getattr(v, "__name__", ""),
)
def test_state_that_changes_results_fails_the_case_and_is_put_back(action, phrase):
    before = GlobalState.capture()
    grad, dtype = torch.is_grad_enabled(), torch.get_default_dtype()
    r = check(hs.leaves(action), hs.samples, checks=["vmap"], timeout_s=30)
    first, rest = r.cases[0], r.cases[1:]
    assert first.status == "fail", first.message
    assert f"the Function {phrase}" in first.message
    assert "changes what the caller's next line computes" in first.message
    assert "note: the Function" not in first.message  # a failure, not a note
    assert rest and {c.status for c in rest} == {"pass"}, [c.message for c in rest]
    assert r.exit_status == 1
    line = verdict_line(r)
    assert line.startswith("FAIL: ") and "not a verdict" not in line, line
    assert GlobalState.capture() == before
    assert (torch.is_grad_enabled(), torch.get_default_dtype()) == (grad, dtype)


@pytest.mark.parametrize(
    ("action", "phrase"),
    [*hs.NOTE_STATE_ACTIONS, *MORE_NOTE_ACTIONS],
    ids=lambda v: getattr(v, "__name__", ""),
)
def test_state_put_back_is_a_note_and_the_case_passes(action, phrase):
    before = GlobalState.capture()
    grad, dtype = torch.is_grad_enabled(), torch.get_default_dtype()
    r = check(hs.leaves(action), hs.samples, checks=["vmap"], timeout_s=30)
    assert {c.status for c in r.cases} == {"pass"}, [(c.id, c.message) for c in r.cases]
    first = r.cases[0]
    assert f"note: the Function {phrase}" in first.message, first.message
    assert "restored before the next case" in first.message
    assert r.exit_status == 0
    line = verdict_line(r)
    assert line.startswith("PASS: ") and "in 1 case, restored" in line, line
    assert "not a verdict" in line
    assert "## Notes (state put back, not a verdict)" in to_markdown(r)
    assert GlobalState.capture() == before
    assert (torch.is_grad_enabled(), torch.get_default_dtype()) == (grad, dtype)


class _WrongAndSetsThreads(hs.Double):
    """A wrong vmap rule (3x, not 2x) that also changes the number of threads."""

    @staticmethod
    def vmap(info, in_dims, x):
        _set_threads()
        return x * 3, in_dims[0]


def test_a_wrong_function_that_also_changes_state_still_fails():
    r = check(_WrongAndSetsThreads, hs.samples, checks=["vmap"])
    assert {c.status for c in r.cases} == {"fail"}, [c.message for c in r.cases]
    assert any("note: the Function left the number of threads" in c.message for c in r.cases)
    assert r.exit_status == 1
    assert verdict_line(r).startswith("FAIL: ")


def test_the_verdict_note_counts_cases_and_kinds_once():
    class C:
        def __init__(self, message):
            self.message = message

    cases = [
        C(case_note(["left the number of threads at 2 (was 1)"])),
        C("vmap: mismatch; " + case_note(["left the number of threads at 1 (was 2)"])),
        C(case_note(["left grad mode disabled", "left anomaly detection on"])),
        C("no note here"),
    ]
    assert changes_in(cases[2].message) == ["left grad mode disabled", "left anomaly detection on"]
    note = verdict_note(cases)
    assert note.count("number of threads") == 1  # one kind, whatever its values
    assert "in 3 cases, restored each time" in note
    assert verdict_note([C("nothing")]) == ""


def test_the_working_directory_note_carries_no_absolute_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    target = str(tmp_path / "sub")

    def chdir_sub():
        import os

        os.chdir(target)

    r = check(hs.leaves(chdir_sub), hs.samples, checks=["vmap"])
    assert "left the working directory at sub (relative to the previous one)" in (
        r.cases[0].message
    )
    assert str(tmp_path) not in r.cases[0].message


def test_a_recorded_functions_verdict_line_carries_the_note():
    from harness.core.results import CaseResult, RunResult
    from harness.recorded.verdicts import verdicts
    from harness.sources.recorded import CHECKED, RecordedEntry

    def case(status, message):
        return CaseResult("m:F/vmap/s0", "m:F", "vmap", 0, "", None, status, message)

    noted = case_note(["left the number of threads at 2 (was 1)"])
    result = RunResult([case("pass", noted), case("pass", "")])
    (v,) = verdicts(result, [RecordedEntry("m:F", CHECKED)])
    assert v.word == "conforms" and not v.failing
    assert v.line.startswith("conforms (2 cases); note: the Function left the number of threads")
    wrong = RunResult([case("fail", "vmap: mismatch; " + noted)])
    (v,) = verdicts(wrong, [RecordedEntry("m:F", CHECKED)])
    assert v.failing and v.line.startswith("FAIL: ") and "number of threads" in v.line
