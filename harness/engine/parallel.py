"""Running cases in worker processes, so no Function can take the run down.

``run_parallel`` enumerates the cases (``enumerate_entries``), sets aside those the
expectations skip, sizes the pool (``cores``) and hands the rest to the process model
``fork_safety`` chooses: workers forked from this process (``forkpool``), fresh
pytest-xdist interpreters (``xdist_pool``), or this process where neither can rebuild the
entries. Whatever happens to a worker, every case gets one record (``records``), in case
order.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any

from harness.core.errors import RunStopped
from harness.core.options import Options
from harness.core.results import ERROR, TIMEOUT, CaseResult
from harness.engine import forkpool, warmup
from harness.engine.case_state import forget_last_case
from harness.engine.cases import Case, enumerate_cases
from harness.engine.cores import parse_workers, reduce_workers
from harness.engine.entry_progress import FinishedEntries
from harness.engine.fork_safety import cannot_rebuild
from harness.engine.fork_safety import process_model as choose_process_model
from harness.engine.hangs import staticmethod_codes, staticmethod_in_dump
from harness.engine.isolation import DEFAULT_TIMEOUT_S
from harness.engine.records import death_record, repro_command, samples_error
from harness.engine.runner import run_noted, timed_out_twice
from harness.engine.sample_cache import EntryData
from harness.engine.timeouts import TimeoutLedger
from harness.engine.xdist_pool import run_xdist


def enumerate_entries(
    entries: Sequence[Any], options: Options
) -> tuple[dict[str, EntryData], list[Case], dict[str, CaseResult]]:
    """Each entry's data, every case in order, and the records of entries whose samples fail."""
    datas: dict[str, EntryData] = {}
    expected: list[Case] = []
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


def process_model(
    source: str = "", entries: Sequence[Any] = (), target: Any = None
) -> tuple[str, str]:
    """The engine (see ``engine``) and, where forking is unsafe, the one line that says what
    runs the cases instead and why (``harness.engine.fork_safety.process_model``)."""
    return choose_process_model(source, entries, target)


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
    datas, expected, early = enumerate_entries(entries, options)
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
        model, model_note = process_model(source, entries, target)
        if model_note and to_run:
            print(f"note: {model_note}", flush=True)
        here: list[Any] = []
        if model in ("in-process", "mixed"):
            stuck = set(cannot_rebuild(entries, target)) if model == "mixed" else None
            here = [c for c in to_run if stuck is None or c.entry in stuck]
            to_run = [c for c in to_run if stuck is not None and c.entry not in stuck]
            model = "xdist"
        if not to_run:
            pass
        elif model == "fork":
            _run_forked(to_run, datas, options, n, target, done, arrived)
        else:
            running = {c.entry for c in to_run}
            tail = run_xdist(
                to_run,
                [e for e in runnable_entries(entries, early) if e.name in running],
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
        if here:  # last: what a Function that ends this process takes down is only itself
            _run_here(here, datas, target, done, arrived, announce=True)
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
            r.repro = repro_command(case.id, options, target)
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


def _run_here(
    cases: list[Any],
    datas: dict[str, Any],
    target: Any,
    done: dict[str, CaseResult],
    on_record: Callable[[CaseResult], None] | None = None,
    *,
    announce: bool = False,
) -> None:
    """The cases in this process, in order (``--no-isolate``'s way), where forking is not
    safe and fresh interpreters cannot rebuild the entries; ``announce``: one line per
    entry before its first case, so a Function that ends the process is named."""
    ledger = TimeoutLedger()
    forget_last_case()
    named: set[str] = set()
    for case in cases:
        if announce and case.entry not in named:
            named.add(case.entry)
            print(
                f"note: process model: {case.entry}: its cases run in this process now (no "
                "fresh interpreter can make it again); if it kills the process the run ends "
                "here (a --json report keeps what finished)",
                flush=True,
            )
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
        r.repro = repro_command(cases[i].id, options, target)
        hung_in = staticmethod_in_dump(faults, staticmethod_codes(datas[cases[i].entry].entry))
        if hung_in and r.status == TIMEOUT:
            r.message += f"; `{hung_in}` was running when the time ran out"
        ledger.note(r, hung_in, limit)
        return r

    def not_run(i: int, why: str) -> CaseResult:
        r = death_record(cases[i], "", options)
        r.status, r.message = ERROR, why
        r.repro = repro_command(cases[i].id, options, target)
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
