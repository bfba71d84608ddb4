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

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from typing import Any

from harness.core.errors import RunStopped, UsageError
from harness.core.options import Options
from harness.core.paths import SUITE_ROOT
from harness.core.results import ERROR, TIMEOUT, CaseResult
from harness.core.signals import deferred_signals
from harness.engine.records import death_record

_NODE_PARAM = re.compile(r"\[(.*)\]$")

#: The controller's hook, as a conftest so the controller never imports torch (the
#: workers import the harness through the generated test module).
CONFTEST = '''import json
import os

import pytest


@pytest.hookimpl(optionalhook=True)
def pytest_handlecrashitem(crashitem, report, sched):
    """A worker died running ``crashitem``: note it for harness.engine.parallel."""
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


def pytest_command(workers: str, test_file: str, folder: str, max_restarts: int) -> list[str]:
    cmd = [sys.executable, "-m", "pytest", test_file, "-n", str(workers)]
    cmd += ["-p", "xdist.plugin"]
    cmd += ["-c", os.path.join(folder, "pytest.ini"), "--rootdir", folder]
    cmd += ["-p", "no:cacheprovider", "-q", "--tb=line", "--no-header"]
    cmd += [f"--max-worker-restart={max_restarts}"]
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


# --- how many workers -------------------------------------------------------------------


def physical_cores() -> int:
    """Physical cores this process may use (hyper-threads counted once), at least 1.

    pytest-xdist's ``-n auto`` means the physical cores; read them from
    /proc/cpuinfo (core id per physical id) where it exists, else the usable CPUs.
    """
    usable = usable_cpus()
    try:
        with open("/proc/cpuinfo") as f:
            text = f.read()
    except OSError:
        return usable
    allowed = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    cores = count_physical_cores(text, allowed)
    return max(1, min(cores, usable)) if cores else usable


def count_physical_cores(cpuinfo: str, allowed: set[int] | None = None) -> int:
    """Distinct (physical id, core id) pairs among the ``allowed`` processors of a
    /proc/cpuinfo text; 0 when it does not say."""
    cpu_core: dict[int, tuple[str, str]] = {}
    processor, physical = -1, "0"
    for line in cpuinfo.splitlines():
        key, _, value = (part.strip() for part in line.partition(":"))
        if key == "processor" and value.isdigit():
            processor, physical = int(value), "0"
        elif key == "physical id":
            physical = value
        elif key == "core id" and processor >= 0:
            cpu_core[processor] = (physical, value)
    return len({core for cpu, core in cpu_core.items() if allowed is None or cpu in allowed})


def usable_cpus() -> int:
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def parse_workers(text: str | None) -> int | None:
    """``-n`` as pytest-xdist reads it: None (not given), 0 (in this process), N, or auto."""
    if text is None:
        return None
    text = str(text).strip()
    if text == "auto":
        return physical_cores()
    if not text.isdigit():
        raise UsageError(
            f"-n must be a number of workers (0: in this process) or auto; got {text!r}"
        )
    return int(text)


#: Workers beyond this many per usable CPU only compete for the cores (and cost memory).
WORKERS_PER_CPU = 2


def reduce_workers(requested: int, cases: int) -> tuple[int, str]:
    """The workers to start for ``cases`` cases, and a one-line note when fewer than asked."""
    cap = WORKERS_PER_CPU * usable_cpus()
    n = max(1, min(requested, cases, cap))
    if n == requested:
        return n, ""
    if requested > cap and cap <= cases:
        why = f"{WORKERS_PER_CPU} per usable CPU, {usable_cpus()} here; more would only compete for them"
    else:
        why = f"there are only {cases} cases to run"
    return n, f"-n {requested}: using {n} worker{'s' if n != 1 else ''} ({why})"


def _enumerate(
    entries: Sequence[Any], options: Options
) -> tuple[dict[str, Any], list[Any], dict[str, CaseResult]]:
    """Each entry's data, every case in order, and the records of entries whose samples fail."""
    from harness.engine.cases import enumerate_cases
    from harness.engine.records import samples_error
    from harness.engine.sample_cache import EntryData

    datas: dict[str, Any] = {}
    expected: list[Any] = []
    early: dict[str, CaseResult] = {}
    for entry in entries:
        data = EntryData(entry, options)
        try:
            expected.extend(enumerate_cases(data))
            datas[entry.name] = data
        except Exception as e:  # the same record run_entries gives
            r = samples_error(entry.name, e)
            early[r.id] = r
    return datas, expected, early


def engine(source: str = "") -> str:
    """``fork`` (workers forked after the imports) where it is safe, else ``xdist``, or
    ``in-process`` for a run fresh interpreters cannot rebuild (a recording's live classes).

    ``AFDB_WORKER_ENGINE=xdist`` forces fresh pytest-xdist interpreters (the engine
    for platforms without a safe fork, e.g. once CUDA is initialised); ``=fork`` forks
    even where ``harness.engine.fork_safety`` finds a thread pool a child cannot do without.
    """
    return process_model(source)[0]


def process_model(source: str = "", entries: Sequence[Any] = ()) -> tuple[str, str]:
    """The engine (see ``engine``) and, where forking is unsafe, the one line that says what
    runs the cases instead and why (``harness.engine.fork_safety.process_model``)."""
    from harness.engine.fork_safety import process_model as choose

    return choose(source, entries)


def _stop_group(proc: subprocess.Popen[str]) -> None:
    """Stop a worker pool started in a session of its own: Ctrl-C first, then kill what is left."""
    import signal

    with contextlib.suppress(OSError):
        os.killpg(proc.pid, signal.SIGINT)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.communicate(timeout=10)
    with contextlib.suppress(OSError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(Exception):
        proc.communicate(timeout=5)


def _run_pool(
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


def run_parallel(
    entries: Sequence[Any],
    options: Options,
    workers: str | int,
    *,
    source: str = "afdb",
    target: Any = None,
    progress: Callable[[CaseResult], None] | None = None,
    expectations: str | None = None,
    skip: Callable[[Any], CaseResult | None] | None = None,
    keep: bool = False,
    collect: list[CaseResult] | None = None,
    only: set[str] | None = None,
    note: Callable[[str], None] | None = None,
    backend: dict[str, Any] | None = None,
    on_record: Callable[[CaseResult], None] | None = None,
) -> list[CaseResult]:
    """Run every case in worker processes; results in case order, one per case.

    ``only``: the case ids to run (a shard); ``note`` receives the one-line notice
    when fewer workers start than asked. On Ctrl-C (or SIGTERM, which the CLI turns
    into one) the workers are stopped, the cases finished so far are appended to
    ``collect`` (in case order) and KeyboardInterrupt is raised again. ``skip`` gives the
    record of a case the expectations skip (it is not run); ``expectations`` is that file's
    path, which xdist workers read to mark their results. ``on_record`` is told of each
    record as it arrives (the fork engine; the xdist engine, whose results come back at the
    end, does not tell them) and may raise ``RunStopped`` (``--maxfail``): the workers are then stopped as on Ctrl-C,
    the finished cases appended to ``collect`` and ``RunStopped`` raised again.
    """
    requested = parse_workers(str(workers))
    assert requested is not None
    datas, expected, early = _enumerate(entries, options)
    if only is not None:
        expected = [c for c in expected if c.id in only]
        early = {k: v for k, v in early.items() if k in only}
    skipped: dict[str, CaseResult] = {}
    if skip is not None:
        for case in expected:
            r = skip(case)
            if r is not None:
                skipped[case.id] = r
    to_run = [c for c in expected if c.id not in skipped]
    n, why = reduce_workers(max(requested, 1), len(to_run))
    if why:
        (note or (lambda line: print(line, file=sys.stderr)))(why)
    results: list[CaseResult] = collect if collect is not None else []
    done: dict[str, CaseResult] = dict(skipped)
    interrupted = False
    stopped: RunStopped | None = None
    tail = ""
    from harness.engine.entry_progress import FinishedEntries

    finished = FinishedEntries(expected, skipped, progress) if progress else None

    def arrived(r: CaseResult) -> None:  # one progress line per entry as it finishes
        if finished is not None:
            finished.arrived(r)
        if on_record is not None:
            on_record(r)

    try:
        for r in early.values():
            if on_record is not None:
                on_record(r)
        model, model_note = process_model(source, entries)
        if model_note and to_run:
            print(f"note: {model_note}", flush=True)
        if not to_run:
            pass
        elif model == "in-process":
            _run_here(to_run, datas, target, done, arrived)
        elif model == "fork":
            _run_forked(to_run, datas, options, n, target, done, arrived)
        else:
            tail = _run_xdist(
                to_run,
                runnable_entries(entries, early),
                options,
                n,
                source,
                target,
                expectations,
                keep,
                done,
                backend,
                finished.arrived if finished is not None else None,
            )
    except KeyboardInterrupt:
        interrupted = True
    except RunStopped as e:
        interrupted, stopped = True, e
    ordered = [*early.values()]
    for case in expected:
        if case.id in done:
            ordered.append(done[case.id])
        elif not interrupted:
            r = death_record(case, "", options)
            r.status = ERROR
            r.message = f"not run: the worker pool stopped before this case ({tail or 'no output'})"
            r.repro = repro_command_for(case, options, target)
            ordered.append(r)
    for r in ordered:
        results.append(r)
        told = finished is not None and r.id in finished.told
        if progress and (stopped is not None or not interrupted) and not told:
            progress(r)
    if stopped is not None:
        raise stopped
    if interrupted:
        raise KeyboardInterrupt
    return results


def runnable_entries(entries: Sequence[Any], early: dict[str, CaseResult]) -> list[Any]:
    return [e for e in entries if f"{e.name}/samples" not in early]


def repro_command_for(case: Any, options: Options, target: Any) -> str:
    from harness.engine.records import repro_command

    return repro_command(case.id, options, target)


def _run_here(
    cases: list[Any],
    datas: dict[str, Any],
    target: Any,
    done: dict[str, CaseResult],
    on_record: Callable[[CaseResult], None] | None = None,
) -> None:
    """The cases in this process, in order (``--no-isolate``'s way), where forking is not
    safe and fresh interpreters cannot rebuild the entries."""
    from harness.engine.case_state import forget_last_case
    from harness.engine.runner import run_noted
    from harness.engine.timeouts import TimeoutLedger

    ledger = TimeoutLedger()
    forget_last_case()
    for case in cases:
        r = run_noted(datas[case.entry], case, ledger, target=target, watch_between=True)
        done[case.id] = r
        if on_record is not None:
            on_record(r)


def _run_forked(
    cases: list[Any],
    datas: dict[str, Any],
    options: Options,
    workers: int,
    target: Any,
    done: dict[str, CaseResult],
    on_record: Callable[[CaseResult], None] | None = None,
) -> None:
    """The cases in workers forked from this process (see harness.engine.forkpool)."""
    from harness.engine import forkpool, warmup
    from harness.engine.hangs import staticmethod_codes, staticmethod_in_dump
    from harness.engine.isolation import DEFAULT_TIMEOUT_S
    from harness.engine.runner import run_noted, timed_out_twice
    from harness.engine.timeouts import TimeoutLedger

    warmup.warm_for(cases, workers)  # torch's first uses: once here, not in every worker

    # Shared through a file in the pool's folder: a worker counts its own timeouts, the
    # controller those of workers the native-hang watchdog killed; both read all of them.
    ledger = TimeoutLedger()

    def run_one(i: int) -> CaseResult:  # in a worker
        case = cases[i]
        data = datas[case.entry]
        return run_noted(data, case, ledger, target=target, watch_between=True)

    def skip(i: int) -> CaseResult | None:  # in the controller, before a case is sent
        case = cases[i]
        return timed_out_twice(datas[case.entry], case, ledger, target)

    def on_death(i: int, faults: str) -> CaseResult:
        r = death_record(cases[i], faults, options)
        r.repro = repro_command_for(cases[i], options, target)
        hung_in = staticmethod_in_dump(faults, staticmethod_codes(datas[cases[i].entry].entry))
        if hung_in and r.status == TIMEOUT:
            r.message += f"; `{hung_in}` was running when the time ran out"
        ledger.note(r, hung_in, limit)
        return r

    def not_run(i: int, why: str) -> CaseResult:
        r = death_record(cases[i], "", options)
        r.status, r.message = ERROR, why
        r.repro = repro_command_for(cases[i], options, target)
        return r

    limit = options.timeout_s or DEFAULT_TIMEOUT_S
    grace = forkpool.watchdog_grace(limit)
    by_index: dict[int, CaseResult] = {}
    try:
        forkpool.run_forked(
            len(cases),
            workers,
            run_one,
            on_death,
            not_run,
            watchdog_s=limit + grace,
            # a case gets at least its limit and half the grace before the watchdog fires
            watchdog_slack_s=grace / 2,
            collect=by_index,
            on_record=(lambda i, r: on_record(r)) if on_record is not None else None,
            skip=skip,
            prepare=ledger.attach,
        )
    finally:
        for i, r in by_index.items():
            done[cases[i].id] = r


def _run_xdist(
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
            f.write(
                "from harness.pytest_plugin import config_tests\n\n"
                f"test_case = config_tests({config_path!r})\n"
            )
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
            from harness.engine.entry_progress import ResultsTail

            poll = ResultsTail(folder, {c.id for c in cases}, told) if told else None
            returncode, output = _run_pool(cmd, env, poll)
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
            r.repro = repro_command_for(case, options, target)
            done[case.id] = r
