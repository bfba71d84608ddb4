"""Running cases in worker processes, through pytest-xdist, so no Function can take the run down.

``run_parallel`` writes a JSON config and a two-line test module into a
temporary folder and runs ``python -m pytest -n N`` on it in a subprocess. Each
case is one pytest item (see ``harness.pytest_plugin.config_tests``); a worker
appends each case's result to its own JSON-lines file. When a Function kills
its worker (a segfault, ``os._exit``), xdist restarts the worker and calls the
plugin's ``pytest_handlecrashitem`` hook in the controller, which notes the
item; the case becomes ``crash`` (with the fault handler's stack when there is
one) and the run goes on with the next case. A hang in native code that the
per-case SIGALRM limit cannot interrupt is ended by a faulthandler watchdog in
the worker and reported as ``timeout``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from typing import Any

from .api import UsageError
from .options import Options
from .results import CRASH, ERROR, TIMEOUT, CaseResult

_NODE_PARAM = re.compile(r"\[(.*)\]$")

#: The controller's hook, as a conftest so the controller never imports torch (the
#: workers import the harness through the generated test module).
CONFTEST = '''import json
import os

import pytest


@pytest.hookimpl(optionalhook=True)
def pytest_handlecrashitem(crashitem, report, sched):
    """A worker died running ``crashitem``: note it for harness.parallel."""
    with open(os.path.join(os.environ["AFDB_RESULTS_DIR"], "crashed.jsonl"), "a") as f:
        f.write(json.dumps({"nodeid": crashitem}) + "\\n")
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


def pytest_command(workers: str, test_file: str, folder: str, max_restarts: int) -> list[str]:
    cmd = [sys.executable, "-m", "pytest", test_file, "-n", str(workers)]
    cmd += ["-p", "xdist.plugin"]
    cmd += ["-c", os.path.join(folder, "pytest.ini"), "--rootdir", folder]
    cmd += ["-p", "no:cacheprovider", "-q", "--tb=line", "--no-header"]
    cmd += [f"--max-worker-restart={max_restarts}"]
    return cmd


def _crash_record(case: Any, folder: str, options: Options) -> CaseResult:
    """A ``crash`` (or watchdog ``timeout``) record for a case whose worker died."""
    from .isolation import DEFAULT_TIMEOUT_S, user_frame_from_dump
    from .runner import case_record, options_dtype

    faults = ""
    for name in os.listdir(folder):
        if name.startswith("running-"):
            with open(os.path.join(folder, name)) as f:
                if f.read() == case.id:
                    pid = name[len("running-") : -len(".txt")]
                    path = os.path.join(folder, f"faults-{pid}.txt")
                    if os.path.exists(path):
                        with open(path, errors="replace") as g:
                            faults = g.read()
    status = CRASH
    frame = user_frame_from_dump(faults)
    where = f" (at {frame})" if frame else ""
    if "Timeout (" in faults:
        status = TIMEOUT
        limit = options.timeout_s or DEFAULT_TIMEOUT_S
        message = (
            f"the case ran past its {limit:g} s limit without returning to Python (a hang in "
            f"native code, or signals blocked); its worker was killed{where}"
        )
    elif "Fatal Python error" in faults:
        first = next(
            (line for line in faults.splitlines() if "Fatal Python error" in line), "a fatal error"
        )
        message = f"the Function killed its process: {first.strip()}{where}"
    else:
        message = (
            "the Function killed its process (os._exit, a signal, or an abort in native code "
            "without a Python stack); the run went on in a fresh worker"
        )
    return case_record(case, status, message, dtype=options_dtype(options))


def run_parallel(
    entries: Sequence[Any],
    options: Options,
    workers: str | int,
    *,
    source: str = "afdb",
    target: Any = None,
    progress: Callable[[CaseResult], None] | None = None,
    expectations: str | None = None,
    keep: bool = False,
    collect: list[CaseResult] | None = None,
    backend: dict[str, Any] | None = None,
) -> list[CaseResult]:
    """Run every case in pytest-xdist workers; results in case order, one per case.

    On Ctrl-C the workers are stopped, the cases finished so far are appended to
    ``collect`` (in case order) and KeyboardInterrupt is raised again.
    """
    from .runner import EntryData, enumerate_cases, repro_command, samples_error

    workers = str(workers)
    if workers != "auto" and (not workers.isdigit() or int(workers) < 1):
        raise UsageError(f"-n must be a number of workers >= 1 or auto, got {workers!r}")
    expected: list[Any] = []
    early: dict[str, CaseResult] = {}
    for entry in entries:
        try:
            expected.extend(enumerate_cases(EntryData(entry, options)))
        except Exception as e:  # the same record run_entries gives
            r = samples_error(entry.name, e)
            early[r.id] = r
    runnable = [e for e in entries if f"{e.name}/samples" not in early]
    folder = tempfile.mkdtemp(prefix="afdb-run-")
    try:
        config = {
            "options": options.to_dict(),
            "source": source,
            "entries": [e.name for e in runnable],
            "target": _absolute_target(target),
            "repro_target": target.to_dict() if hasattr(target, "to_dict") else None,
            "expectations": os.path.abspath(expectations) if expectations else None,
            "results_dir": folder,
            "backend": backend,  # afdb certify: the workers adapt the entries to it
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
            f.write(
                "from harness.pytest_plugin import config_tests\n\n"
                f"test_case = config_tests({config_path!r})\n"
            )
        env = dict(os.environ, AFDB_RESULTS_DIR=folder, PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")
        # The workers import this very harness (a checkout wins over an installed copy).
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env["PYTHONPATH"] = os.pathsep.join(p for p in [root, env.get("PYTHONPATH", "")] if p)
        cmd = pytest_command(workers, test_file, folder, max_restarts=len(expected) + 4)
        interrupted = False
        try:
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=os.getcwd())
        except KeyboardInterrupt:
            interrupted = True
        done: dict[str, CaseResult] = dict(early)
        for name in sorted(os.listdir(folder)):
            if name.startswith("results-") and name.endswith(".jsonl"):
                with open(os.path.join(folder, name)) as f:
                    for line in f:
                        if line.strip():
                            r = CaseResult.from_dict(json.loads(line))
                            done[r.id] = r
        crashed: set[str] = set()
        crash_file = os.path.join(folder, "crashed.jsonl")
        if os.path.exists(crash_file):
            with open(crash_file) as f:
                for line in f:
                    m = _NODE_PARAM.search(json.loads(line)["nodeid"])
                    if m:
                        crashed.add(m.group(1))
        results: list[CaseResult] = collect if collect is not None else []
        if interrupted:
            results.extend(early.values())
            results.extend(done[c.id] for c in expected if c.id in done)
            raise KeyboardInterrupt
        tail = [ln for ln in (proc.stdout + proc.stderr).strip().splitlines() if ln.strip()]
        ordered = [*early.values()]
        for case in expected:
            if case.id in done:
                ordered.append(done[case.id])
            elif case.id in crashed:
                r = _crash_record(case, folder, options)
                r.repro = repro_command(case.id, options, target)
                ordered.append(r)
            else:
                r = _crash_record(case, folder, options)
                r.status = ERROR
                r.message = (
                    "not run: the worker pool stopped before this case (pytest exit "
                    f"{proc.returncode}: {tail[-1] if tail else 'no output'})"
                )
                r.repro = repro_command(case.id, options, target)
                ordered.append(r)
        for r in ordered:
            results.append(r)
            if progress:
                progress(r)
        return results
    finally:
        if not keep:
            shutil.rmtree(folder, ignore_errors=True)
