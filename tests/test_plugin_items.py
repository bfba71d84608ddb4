"""The pytest plugin in a user's project (issue 30, parts 1 and 7): conformance items are
known by their marker, never by the folder a project lives in; a daemon a case starts does
not outlive pytest."""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parent.parent
LEGACY = ROOT / "tests" / "legacy_functions.py"

PLAIN_TESTS = """
import pytest


def test_plain():
    assert 1 + 1 == 2


@pytest.mark.skip(reason="needs a GPU")
def test_needs_a_gpu():
    pass
"""

NOTHING_CHECKED = """
from harness.pytest_plugin import conformance_tests
from legacy_functions import LegacyScaledTanh, three_samples

test_legacy = conformance_tests(LegacyScaledTanh, three_samples, checks=["vmap", "jvp"])
"""


@pytest.fixture
def afdb_folder(pytester, monkeypatch):
    """A project in a folder named ``afdb`` (as ``git clone ... afdb`` makes)."""
    folder = pytester.mkdir("afdb")
    (folder / "test_plain.py").write_text(PLAIN_TESTS)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), str(folder)]))
    monkeypatch.chdir(folder)
    return folder


def test_skipped_tests_in_a_folder_named_afdb_exit_0(pytester, afdb_folder):
    """Before the fix the plugin took every test under a folder named ``afdb`` for a
    conformance case (``report.keywords`` hold the parent folders' names), so a skipped
    test was a group that "checked nothing" and the run exited 5."""
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rs", str(afdb_folder))
    out = result.stdout.str()
    assert result.ret == 0, out
    assert result.parseoutcomes() == {"passed": 1, "skipped": 1}, out
    assert "nothing checked" not in out
    result.stdout.fnmatch_lines(["SKIPPED *needs a GPU"])


def test_a_conformance_group_that_checked_nothing_still_exits_5_under_xdist(pytester, afdb_folder):
    """The marker's attribute travels from the xdist workers to the controller: the
    conformance group that checked nothing is found, the skipped plain test is not."""
    (afdb_folder / "legacy_functions.py").write_text(LEGACY.read_text())
    (afdb_folder / "test_conf.py").write_text(NOTHING_CHECKED)
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-n", "2", str(afdb_folder), timeout=300
    )
    out = result.stdout.str()
    assert result.ret == 5, out
    notes = [ln for ln in out.splitlines() if ln.startswith("afdb: nothing checked by ")]
    assert len(notes) == 1 and "test_conf.py::test_legacy" in notes[0], notes


# --- a daemon a case starts does not outlive pytest ------------------------------------------

DAEMON_FUNCTION = r'''
import os
import shutil
import signal
import subprocess
import time

import torch


def _start_daemon():
    """A daemon as a service starts one: setsid --fork, so its parent exits at once and it
    is orphaned in a session of its own; it writes its pid to AFDB_TEST_PIDFILE."""
    pidfile = os.environ["AFDB_TEST_PIDFILE"]
    before = open(pidfile).read().count("\n") if os.path.exists(pidfile) else 0
    subprocess.Popen(
        ["setsid", "--fork", "sh", "-c", 'echo $$ >> "$AFDB_TEST_PIDFILE"; exec sleep 300'],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # wait until it runs: the case must not end first
        if os.path.exists(pidfile) and open(pidfile).read().count("\n") > before:
            return
        time.sleep(0.01)


class StartsADaemon(torch.autograd.Function):
    """Correct (x * 3), but its backward (which only a case calls, never the collection)
    starts a daemon the first time it runs in a process."""

    generate_vmap_rule = True
    started = False

    @staticmethod
    def forward(x):
        return x * 3

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, g):
        if not StartsADaemon.started:
            StartsADaemon.started = True
            _start_daemon()
        return 3 * g


def samples():
    return [(torch.randn(5, dtype=torch.float64),)]
'''

DAEMON_TESTS = """
from harness.pytest_plugin import conformance_tests
from daemon_function import StartsADaemon, samples

test_daemon = conformance_tests(StartsADaemon, samples, checks=["vjp"])
"""


def _running(pid: int) -> bool:
    """The process exists and is not a zombie (a killed orphan init has not reaped yet)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


@pytest.mark.skipif(
    not (os.path.exists("/proc/self/stat") and shutil.which("setsid")),
    reason="needs /proc and setsid (Linux)",
)
@pytest.mark.parametrize("workers", [("-n", "2"), ("-p", "no:xdist")], ids=["n2", "in-process"])
def test_a_daemon_a_case_starts_does_not_outlive_pytest(pytester, monkeypatch, workers):
    pidfile = pytester.path / "daemons.txt"
    pytester.makepyfile(daemon_function=DAEMON_FUNCTION, test_daemon=DAEMON_TESTS)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), str(pytester.path)]))
    monkeypatch.setenv("AFDB_TEST_PIDFILE", str(pidfile))
    try:
        result = pytester.runpytest_subprocess("-p", "no:cacheprovider", *workers, timeout=300)
        pids = [int(p) for p in pidfile.read_text().split()] if pidfile.exists() else []
        assert pids, result.stdout.str()  # the Function did start its daemons
        outcomes = result.parseoutcomes()
        # Each case that started a daemon (the first vjp case of each process) is an error
        # that says it was killed; the other cases pass.
        assert outcomes.get("failed", 0) == len(pids), (outcomes, pids)
        result.stdout.fnmatch_lines(["*left 1 child process(es) running after the case*killed*"])
        alive = [pid for pid in pids if _running(pid)]
        assert not alive, f"daemons outlived pytest: {alive}"
    finally:  # never leave one behind, whatever the verdict
        for pid in [int(p) for p in pidfile.read_text().split()] if pidfile.exists() else []:
            if _running(pid):
                os.kill(pid, signal.SIGKILL)
