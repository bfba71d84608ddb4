"""The pytest-xdist worker pool: the cases in fresh interpreters, one pytest item per case.

``run_xdist`` writes a JSON config, a conftest and a two-line test module into a temporary
folder and runs ``python -m pytest -n N`` on it in a subprocess. Each case is one pytest item
(``harness.pytest_plugin.config_tests``, named in ``test_module_text``); a worker appends each
case's result to its own JSON-lines file. When a Function kills its worker (a segfault,
``os._exit``), xdist restarts the worker and calls the conftest's ``pytest_handlecrashitem``
hook in the controller, which notes the item; the case becomes ``crash`` (with the fault
handler's stack when there is one) and the run goes on with the next case. A hang in native
code that the per-case SIGALRM limit cannot interrupt is ended by a faulthandler watchdog in
the worker and reported as ``timeout``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable
from typing import Any

from harness.core.options import Options
from harness.core.paths import SUITE_ROOT
from harness.core.results import CaseResult
from harness.core.signals import deferred_signals
from harness.engine.entry_progress import ResultsTail
from harness.engine.records import death_record, repro_command

_NODE_PARAM = re.compile(r"\[(.*)\]$")

#: The controller's hook, as a conftest so the controller never imports torch (the
#: workers import the harness through the generated test module).
CONFTEST = '''import json
import os

import pytest


@pytest.hookimpl(optionalhook=True)
def pytest_handlecrashitem(crashitem, report, sched):
    """A worker died running ``crashitem``: note it for harness.engine.xdist_pool."""
    folder = os.environ["AFDB_RESULTS_DIR"]
    with open(os.path.join(folder, "crashed.jsonl"), "a") as f:
        f.write(json.dumps({"nodeid": crashitem}) + "\\n")
    # A worker the native-hang watchdog killed: its case timed out (counted for the rest of
    # its check). harness.engine.timeouts imports no torch.
    from harness.engine.timeouts import note_crashed_timeout

    start, end = crashitem.find("["), crashitem.rfind("]")
    note_crashed_timeout(folder, crashitem[start + 1 : end] if 0 <= start < end else crashitem)
'''


def _absolute_target(target: Any) -> dict[str, Any] | None:
    """The target spec with file paths made absolute (workers may start elsewhere)."""
    if target is None or not hasattr(target, "to_dict"):
        return None
    d = target.to_dict()
    for key in ("target", "samples"):
        spec = d.get(key)
        if spec and ":" in spec:
            module, _, attr = spec.rpartition(":")
            if module.endswith(".py") or os.sep in module or "/" in module:
                d[key] = f"{os.path.abspath(module)}:{attr}"
    return d


#: The pytest plugin that makes the workers' items from the run's config file, named on the
#: workers' command line (``-p``): the pytest wing's, which the engine never imports.
WORKER_PLUGIN = "harness.plugin.workers"


def generated_test_module() -> str:
    """The test module the pool runs: one test function, which imports nothing; the worker
    plugin parametrizes it with the config's case ids and gives it the case runner."""
    return "def test_case(afdb_case, afdb_worker):\n    afdb_worker(afdb_case)\n"


def pytest_command(workers: str, test_file: str, folder: str, max_restarts: int) -> list[str]:
    cmd = [sys.executable, "-m", "pytest", test_file, "-n", str(workers)]
    cmd += ["-p", "xdist.plugin"]
    cmd += ["-c", os.path.join(folder, "pytest.ini"), "--rootdir", folder]
    cmd += ["-p", "no:cacheprovider", "-q", "--tb=line", "--no-header"]
    cmd += [f"--max-worker-restart={max_restarts}"]
    cmd += ["-p", WORKER_PLUGIN, f"--afdb-worker-config={os.path.join(folder, 'config.json')}"]
    return cmd


def worker_faults(case: Any, folder: str) -> str:
    """The fault handler's text of the xdist worker that was running ``case``, else ''."""
    for name in os.listdir(folder):
        if name.startswith("running-"):
            with open(os.path.join(folder, name)) as f:
                if f.read() == case.id:
                    pid = name[len("running-") : -len(".txt")]
                    path = os.path.join(folder, f"faults-{pid}.txt")
                    if os.path.exists(path):
                        with open(path, errors="replace") as g:
                            return g.read()
    return ""


def _crash_record(case: Any, folder: str, options: Options) -> CaseResult:
    return death_record(case, worker_faults(case, folder), options)


def run_xdist(
    cases: list[Any],
    runnable: list[Any],
    options: Options,
    workers: int,
    source: str,
    target: Any,
    expectations: str | None,
    keep: bool,
    done: dict[str, CaseResult],
    backend: dict[str, Any] | None = None,
    told: Callable[[CaseResult], None] | None = None,
) -> str:
    """The cases in fresh pytest-xdist interpreters; returns the pool's last output line.
    ``told`` sees each record as the workers write it (progress lines while it runs)."""
    folder = ""
    try:
        with deferred_signals():  # once made, the folder is removed however the run ends
            folder = tempfile.mkdtemp(prefix="afdb-run-")
        config = {
            "options": options.to_dict(),
            "source": source,
            "entries": [e.name for e in runnable],
            # The ids to run, with their entries: a worker enumerates only the entries it runs.
            "cases": [[c.entry, c.id] for c in cases],
            "target": _absolute_target(target),
            "repro_target": target.to_dict() if hasattr(target, "to_dict") else None,
            "expectations": os.path.abspath(expectations) if expectations else None,
            "results_dir": folder,
            "backend": backend,  # afdb certify: the workers adapt the entries to it
            # a recording: the workers load it and import its classes (fork_safety decides)
            "recorded": target.worker_config() if hasattr(target, "worker_config") else None,
        }
        config_path = os.path.join(folder, "config.json")
        with open(config_path, "w") as f:
            json.dump(config, f)
        with open(os.path.join(folder, "pytest.ini"), "w") as f:
            f.write("[pytest]\n")
        with open(os.path.join(folder, "conftest.py"), "w") as f:
            f.write(CONFTEST)
        test_file = os.path.join(folder, "test_afdb_cases.py")
        with open(test_file, "w") as f:
            f.write(generated_test_module())
        env = dict(os.environ, AFDB_RESULTS_DIR=folder, PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")
        # One intra-op thread per worker: N workers on N cores, not N x N threads spinning.
        env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
        # The workers import this very harness (a checkout wins over an installed copy).
        root = str(SUITE_ROOT)
        paths = [root, env.get("PYTHONPATH", "")]
        if config["recorded"]:  # the recorded classes import from where this process found them
            paths += [os.path.abspath(p) for p in sys.path if p and os.path.isdir(p)]
        env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
        cmd = pytest_command(str(workers), test_file, folder, max_restarts=len(cases) + 4)
        returncode, output = 0, ""
        try:
            poll = ResultsTail(folder, {c.id for c in cases}, told) if told else None
            returncode, output = run_pool(cmd, env, poll)
        finally:  # also on Ctrl-C: the finished cases count
            with deferred_signals():
                _collect_xdist(folder, cases, options, target, done)
        lines = [ln for ln in output.strip().splitlines() if ln.strip()]
        return f"pytest exit {returncode}: {lines[-1] if lines else 'no output'}"
    finally:
        if folder and not keep:
            with deferred_signals():
                shutil.rmtree(folder, ignore_errors=True)


def _collect_xdist(
    folder: str, cases: list[Any], options: Options, target: Any, done: dict[str, CaseResult]
) -> None:
    """Read the workers' results files and crash notes into ``done``."""
    wanted = {c.id for c in cases}
    for name in sorted(os.listdir(folder)):
        if name.startswith("results-") and name.endswith(".jsonl"):
            with open(os.path.join(folder, name)) as f:
                for line in f:
                    if line.strip():
                        r = CaseResult.from_dict(json.loads(line))
                        if r.id in wanted:
                            done[r.id] = r
    crash_file = os.path.join(folder, "crashed.jsonl")
    if not os.path.exists(crash_file):
        return
    crashed: set[str] = set()
    with open(crash_file) as f:
        for line in f:
            m = _NODE_PARAM.search(json.loads(line)["nodeid"])
            if m:
                crashed.add(m.group(1))
    for case in cases:
        if case.id in crashed and case.id not in done:
            r = _crash_record(case, folder, options)
            r.repro = repro_command(case.id, options, target)
            done[case.id] = r


def _stop_group(proc: subprocess.Popen[str]) -> None:
    """Stop a worker pool started in a session of its own: Ctrl-C first, then kill what is left."""
    with contextlib.suppress(OSError):
        os.killpg(proc.pid, signal.SIGINT)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.communicate(timeout=10)
    with contextlib.suppress(OSError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(Exception):
        proc.communicate(timeout=5)


def run_pool(
    cmd: list[str], env: dict[str, str], poll: Callable[[], None] | None = None
) -> tuple[int, str]:
    """Run the pytest-xdist pool (``poll`` called about twice a second while it runs); on any
    interruption stop it and its workers, then re-raise. Its output goes to a file, so
    nothing must drain a pipe while this process polls."""
    proc: subprocess.Popen[str] | None = None
    with tempfile.TemporaryFile(mode="w+") as output:
        try:
            with deferred_signals():  # a signal right after the start still stops the pool
                proc = subprocess.Popen(
                    cmd,
                    env=env,
                    stdout=output,
                    stderr=subprocess.STDOUT,
                    text=True,
                    cwd=os.getcwd(),
                    start_new_session=True,  # a Ctrl-C reaches us only; we stop the pool
                )
            while True:
                try:
                    proc.wait(timeout=0.5)
                    break
                except subprocess.TimeoutExpired:
                    if poll is not None:
                        poll()
        except BaseException:
            if proc is not None:
                with deferred_signals():
                    _stop_group(proc)
            raise
        output.seek(0)
        return proc.returncode, output.read()
