"""Whose fault, and for how long (issue 19 section 2, issue 21 sections 4 and 5).

Timeouts are ``timeout`` wherever the limit finds the case (a suite frame, torch's
autograd engine, a Function that cancelled the timer, a thread other than the main one);
a Function's leaked state is its own ``error``, never ``internal``; two timeouts in one
(entry, check) and its other cases are not run.

Tests whose Function would hang forever without the fix run in a subprocess with a
timeout, so that before the fix they fail instead of hanging the test run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import torch

from harness import check
from harness.core.results import CaseResult
from harness.engine.timeouts import NOT_RUN, NOT_RUN_PREFIX
from tests import blame_functions as bf

ROOT = Path(__file__).resolve().parent.parent
PLANTED = Path(__file__).resolve().parent / "blame_functions.py"


def _env(**extra: str) -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(ROOT), **extra)


def _python(code: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter; its last line of output is JSON."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=_env(),
        cwd=ROOT,
        timeout=timeout,
    )


def _statuses(proc: subprocess.CompletedProcess[str]) -> list[dict[str, str]]:
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


_CHECK = """
import json, sys
from harness import check
from tests.blame_functions import {name}, samples
r = check({name}, samples, checks={checks!r}, timeout_s={limit})
print(json.dumps([{{"id": c.id, "status": c.status, "message": c.message}} for c in r.cases]))
"""


def _clean_state() -> None:
    assert torch.is_grad_enabled()
    assert torch._C._functorch.get_dynamic_layer_stack_depth() == 0


# --- a timeout is `timeout`, wherever it finds the case ----------------------------------


def test_a_timeout_inside_the_suites_reference_wrapper_is_timeout_not_internal():
    """The finite-difference reference runs the Function in float64 inside the suite's
    wrapper; the limit fires there. Before, the wrapped CaseTimeout read as the suite's bug."""
    r = check(bf.HangsInFloat64, bf.samples, checks=["jvp", "vjp"], timeout_s=0.5)
    assert r.cases
    for c in r.cases:
        assert c.status == "timeout", (c.id, c.status, c.message)
        assert "internal" not in c.message
        if not c.message.startswith(NOT_RUN_PREFIX):  # the rest: `forward` did not return
            assert "0.5 s limit" in c.message and "`forward` was running" in c.message
    _clean_state()


def test_a_function_that_catches_the_timeout_and_returns_is_still_a_timeout():
    r = check(bf.SwallowsTimeout, bf.samples, checks=["vmap"], timeout_s=0.2)
    assert r.cases and {c.status for c in r.cases} == {"timeout"}, [c.message for c in r.cases]
    assert "did not end with its timeout" in r.cases[0].message
    # the rule ran past the limit: its other cases on the sample are not run
    assert all(c.message.startswith("not run: `vmap` did not return") for c in r.cases[1:])


def test_a_backward_blocked_in_torchs_autograd_engine_times_out_in_process():
    """harness.check honours timeout_s while the main thread waits inside the autograd
    engine (the re-entrant backward runs in the engine's threads); before, it hung."""
    code = _CHECK.format(name="ReentrantBackward", checks=["vjp"], limit=0.5) + textwrap.dedent(
        """
        import torch
        x = torch.ones(3, requires_grad=True)
        assert torch.autograd.grad((x * 2).sum(), x)[0].tolist() == [2.0, 2.0, 2.0]
        """
    )
    cases = _statuses(_python(code, timeout=120))
    assert cases and {c["status"] for c in cases} == {"timeout"}, cases
    assert all("0.5 s limit" in c["message"] for c in cases)


def test_a_function_that_cancels_the_interval_timer_is_still_timed_out():
    for name in ("CancelsTimer", "CancelsAlarm"):
        cases = _statuses(_python(_CHECK.format(name=name, checks=["vmap"], limit=0.3)))
        assert cases and {c["status"] for c in cases} <= {"timeout"}, (name, cases)
        real = [c for c in cases if not c["message"].startswith(NOT_RUN_PREFIX)]
        assert real and all("cancelled it" in c["message"] for c in real), real[0]["message"]


def test_the_timer_cancelled_under_no_isolate_in_the_cli(tmp_path):
    report = tmp_path / "r.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness.cli",
            "check",
            f"{PLANTED}:CancelsTimer",
            "--samples",
            f"{PLANTED}:samples",
            "--checks",
            "vmap",
            "--timeout",
            "0.3",
            "--no-isolate",
            "--json",
            str(report),
        ],
        capture_output=True,
        text=True,
        env=_env(),
        cwd=tmp_path,
        timeout=120,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    cases = json.loads(report.read_text())["cases"]
    assert cases and {c["status"] for c in cases} == {"timeout"}
    assert "cancelled it (signal.alarm(0)" in cases[0]["message"]


def test_a_case_run_outside_the_main_thread_is_timed_out():
    code = """
    import json, threading
    from harness import check
    from tests.blame_functions import Hangs, samples
    out = []
    t = threading.Thread(target=lambda: out.append(check(Hangs, samples, checks=["vmap"], timeout_s=0.3)))
    t.start()
    t.join(100)
    r = out[0]
    print(json.dumps([{"id": c.id, "status": c.status, "message": c.message} for c in r.cases]))
    """
    cases = _statuses(_python(code, timeout=120))
    assert cases and {c["status"] for c in cases} == {"timeout"}, cases
    assert "outside the main thread" in cases[0]["message"]


# --- leaked state: the Function's error, never internal -----------------------------------


def test_a_leaked_transform_level_the_suite_trips_over_is_the_functions_error():
    r = check(bf.LeavesLevelEveryCall, bf.samples)
    statuses = Counter(c.status for c in r.cases)
    assert "internal" not in statuses, [c.message for c in r.cases if c.status == "internal"][:2]
    leaked = [c for c in r.cases if "left 1 torch.func transform level" in c.message]
    # a note where the case itself went through (issue 34), never internal
    assert leaked and all(c.status in ("pass", "fail", "error") for c in leaked)
    tripped = [c for c in r.cases if "the suite's code that ran after it failed" in c.message]
    assert tripped, statuses  # the cases that used to read as internal errors
    assert all(c.message.startswith("the Function left 1 torch.func") for c in tripped)
    assert all("please report it" not in c.message for c in tripped)
    _clean_state()


def test_signals_left_blocked_are_noted_and_unblocked():
    import signal

    r = check(bf.BlocksAlarm, bf.samples, checks=["vmap"], timeout_s=30)
    # put back by the suite: a note on each case, not its status (issue 34, part 4)
    assert r.cases and {c.status for c in r.cases} == {"pass"}, [c.message for c in r.cases]
    assert all("note: the Function left signals blocked (SIGALRM)" in c.message for c in r.cases)
    assert signal.SIGALRM not in signal.pthread_sigmask(signal.SIG_BLOCK, ())


def test_a_correct_function_is_unaffected():
    from tests.hostile_state import Correct

    r = check(Correct, bf.samples, checks=["vmap", "vjp", "jvp"], timeout_s=30)
    assert r.cases and {c.status for c in r.cases} == {"pass"}, [c.message for c in r.cases]


# --- two timeouts in a check: the rest is not run -----------------------------------------


def _per_check(cases: list[dict[str, str]]) -> dict[str, tuple[int, int]]:
    """Per check: (cases that ran and timed out, cases not run)."""
    out: dict[str, list[int]] = {}
    for c in cases:
        check_name = c["id"].split("/")[1]
        slot = out.setdefault(check_name, [0, 0])
        assert c["status"] == "timeout", c
        slot[1 if c["message"].startswith(NOT_RUN_PREFIX) else 0] += 1
    return {k: (v[0], v[1]) for k, v in out.items()}


# (A hang in a staticmethod of the Function costs one timeout per sample: tests/test_hang_once.py.
# These hang in a rule that is not the Function's own code, where only this rule stops them.)


def test_after_two_timeouts_in_process_the_checks_other_cases_are_not_run():
    r = check(bf.HangsOutsideItsOwnCode, bf.samples, checks=["vmap", "vmap_nested"], timeout_s=0.2)
    cases = [{"id": c.id, "status": c.status, "message": c.message} for c in r.cases]
    per = _per_check(cases)
    assert set(per) == {"vmap", "vmap_nested"}
    for ran, not_run in per.values():
        assert ran == 2 and not_run >= 1, per
    skipped = next(c for c in r.cases if c.message.startswith(NOT_RUN))
    assert skipped.repro.startswith("afdb repro ") and skipped.duration_s == 0.0


def _afdb_check(tmp_path: Path, name: str, *args: str, **env: str) -> list[dict[str, str]]:
    report = tmp_path / f"{name}.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness.cli",
            "check",
            f"{PLANTED}:{name}",
            "--samples",
            f"{PLANTED}:samples",
            "--json",
            str(report),
            *args,
        ],
        capture_output=True,
        text=True,
        env=_env(**env),
        cwd=tmp_path,
        timeout=240,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    return json.loads(report.read_text())["cases"]


def test_after_two_timeouts_in_a_forked_worker_the_rest_is_not_run(tmp_path):
    cases = _afdb_check(
        tmp_path, "HangsOutsideItsOwnCode", "--checks", "vmap,vmap_nested", "--timeout", "0.2"
    )
    for ran, not_run in _per_check(cases).values():
        assert ran == 2 and not_run >= 1


def test_after_a_native_hang_the_killed_workers_staticmethod_is_not_run_again(tmp_path):
    """SIGALRM blocked and a sleep in C: only the worker's watchdog ends the case (by
    killing the worker); the controller reads the staticmethod that hung from the worker's
    fault dump, and the rule's other cases on the sample are not run."""
    cases = _afdb_check(tmp_path, "BlocksAlarmAndSleeps", "--checks", "vmap", "--timeout", "0.2")
    ran, not_run = _per_check(cases)["vmap"]
    assert ran == 1 and not_run >= 1
    assert all("worker was killed" in c["message"] for c in cases if "not run" not in c["message"])
    assert all(
        c["message"].startswith("not run: `vmap` did not return in 0.2 s on sample 0")
        for c in cases
        if "not run" in c["message"]
    )


def test_after_two_timeouts_in_xdist_workers_the_rest_is_not_run(tmp_path):
    cases = _afdb_check(
        tmp_path,
        "HangsOutsideItsOwnCode",
        "--checks",
        "vmap",
        "--timeout",
        "0.2",
        AFDB_WORKER_ENGINE="xdist",
    )
    ran, not_run = _per_check(cases)["vmap"]
    assert ran == 2 and not_run >= 1


def test_timeouts_group_by_entry_and_check_not_by_where_they_were_stopped():
    from harness.reports.grouping import failure_groups

    def case(i: int, check_name: str, message: str) -> CaseResult:
        return CaseResult(
            id=f"F/{check_name}/s0/p{i}",
            entry="F",
            check=check_name,
            sample=0,
            sample_name="",
            plan=None,
            status="timeout",
            message=message,
        )

    cases = [
        case(0, "vjp", "the case ran past its 300 s limit; its worker was killed (at f.py:3 in a)"),
        case(1, "vjp", "the case ran past its 300 s limit; its worker was killed (at g.py:9 in b)"),
        case(2, "vjp", "the case ran longer than its 300 s limit"),
        case(3, "vjp", f"{NOT_RUN} (F/vjp/s0/p0 and F/vjp/s0/p1), so ..."),
        case(4, "jvp", "the case ran longer than its 300 s limit"),
    ]
    groups = failure_groups(cases)
    assert [(g.checks, g.count) for g in groups] == [(["vjp"], 4), (["jvp"], 1)]
