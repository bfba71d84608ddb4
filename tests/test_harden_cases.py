"""Nothing a Function does takes the run down or is blamed on another case (issue 13, items 3-6)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from harness import check
from harness.core.options import Options
from harness.core.textsafe import MESSAGE_LIMIT
from harness.engine.case_state import GlobalState
from tests import hostile_state as hs

ROOT = Path(__file__).resolve().parent.parent
HOSTILE = Path(__file__).resolve().parent / "hostile_state.py"


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(ROOT))


def _afdb(args: list[str], cwd: Path, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "harness.cli", *args],
        capture_output=True,
        text=True,
        env=_env(),
        cwd=cwd,
        timeout=timeout,
    )


# --- item 3: exceptions that fight back ------------------------------------------------------


def test_exception_whose_str_raises_is_an_error_of_its_case():
    r = check(hs.RaisesStrRaises, hs.samples, checks=["vmap"])
    assert {c.status for c in r.cases} == {"error"}
    assert "<unprintable StrRaises: its __str__ raised RuntimeError>" in r.cases[0].message


def test_exception_whose_str_hangs_is_a_timeout_in_process():
    start = time.monotonic()
    r = check(hs.RaisesStrHangs, hs.samples, checks=["vmap"], timeout_s=0.3)
    assert {c.status for c in r.cases} == {"timeout"}
    assert "its __str__ or __repr__ does not return" in r.cases[0].message
    assert time.monotonic() - start < 60


@pytest.mark.parametrize(
    ("function", "text"),
    [
        (hs.RaisesKeyboardInterrupt, "raised KeyboardInterrupt itself (no Ctrl-C was pressed)"),
        (hs.RaisesCancelled, "raised CancelledError: task cancelled"),
    ],
)
def test_base_exceptions_from_the_function_are_errors_and_the_run_goes_on(function, text):
    r = check(function, hs.samples, checks=["vmap", "vmap_nested"])
    assert r.cases and {c.status for c in r.cases} == {"error"}
    assert all(text in c.message for c in r.cases), r.cases[0].message
    assert {c.check for c in r.cases} == {"vmap", "vmap_nested"}


def test_base_exceptions_in_worker_processes_and_the_str_hang_under_no_isolate(tmp_path):
    """Under workers no later case is 'not run'; with --no-isolate a hanging __str__ times out."""
    report = tmp_path / "mixed.json"
    proc = _afdb(
        [
            "check",
            f"{HOSTILE}:MixedBaseExceptions",
            "--samples",
            f"{HOSTILE}:samples",
            "--checks",
            "vmap",
            "--json",
            str(report),
        ],
        tmp_path,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    cases = json.loads(report.read_text())["cases"]
    assert len(cases) >= 3 and {c["status"] for c in cases} == {"error"}
    assert not any("not run" in c["message"] for c in cases)
    text = " ".join(c["message"] for c in cases)
    for phrase in ("KeyboardInterrupt itself", "CancelledError", "<unprintable StrRaises"):
        assert phrase in text
    report = tmp_path / "hang.json"
    proc = _afdb(
        [
            "check",
            f"{HOSTILE}:RaisesStrHangs",
            "--samples",
            f"{HOSTILE}:samples",
            "--checks",
            "vmap",
            "--batch-size",
            "2",
            "--timeout",
            "0.3",
            "--no-isolate",
            "--json",
            str(report),
        ],
        tmp_path,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert {c["status"] for c in json.loads(report.read_text())["cases"]} == {"timeout"}


def test_pytest_plugin_session_survives_a_keyboard_interrupt_from_the_function(tmp_path):
    (tmp_path / "test_conf.py").write_text(
        textwrap.dedent(
            """
            from harness.pytest_plugin import conformance_tests
            from tests.hostile_state import RaisesKeyboardInterrupt, samples

            test_ki = conformance_tests(RaisesKeyboardInterrupt, samples, checks=["vmap"])


            def test_after():
                pass
            """
        )
    )
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_conf.py"],
        capture_output=True,
        text=True,
        env=_env(),
        cwd=tmp_path,
        timeout=240,
    )
    assert "1 passed" in proc.stdout, proc.stdout
    assert "failed" in proc.stdout and "Interrupted" not in proc.stdout, proc.stdout
    assert proc.returncode == 1


def test_a_real_ctrl_c_still_interrupts_the_run(tmp_path):
    """SIGINT during a case (not a KeyboardInterrupt the Function raised) stops the run."""
    script = tmp_path / "run.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import os, signal, sys, threading
            # as an interactive Python has it: a test run started in the background by a
            # non-interactive shell inherits SIGINT ignored, and Python then keeps it so
            signal.signal(signal.SIGINT, signal.default_int_handler)
            sys.path.insert(0, {str(ROOT)!r})
            from harness import check
            from tests.hostile_state import SlowDouble, samples

            class CtrlCDuringACase(SlowDouble):
                # the Ctrl-C comes from another thread while the first rule call sleeps (a
                # timer started before check() could land before any case under load)
                started = False

                @staticmethod
                def vmap(info, in_dims, x):
                    if not CtrlCDuringACase.started:
                        CtrlCDuringACase.started = True
                        kill = lambda: os.kill(os.getpid(), signal.SIGINT)
                        threading.Timer(0.05, kill).start()
                    return SlowDouble.vmap(info, in_dims, x)

            try:
                check(CtrlCDuringACase, samples, checks=["vmap"])
            except KeyboardInterrupt:
                print("INTERRUPTED")
                sys.exit(0)
            print("RAN TO THE END")
            """
        )
    )
    proc = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, env=_env(), timeout=240
    )
    assert "INTERRUPTED" in proc.stdout, proc.stdout + proc.stderr


# --- item 4: global state ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("action", "phrase"), hs.STATE_ACTIONS, ids=lambda v: getattr(v, "__name__", "")
)
def test_leaked_global_state_is_reported_on_its_case_and_restored(action, phrase):
    before = GlobalState.capture()
    cwd = os.getcwd()
    fn = hs.leaves(action)
    r = check(fn, hs.samples, checks=["vmap"])
    first, rest = r.cases[0], r.cases[1:]
    # put back by the suite: a note where it changes nothing computed (issue 34), a failure
    # of the case that changed it where it changes results (issue 42)
    harmless = (action, phrase) in hs.NOTE_STATE_ACTIONS
    assert first.status == ("pass" if harmless else "fail"), first.message
    assert f"{'note: ' if harmless else ''}the Function {phrase}" in first.message
    assert "restored before the next case" in first.message
    assert rest and all(c.status == "pass" for c in rest), [c.message for c in rest]
    after = GlobalState.capture()
    assert after == before, (before, after)
    assert os.getcwd() == cwd
    assert torch.get_default_device() == torch.device("cpu")
    assert not torch.is_autocast_enabled("cpu")


def test_state_changed_later_by_a_thread_is_not_blamed_on_a_later_case():
    hs.LateThread.started.clear()
    hs.LateThread.calls.clear()
    try:
        r = check(hs.LateThread, hs.samples, checks=["vmap", "vmap_nested"], batch_sizes=(2,))
        hs.LateThread.started[0].join()
    finally:
        torch.set_default_dtype(torch.float32)
    assert len(r.cases) >= 10  # the change comes at the third rule call: cases remain after it
    assert all(c.status == "pass" for c in r.cases), [(c.id, c.message) for c in r.cases]
    assert "left 1 thread(s) running (late-dtype)" in r.cases[0].message
    noted = [c for c in r.cases if "torch.float64" in c.message]
    assert len(noted) == 1, [c.message for c in r.cases]
    assert "not blamed" in noted[0].message
    assert torch.get_default_dtype() == torch.float32


def test_state_changed_strictly_between_two_cases_is_put_back_and_noted():
    from harness.core.options import Options
    from harness.engine.case_state import forget_last_case
    from harness.engine.cases import enumerate_cases
    from harness.engine.runner import run_case
    from harness.engine.sample_cache import EntryData
    from harness.sources.entries import make_entry

    data = EntryData(make_entry(hs.Correct, hs.samples), Options(checks=("vmap",)))
    first, second = enumerate_cases(data)[:2]
    forget_last_case()
    assert run_case(data, first, watch_between=True).status == "pass"
    torch.use_deterministic_algorithms(True)  # as a thread would, after the case ended
    try:
        r = run_case(data, second, watch_between=True)
    finally:
        torch.use_deterministic_algorithms(False)
    assert r.status == "pass", r.message
    assert "between the previous case and this one" in r.message
    assert "left torch.use_deterministic_algorithms on" in r.message
    assert "not blamed" in r.message


def test_no_isolate_report_lands_where_named_when_the_function_changes_cwd(
    tmp_path, monkeypatch, capsys
):
    import harness.cli.main as cli

    monkeypatch.chdir(tmp_path)
    code = cli.main(
        [
            "check",
            f"{HOSTILE}:LeavesCwd",
            "--samples",
            f"{HOSTILE}:samples",
            "--checks",
            "vmap",
            "--no-isolate",
            "--json",
            "r.json",
        ]
    )
    assert code == 0  # the case that changed the directory has a note (put back), no error
    assert (tmp_path / "r.json").exists()
    assert os.getcwd() == str(tmp_path)
    data = json.loads((tmp_path / "r.json").read_text())
    assert "left the working directory at" in data["cases"][0]["message"]


# --- item 5: forks ---------------------------------------------------------------------------


def test_a_forked_child_is_killed_at_case_end_and_the_case_says_so():
    hs.Forks.forked.clear()
    r = check(hs.Forks, hs.samples, checks=["vmap"])
    first = r.cases[0]
    assert first.status == "error"
    assert "left 1 child process(es) running after the case" in first.message
    pid = hs.Forks.forked[0]
    assert f"pid {pid}" in first.message
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # killed and reaped
    assert all(c.status == "pass" for c in r.cases[1:])


def test_a_process_the_caller_starts_between_two_runs_is_left_alone():
    """Cases start from their predecessor's end scan only within a run: a process the
    caller started after one run (a server in a test suite) is not the next run's case's."""
    from harness.engine.runner import run_entries
    from harness.sources.database import load_source

    entry = [e for e in load_source("afdb") if e.name == "NumpyCube"]
    options = Options(checks=("vmap",))
    assert all(c.status == "pass" for c in run_entries(entry, options))
    server = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        second = run_entries(entry, options)
        assert all(c.status == "pass" for c in second), [c.message for c in second]
        assert server.poll() is None  # still running
    finally:
        server.kill()
        server.wait()


def test_afdb_check_does_not_wait_for_children_that_escape(tmp_path):
    """A double-forked grandchild in its own session still holds the worker's pipes."""
    start = time.monotonic()
    report = tmp_path / "r.json"
    proc = _afdb(
        [
            "check",
            f"{HOSTILE}:DaemonFork",
            "--samples",
            f"{HOSTILE}:samples",
            "--checks",
            "vmap",
            "--batch-size",
            "3",
            "--json",
            str(report),
        ],
        tmp_path,
        timeout=120,
    )
    elapsed = time.monotonic() - start
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert elapsed < 50, elapsed
    cases = {c["id"]: c for c in json.loads(report.read_text())["cases"]}
    assert "DaemonFork/vmap/s0/in_dims=(0,),B=3" in cases
    for cid, c in cases.items():  # the rule forks when called at in_dims (0,)
        if "in_dims=(0,)" in cid:
            assert c["status"] == "error" and "child process(es)" in c["message"], c
        else:
            assert c["status"] == "pass", c


def test_a_finished_command_does_not_wait_for_a_thread_a_function_left_running(tmp_path):
    """A non-daemon thread (sleeping 120 s) would hold an ordinary interpreter exit; the
    command ends once its report is written, and the report and summary are whole."""
    report = tmp_path / "r.json"
    proc = _afdb(
        [
            "check",
            f"{HOSTILE}:LingeringThread",
            "--samples",
            f"{HOSTILE}:samples",
            "--checks",
            "vmap",
            "-n",
            "0",
            "--json",
            str(report),
        ],
        tmp_path,
        timeout=90,  # the thread sleeps 120 s: waiting for it fails the test
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "PASS" in proc.stdout
    cases = json.loads(report.read_text())["cases"]
    assert cases and all(c["status"] == "pass" for c in cases)
    assert any("left 1 thread(s) running (lingering)" in c["message"] for c in cases)


# --- item 6: bounded messages ----------------------------------------------------------------


def test_a_five_megabyte_exit_message_is_capped_keeping_both_ends():
    r = check(hs.ExitsHuge, hs.samples, checks=["vmap"])
    c = r.cases[0]
    assert c.status == "error"
    assert len(c.message) <= MESSAGE_LIMIT + 200
    assert "characters truncated" in c.message
    assert c.message.startswith("the Function called sys.exit(")
    assert len(r.to_json()) < 20_000 * len(r.cases)


def _start_thread_as_torch(event: threading.Event) -> None:
    """Start a thread from code whose file name lies inside torch's package, as
    torch.compile's inductor does for its compile pool (nothing is written there)."""
    fake = os.path.join(os.path.dirname(torch.__file__), "_afdb_test_pool.py")
    namespace = {"threading": threading, "event": event}
    code = "t = threading.Thread(target=event.wait, name='torch-pool', daemon=True)\nt.start()"
    exec(compile(code, fake, "exec"), namespace)


class LeaksGradMode(hs.Double):
    """Leaves grad mode disabled from its rule: every case of it must be blamed."""

    @staticmethod
    def vmap(info, in_dims, x):
        torch.set_grad_enabled(False)
        return hs._ok(x, in_dims)


def _then_a_leak_is_blamed(first: type, cleanup: Callable[[], None]) -> None:
    """Run ``first`` then ``LeaksGradMode`` in one run: ``first``'s cases pass with no
    thread note, and the later leak is still blamed on its own case, never taken for a
    thread's doing (grad mode changes results: a failure, issue 42)."""
    from harness.engine.runner import run_entries
    from harness.sources.entries import make_entry

    entries = [make_entry(first, hs.samples), make_entry(LeaksGradMode, hs.samples)]
    try:
        results = run_entries(entries, Options(checks=("vmap",)))
    finally:
        cleanup()
    ours = [r for r in results if r.entry == first.__name__]
    leaks = [r for r in results if r.entry == "LeaksGradMode"]
    assert ours and all(r.status == "pass" and "thread" not in r.message for r in ours), [
        r.message for r in ours
    ]
    # grad mode changes what the caller computes next: a failure of its case (issue 42)
    assert leaks and all(r.status == "fail" for r in leaks), [r.message for r in leaks]
    assert all("the Function left grad mode disabled" in r.message for r in leaks)
    assert not any("not blamed" in r.message for r in leaks)
    assert torch.is_grad_enabled()


def test_a_thread_torch_starts_during_a_case_is_not_the_functions():
    """torch's own threads (inductor's compile pool) are neither noted as the Function's
    nor make later leaks 'not blamed'."""

    release = threading.Event()

    class StartsTorchPool(hs.Double):
        started: list[int] = []

        @staticmethod
        def vmap(info, in_dims, x):
            if not StartsTorchPool.started:
                StartsTorchPool.started.append(1)
                _start_thread_as_torch(release)
            return hs._ok(x, in_dims)

    _then_a_leak_is_blamed(StartsTorchPool, release.set)


def test_a_thread_another_thread_starts_during_a_case_is_not_the_functions():
    """A thread some other thread of the process starts while a case runs (a test runner's
    or a logging library's, on its own schedule) is not taken for the Function's: no note,
    and a later leak is still blamed. A thread the Function starts from its own thread
    still is noted (``test_state_changed_later_by_a_thread_is_not_blamed_on_a_later_case``)."""

    go, started, release = threading.Event(), threading.Event(), threading.Event()

    def bystander() -> None:  # started before any case: not a Function's thread
        go.wait(30)
        threading.Thread(target=release.wait, args=(30,), name="bystander-child").start()
        started.set()

    class WakesBystander(hs.Double):
        woken: list[int] = []

        @staticmethod
        def vmap(info, in_dims, x):
            if not WakesBystander.woken:
                WakesBystander.woken.append(1)
                go.set()
                started.wait(30)  # the bystander starts its thread during this case
            return hs._ok(x, in_dims)

    def cleanup() -> None:
        go.set()
        release.set()
        waiter.join(30)

    waiter = threading.Thread(target=bystander, name="bystander", daemon=True)
    waiter.start()
    _then_a_leak_is_blamed(WakesBystander, cleanup)
    assert started.is_set()
