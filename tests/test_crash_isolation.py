"""No Function can end the session: ``pytest --afdb`` and ``afdb record --check`` in a
process that is not safe to fork (the hazard project's thread pools), with Functions that
take a live argument (a lambda: only the pytest process has it) and kill their process
inside one check: a segfault (``ctypes.string_at(0)``) and a SIGKILL, next to a correct one.

The fresh worker interpreters make the live-valued Functions again by re-running their
tests (``harness.plugin.replay``); a death costs its case (``crash``, named with the signal),
every other Function keeps its verdict, the session ends normally, the JSON report exists.
The planted twin: the same project checked in the pytest process (``--afdb-workers=0``)
dies with the segfault, and still leaves the JSON report of the Functions that finished
(``harness.session.journal``).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from harness.core.schema import read_report

ROOT = Path(__file__).resolve().parent.parent
PROJECT = Path(__file__).resolve().parent / "fork_hazard_project"

LIVE_TEST = '''import ctypes
import os
import signal

import torch

import hazlib


def _cotangent_of_a_check(grad):
    """The tests differentiate a sum (a cotangent of ones); the checks draw others."""
    return not bool((grad == 1).all())


class Scaled(torch.autograd.Function):
    """fn(x) for a live fn (a lambda), with the gradient of fn = 2 x."""

    @staticmethod
    def forward(x, fn):
        hazlib._flush_cache()
        return fn(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, grad):
        return 2 * grad, None


class Segfaulting(Scaled):
    @staticmethod
    def backward(ctx, grad):
        if _cotangent_of_a_check(grad):
            ctypes.string_at(0)
        return 2 * grad, None


class Killed(Scaled):
    @staticmethod
    def backward(ctx, grad):
        if _cotangent_of_a_check(grad):
            os.kill(os.getpid(), signal.SIGKILL)
        return 2 * grad, None


def _x():
    return torch.linspace(-1, 1, 6, dtype=torch.float64).reshape(2, 3).requires_grad_()


def test_scaled():
    Scaled.apply(_x(), lambda t: 2 * t).sum().backward()


def test_segfaulting():
    Segfaulting.apply(_x(), lambda t: 2 * t).sum().backward()


def test_killed():
    Killed.apply(_x(), lambda t: 2 * t).sum().backward()
'''

SCALED, SEGFAULTING, KILLED = "test_live:Scaled", "test_live:Segfaulting", "test_live:Killed"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    folder = tmp_path / "proj"
    shutil.copytree(PROJECT, folder, ignore=shutil.ignore_patterns("__pycache__"))
    (folder / "test_hazlib.py").write_text((folder / "hazlib_tests.py").read_text())
    (folder / "test_live.py").write_text(LIVE_TEST)
    return folder


def _run(folder: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("HAZLIB_PLANTED", "AFDB_WORKER_ENGINE")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(folder)])
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return subprocess.run(
        [sys.executable, *argv], cwd=folder, env=env, capture_output=True, text=True, timeout=420
    )


PYTEST = ["-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", "-W", "ignore"]
FILES = ["test_hazlib.py", "test_live.py"]


def _statuses(report: dict) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for case in report["cases"]:
        out.setdefault(case["entry"], set()).add(case["status"])
    return out


def _verdict(out: str, name: str) -> str:
    return next(ln for ln in out.splitlines() if ln.strip().startswith(name + " "))


def _assert_survived(proc: subprocess.CompletedProcess[str], report: Path) -> None:
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out  # the session ended itself: the Functions fail
    assert "fresh worker interpreters" in out and "re-running the tests" in out, out
    statuses = _statuses(read_report(report))
    assert statuses[SCALED] == {"pass"}, (statuses, out)
    assert statuses["hazlib:ForkedSin"] == {"pass"} and statuses["hazlib:PooledCube"] == {"pass"}
    assert statuses[SEGFAULTING] == {"crash"} and statuses[KILLED] == {"crash"}, statuses
    assert "conforms" in _verdict(out, SCALED) and "FAIL" in _verdict(out, SEGFAULTING), out
    cases = read_report(report)["cases"]
    segv = {c["message"] for c in cases if c["entry"] == SEGFAULTING}
    killed = {c["message"] for c in cases if c["entry"] == KILLED}
    assert all("Segmentation fault" in m for m in segv), segv
    assert all("SIGKILL" in m for m in killed), killed


def test_pytest_afdb_survives_a_segfault_and_a_sigkill(project: Path):
    argv = [*PYTEST, *FILES, "--afdb", "--afdb-checks=vjp", "--afdb-json=r.json"]
    proc = _run(project, *argv)
    _assert_survived(proc, project / "r.json")
    assert "passed" in proc.stdout  # pytest's own summary: the session ended normally


def test_planted_checked_in_the_pytest_process_the_segfault_ends_it(project: Path):
    """``--afdb-workers=0`` asks for the pytest process: the segfault takes the session
    down (what every live-valued Function risked before), and the JSON report written as
    the check went holds the Functions that finished, saying what did not."""
    (project / "test_live.py").write_text(LIVE_TEST.replace("def test_killed", "def _killed"))
    argv = [*PYTEST, *FILES, "--afdb", "--afdb-checks=vjp", "--afdb-json=r.json"]
    proc = _run(project, *argv, "--afdb-workers=0")
    assert proc.returncode == -signal.SIGSEGV, proc.stdout + proc.stderr
    report = read_report(project / "r.json")
    assert report["metadata"]["interrupted"] is True
    statuses = _statuses(report)
    assert statuses["hazlib:ForkedSin"] == {"pass"}, statuses
    assert SEGFAULTING not in statuses  # it was running
    assert "not started" in report["metadata"]["journal"]


def test_afdb_record_check_survives_them_too(project: Path):
    argv = ["-m", "harness.cli", "record", "--check", "-o", "rec", *PYTEST[:1], "pytest", "-q"]
    argv += ["-p", "no:cacheprovider", "-p", "no:randomly", "-W", "ignore", *FILES]
    argv += ["--afdb-checks=vjp", "--afdb-json=r.json"]
    proc = _run(project, *argv)
    _assert_survived(proc, project / "r.json")


def test_the_partial_report_says_what_finished_and_what_did_not(tmp_path: Path):
    from harness.core.options import Options
    from harness.core.results import CaseResult
    from harness.engine.metadata import run_metadata
    from harness.session.journal import Journal

    path = tmp_path / "r.json"
    journal = Journal(str(path), lambda: run_metadata(Options(), started=0.0), ["A", "B", "C"])
    journal.write()
    assert read_report(path)["cases"] == []

    def record(entry: str, i: int) -> CaseResult:
        return CaseResult(f"{entry}/vjp/s{i}", entry, "vjp", i, f"s{i}", None, "pass")

    journal(record("A", 0))
    journal(record("A", 1))
    journal(record("B", 0))  # A is complete: in the file before B's cases go on
    report = read_report(path)
    assert {c["id"] for c in report["cases"]} >= {"A/vjp/s0", "A/vjp/s1"}
    assert report["metadata"]["interrupted"] is True
    assert report["metadata"]["journal"].endswith("not started: B, C")


def test_a_worker_ended_by_a_signal_is_named(tmp_path: Path):
    from harness.engine.forkpool import exit_signal

    pid = os.fork()
    if pid == 0:
        os.kill(os.getpid(), signal.SIGKILL)
    assert exit_signal(pid, wait_s=5).strip().endswith("SIGKILL")
    pid = os.fork()
    if pid == 0:
        os._exit(3)  # the twin: an exit, not a signal
    assert exit_signal(pid, wait_s=5) == ""


def test_the_check_uses_the_cores_by_default():
    import argparse

    from harness.engine.cores import physical_cores
    from harness.session.check_phase import default_workers

    two = [object(), object()]
    args = argparse.Namespace(workers=None)
    line = default_workers(args, two)
    assert args.workers == str(min(2, physical_cores()))
    assert "one per Function" in line and "--afdb-workers" in line
    args = argparse.Namespace(workers=None)
    assert default_workers(args, two[:1]) == ""  # one Function: one worker (isolation)
    assert args.workers is None
    args = argparse.Namespace(workers="0")  # asked for: kept
    default_workers(args, two)
    assert args.workers == "0"


UNDER_VMAP_ONLY = """import torch


class Doubled(torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return 2 * x

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, grad):
        return 2 * grad


def test_under_vmap():
    torch.func.vmap(Doubled.apply)(torch.ones(2, 3))
"""


@pytest.mark.parametrize("plain_call", [False, True])
def test_the_json_report_is_written_when_nothing_could_be_checked(tmp_path: Path, plain_call):
    """A Function called only under vmap is not recordable: nothing is checked, exit 5,
    and the JSON report still says why; the twin with a plain call too checks its cases."""
    text = UNDER_VMAP_ONLY + (
        "\n\ndef test_plain():\n    Doubled.apply(torch.ones(3))\n" if plain_call else ""
    )
    (tmp_path / "test_vmapped.py").write_text(text)
    proc = _run(
        tmp_path, *PYTEST, "test_vmapped.py", "--afdb", "--afdb-checks=vmap", "--afdb-json=r.json"
    )
    out = proc.stdout + proc.stderr
    report = read_report(tmp_path / "r.json")
    if plain_call:
        assert proc.returncode == 0 and report["cases"], out
    else:
        assert proc.returncode == 5, out
        assert report["cases"] == []
        (verdict,) = report["metadata"]["recorded"]["verdicts"]
        assert "under a torch.func transform" in json.dumps(verdict), verdict


def test_two_crashes_in_a_check_and_its_other_cases_are_not_run(tmp_path: Path):
    """Each crash costs a fresh worker (for a replayed Function, a re-run of its tests): after
    two in one (entry, check) the rest of that check is ``crash`` "not run"; one is not enough,
    and another check of the same Function still runs. Shared through the ledger's file, as
    the xdist controller's crash hook writes it."""
    from harness.core.results import CaseResult
    from harness.engine.timeouts import TimeoutLedger, note_crashed_timeout

    def crash(case_id: str) -> CaseResult:
        entry, check = case_id.split("/")[:2]
        return CaseResult(case_id, entry, check, 0, "s0", None, "crash", "killed")

    ledger = TimeoutLedger()
    ledger.attach(str(tmp_path))
    ledger.note(crash("F/vmap/s0/a"))
    reader = TimeoutLedger()
    reader.attach(str(tmp_path))
    reader.hung_in("F", 0)  # reads the file
    assert reader.crashed_out("F", "vmap") == []  # one crash: the other cases still run
    # the xdist controller's hook: a worker died running a case, no watchdog in its faults
    (tmp_path / "running-7.txt").write_text("F/vmap/s0/b")
    (tmp_path / "faults-7.txt").write_text("Fatal Python error: Segmentation fault")
    note_crashed_timeout(str(tmp_path), "F/vmap/s0/b")
    reader.hung_in("F", 0)
    assert reader.crashed_out("F", "vmap") == ["F/vmap/s0/a", "F/vmap/s0/b"]
    assert reader.crashed_out("F", "vjp") == []
    assert reader.exhausted("F", "vmap") == []  # crashes are not timeouts


PLAIN_CALL_TARGETS = '''import ctypes

import torch


class Segv(torch.autograd.Function):
    """Kills its process on any call, a plain one included."""

    @staticmethod
    def forward(x):
        ctypes.string_at(0)
        return 2 * x

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, grad):
        return 2 * grad


class Double(Segv):
    @staticmethod
    def forward(x):
        return 2 * x


def samples():
    return [(torch.ones(2, 3, dtype=torch.float64),)]


def extra_samples():
    return [(torch.ones(2, 3, dtype=torch.float64), torch.ones(1))]
'''


def test_the_samples_probe_of_a_process_that_cannot_fork_runs_in_a_fresh_interpreter(
    tmp_path: Path, monkeypatch
):
    """``afdb check TARGET`` from a process with a thread pool: the samples' plain calls run
    in a fresh interpreter made from the spec, so a Function that segfaults on a plain call
    costs that interpreter (no answer: its cases say what happens), not this process; the
    twin: samples that do not fit are still refused, with the fresh interpreter's answer."""
    from harness.core.errors import UsageError
    from harness.core.options import Options
    from harness.engine import fork_safety
    from harness.sources.target import TargetSource, TargetSpec

    path = tmp_path / "plaincall.py"
    path.write_text(PLAIN_CALL_TARGETS)
    monkeypatch.delenv("AFDB_WORKER_ENGINE", raising=False)
    monkeypatch.setattr(fork_safety, "hazards", lambda: ["a pool is running"])
    monkeypatch.setattr("harness.engine.forkpool.available", lambda: True)

    def no_fork() -> int:
        raise AssertionError("this process must not fork")

    monkeypatch.setattr(os, "fork", no_fork)
    crashing = TargetSource(TargetSpec(f"{path}:Segv", samples=f"{path}:samples"))
    options = crashing.options(crashing.entries(), Options(timeout_s=30.0))
    assert options is not None  # this process is alive, and nothing was refused
    unfit = TargetSource(TargetSpec(f"{path}:Double", samples=f"{path}:extra_samples"))
    with pytest.raises(UsageError, match="TypeError"):
        unfit.options(unfit.entries(), Options(timeout_s=30.0))
