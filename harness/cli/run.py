"""``afdb run`` and ``afdb list``, and ``execute``, which every running command shares.

``execute`` runs the cases in-process or in workers, applies the expectations, writes the
reports and prints the progress and the summary.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from harness.cli.common import (
    CliError,
    apply_expectations,
    check_output_paths,
    options_from_args,
    report_write_failures,
    write_reports,
)
from harness.cli.selection import (
    apply_last_failed,
    case_selection,
    last_failed_note,
    max_fail,
)
from harness.core.errors import RunStopped
from harness.core.results import CaseResult, RunResult
from harness.core.textsafe import visible

if TYPE_CHECKING:  # torch loads when a command runs, never for `afdb --help`
    from harness.core.options import Options


class Progress:
    """One line per entry as its results arrive (or nothing with --quiet).

    The time shown is the sum of the entry's case durations, which means the same
    in-process and under workers (where results arrive all at once at the end).
    """

    def __init__(
        self,
        quiet: bool,
        expectations: Any = None,
        adjust: Callable[[CaseResult], Any] | None = None,
    ) -> None:
        self.quiet = quiet
        #: Changes a copy of each result after the expectations, as the command will
        #: change the results themselves before its summary (``afdb certify``'s reclassify).
        self.adjust = adjust
        #: Statuses are counted after these expectations (an expected failure is xfail,
        #: as in the summary); the results themselves are changed later, once.
        self.expectations = expectations
        self.current: str | None = None
        self.counts: dict[str, int] = {}
        self.seconds = 0.0

    def __call__(self, r: CaseResult) -> None:
        if r.entry != self.current:
            self.flush()
            self.current = r.entry
        status = r.status
        if self.expectations is not None and self.adjust is None:
            from harness.expectations import status_after

            status = status_after(self.expectations, r)  # no copy of the record per case
        elif self.expectations is not None or self.adjust is not None:
            import dataclasses

            from harness.expectations import apply

            copy = dataclasses.replace(r)
            if self.expectations is not None:
                copy = apply(self.expectations, copy)
            if self.adjust is not None:
                self.adjust(copy)
            status = copy.status
        self.counts[status] = self.counts.get(status, 0) + 1
        self.seconds += r.duration_s

    def flush(self) -> None:
        if self.current is not None and not self.quiet:
            from harness.core.results import STATUSES

            order = {s: i for i, s in enumerate(STATUSES)}
            ranked = sorted(self.counts.items(), key=lambda kv: (order.get(kv[0], 99), kv[0]))
            parts = ", ".join(f"{n} {s}" for s, n in ranked)
            name = visible(self.current, keep_newlines=False)
            print(f"{name}: {parts} ({self.seconds:.1f}s in cases)", flush=True)
        self.counts = {}
        self.seconds = 0.0


def print_summary(result: RunResult, out: Any = None) -> None:
    out = out or sys.stdout
    from harness.reports.report import status_cell

    matrix = result.matrix()
    checks: list[str] = []
    for per in matrix.values():
        checks.extend(c for c in per if c not in checks)
    width = max([len(e) for e in matrix] + [5])
    print("", file=out)
    for entry, per in matrix.items():
        bad = {
            c: cnt
            for c, cnt in per.items()
            if any(s in cnt for s in ("internal", "fail", "error", "xpass", "timeout", "crash"))
        }
        if bad:
            cells = "; ".join(
                f"{visible(c, keep_newlines=False)}: {status_cell(cnt)}" for c, cnt in bad.items()
            )
            print(f"{visible(entry, keep_newlines=False):<{width}}  {cells}", file=out)
    from harness.reports.grouping import failure_groups, terminal_lines

    for line in terminal_lines(
        failure_groups(result.cases), limit=20, message_chars=500, message_lines=1
    ):
        print(line, file=out)
    from harness.api import summary_notes

    for note in summary_notes(result):
        if "torch.func refused" in note:
            continue  # the database's custom ops: their cases say it
        print(f"note: {note}" if not note.startswith("nothing checked") else note, file=out)
    print_summary_line(result, out)


def print_summary_line(result: RunResult, out: Any = None) -> None:
    """The last line of a run, all that ``-q`` prints: ``PASS: 18 cases: 18 pass``."""
    print(f"{result.verdict}: {result.summary_line()}", file=out or sys.stdout)


# --- afdb list --------------------------------------------------------------------------


def cmd_list(args: argparse.Namespace) -> int:
    from harness.checks.catalogue import CHECKS, check_names
    from harness.sources.database import load_source

    if args.checks:
        for name in check_names():  # catalogue order (afdb certify's backend checks left out)
            spec = CHECKS[name]
            print(f"{name:<14} [{spec.family}] {spec.description} (reference: {spec.reference})")
        return 0
    entries = load_source(args.source)
    if args.axes:
        from autograd_function_db import axes  # type: ignore[attr-defined]

        for axis, names in axes.coverage(entries).items():
            print(f"{axis:<34} {len(names):>3}  {', '.join(names)}")
        return 0
    for e in entries:
        caps = e.caps.describe()
        if e.gradient != "derivative":
            caps.append(f"gradient={e.gradient}")
        print(f"{e.name:<22} {', '.join(caps)}")
        if args.verbose:
            print(f"{'':<22} tags: {', '.join(sorted(e.tags))}")
    print(f"{len(entries)} entries")
    return 0


# --- afdb run ---------------------------------------------------------------------------


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
) -> RunResult:
    """Run the cases in-process or in workers, apply expectations, write reports, print.

    ``target`` is a user target (``harness.sources.target.TargetSpec``) for ``afdb check``;
    ``summary`` replaces the default printed summary (``-q``: the summary line), so a
    caller passes none under ``-q``; ``known_entries`` are all the
    source's entry names (for telling a stale expectation from an unselected one);
    ``adjust`` changes a copy of each result before the progress line counts it;
    ``before_reports`` sees the result once the expectations are applied, before the
    reports are written (``afdb check --recorded`` adds its notes to messages there).
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
                progress=progress,
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
            progress(r)
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
    from harness.engine.parallel import parse_workers

    n = parse_workers(getattr(args, "workers", None))
    if n is None:
        return 1 if getattr(args, "isolate", False) else 0
    return n


def cmd_run(args: argparse.Namespace) -> int:
    from harness.sources.batch_sizes import options_for_source
    from harness.sources.database import expectations_path, load_source
    from harness.sources.select import case_prefixes, select_entries

    rerun = apply_last_failed(args, user=False)
    options = options_from_args(args)
    check_output_paths(args)
    controller_threads(args)
    everything = load_source(args.source)
    names = list(args.names)
    if rerun is not None:
        if not rerun:
            print(f"nothing to rerun: {args.last_failed} has no non-conforming case")
            return 0
        names = names or rerun
    entries = select_entries(everything, names)
    args.case_prefixes = case_prefixes(entries, names)
    options = options_for_source(args.source, entries, options)
    if args.no_expectations:
        args.expectations = None
    elif not args.expectations:
        committed = expectations_path(args.source)
        if committed is not None:
            args.expectations = str(committed)
            if not args.quiet:
                print(f"using the committed expectations {committed} (--no-expectations to ignore)")
    if rerun is not None and not args.quiet:
        print(last_failed_note(args))
    result = execute(
        entries, options, args, source=args.source, known_entries={e.name for e in everything}
    )
    status = run_status(result, args)
    closing_lines(result, args, status, rerun_command="afdb run")
    return status


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


# --- main -------------------------------------------------------------------------------
