"""``execute``, which every running command shares: run the cases in-process or in
workers, apply the expectations, write the reports and print the progress and the summary.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from harness.core.errors import CliError, RunStopped
from harness.core.results import CaseResult, RunResult
from harness.core.textsafe import visible
from harness.session.journal import Journal, journaled
from harness.session.outputs import apply_expectations, report_write_failures, write_reports
from harness.session.progress import Progress, print_summary, print_summary_line
from harness.session.selection import case_selection, max_fail

if TYPE_CHECKING:
    from harness.core.options import Options


def execute(
    entries: Sequence[Any],
    options: Options,
    args: argparse.Namespace,
    *,
    source: str,
    target: Any = None,
    summary: Callable[[RunResult], None] | None = None,
    known_entries: set[str] | None = None,
    adjust: Callable[[CaseResult], Any] | None = None,
    before_reports: Callable[[RunResult], Any] | None = None,
    journal_entries: Sequence[str] | None = None,
) -> RunResult:
    """Run the cases in-process or in workers, apply expectations, write reports, print.

    ``target`` is a user target (``harness.sources.target.TargetSpec``) for ``afdb check``;
    ``summary`` replaces the default printed summary (``-q``: the summary line), so a
    caller passes none under ``-q``; ``known_entries`` are all the
    source's entry names (for telling a stale expectation from an unselected one);
    ``adjust`` changes a copy of each result before the progress line counts it;
    ``before_reports`` sees the result once the expectations are applied, before the
    reports are written (``afdb check --recorded`` adds its notes to messages there);
    ``journal_entries``: the entries' names, to rewrite the JSON report as cases finish
    (``harness.session.journal``: a killed run leaves what finished).
    """
    from harness.engine.metadata import run_metadata
    from harness.engine.runner import run_entries

    started = time.time()
    from harness import expectations as ex

    expectations = None
    if getattr(args, "expectations", None):
        try:
            expectations = ex.load(args.expectations)
        except ex.ExpectationsError as e:
            raise CliError(str(e)) from None
    progress = Progress(args.quiet or getattr(args, "no_progress", False), expectations, adjust)
    journal = _journal(args, options, source, target, started, journal_entries)
    told_progress = journaled(progress, journal)
    stop = max_fail(args, expectations)
    workers = worker_count(args)
    interrupted = False
    stopped = ""
    only, shard_note = case_selection(entries, options, args, source)
    cases: list[CaseResult] = []
    if workers:
        from harness.engine.parallel import run_parallel

        try:
            run_parallel(
                entries,
                options,
                workers,
                source=source,
                target=target,
                progress=told_progress,
                expectations=getattr(args, "expectations", None),
                skip=(lambda case: ex.skip_result(expectations, case)) if expectations else None,
                collect=cases,
                only=only,
                backend=getattr(args, "backend_spec", None),
                on_record=stop,
            )
        except KeyboardInterrupt:
            interrupted = True
        except RunStopped as e:
            stopped = str(e)
    else:

        def select(case: Any) -> bool:
            if only is not None and case.id not in only:
                return False
            if expectations is not None:
                skipped = ex.skip_result(expectations, case)  # recorded, not run
                if skipped is not None:
                    cases.append(skipped)
                return skipped is None
            return True

        def told(r: CaseResult) -> None:
            told_progress(r)
            if stop is not None:
                stop(r)

        try:
            cases = run_entries(
                entries, options, progress=told, target=target, select=select, collect=cases
            )
        except KeyboardInterrupt:
            interrupted = True
        except RunStopped as e:
            stopped = str(e)
        if only is not None:
            cases[:] = [c for c in cases if c.id in only]
    progress.flush()
    argv = getattr(args, "argv", None)
    command = ["afdb", *argv] if argv is not None else None
    result = RunResult(
        cases,
        run_metadata(
            options,
            started=started,
            source=source,
            target=str(target or "") or None,
            command=command,
        ),
    )
    if hasattr(target, "to_dict"):
        # base_dir is this machine's working directory, not recorded. `afdb repro --report`
        # never imports this target on the report's word: its refusal names it to the user.
        result.metadata["target_spec"] = {**target.to_dict(), "base_dir": None}
    result.metadata["interrupted"] = interrupted
    if stopped:
        result.metadata["stopped"] = stopped
    if shard_note is not None:
        result.metadata["shard"] = shard_note
    warnings = apply_expectations(
        result,
        getattr(args, "expectations", None),
        known_entries,
        label=getattr(args, "expectations_label", None),
    )
    for warning in warnings:
        print(f"warning: {visible(warning)}", file=sys.stderr)
    if before_reports is not None:
        before_reports(result)
    failed = write_reports(result, args)
    quiet = getattr(args, "quiet", False)  # -q: the summary line only (docs/cli.md)
    (summary or (print_summary_line if quiet else print_summary))(result)
    if stopped and not quiet:
        print(stopped)
    report_write_failures(args, failed)
    return result


def _journal(
    args: argparse.Namespace,
    options: Options,
    source: str,
    target: Any,
    started: float,
    entries: Sequence[str] | None,
) -> Journal | None:
    """The journal that rewrites ``--json FILE`` as cases finish (None: no JSON asked for,
    or the caller does not journal), written once now so FILE exists from the start."""
    path = getattr(args, "json", None)
    if entries is None or not path:
        return None
    from harness.engine.metadata import run_metadata

    def metadata() -> dict[str, Any]:
        return run_metadata(
            options, started=started, source=source, target=str(target or "") or None
        )

    journal = Journal(path, metadata, entries)
    journal.write()
    return journal


def controller_threads(args: argparse.Namespace) -> None:
    """One intra-op thread for a controller whose cases run in forked workers (which use
    one each): it only draws samples and enumerates cases, and a pool of idle intra-op
    threads woken for each tiny op costs it more than it gives."""
    if worker_count(args) > 0:
        from harness.engine.parallel import engine

        if engine() == "fork":
            import torch

            torch.set_num_threads(1)


def worker_count(args: argparse.Namespace) -> int:
    """Worker processes for this command: ``-n`` as given (auto: the physical cores), else
    one for ``afdb check`` (isolation by default) and none (in this process) for ``afdb run``."""
    from harness.engine.cores import parse_workers

    n = parse_workers(getattr(args, "workers", None))
    if n is None:
        return 1 if getattr(args, "isolate", False) else 0
    return n


def run_status(result: RunResult, args: argparse.Namespace) -> int:
    """The exit status of a running command: 2 a report is missing, 130 interrupted, else
    the run's own (0 conforms, 1 does not)."""
    if getattr(args, "write_failures", None):
        return 2  # the summary was printed; a report the user asked for is missing
    if result.metadata.get("interrupted"):
        return 130
    return result.exit_status


def closing_lines(
    result: RunResult, args: argparse.Namespace, status: int, *, rerun_command: str
) -> None:
    """What the command wrote, then on failure the next step (nothing with --quiet)."""
    if args.quiet:
        return
    written = getattr(args, "written", [])
    if written:
        print(f"wrote {', '.join(written)}")
    if status != 1:
        return
    json_path = getattr(args, "json_as_given", None)
    rerun = (
        f"`{rerun_command} --last-failed {json_path}` reruns only them"
        if json_path and json_path in written
        else "add --json FILE to rerun only them later with --last-failed FILE"
    )
    print(
        "next: the `reproduce:` command of a root cause above writes a script for one of its "
        f"cases (`afdb repro CASE_ID`); {rerun}"
    )
