"""The ``afdb`` command line.

Exit status: 0 everything conforms, 1 something does not, 2 bad usage or a
target that cannot be loaded (one line on stderr; ``--debug`` adds the traceback).

Subcommands live in small modules: this one holds ``list`` and ``run``; other
modules named in ``COMMAND_MODULES`` add theirs through ``add_parsers(sub)``.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from harness.core.errors import UsageError
from harness.core.options import DTYPES, Options
from harness.core.results import CaseResult, RunResult
from harness.core.textsafe import visible

#: Modules that contribute subcommands (each defines ``add_parsers(subparsers)``).
COMMAND_MODULES = (
    "harness.cli.report",
    "harness.cli.check",
    "harness.cli.merge",
    "harness.cli.certify",
)


class CliError(UsageError):
    pass


# --- option parsing shared by the subcommands -----------------------------------------


def parse_int_list(text: str, what: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.replace(",", " ").split())
    except ValueError:
        raise CliError(f"{what} must be integers, e.g. 2 or 2,3; got {text!r}") from None
    if not values or any(v < 2 for v in values):
        raise CliError(
            f"{what} must be integers >= 2 (a batch of 1 hides batching bugs); got {text!r}"
        )
    return values


def add_common_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--checks", help="comma-separated check names (default: all); see `afdb list --checks`"
    )
    p.add_argument("--device", default="cpu", help="device for the samples (default: cpu)")
    p.add_argument(
        "--dtype", default="float32", help=f"one of {', '.join(DTYPES)} (default: float32)"
    )
    p.add_argument("--batch-size", help="batch size(s) for one vmap level, e.g. 2 or 2,4")
    p.add_argument("--nested-batch-sizes", help="batch sizes per nested level, e.g. 2,3")
    p.add_argument("--seed", type=int, default=0, help="seed for every random choice (default: 0)")
    p.add_argument(
        "--plan-cap",
        type=int,
        default=16,
        help="max in_dims plans per sample and level before the covering strategy",
    )
    p.add_argument(
        "--timeout", type=float, default=None, help="seconds per case before it counts as timeout"
    )
    p.add_argument("--expectations", help="expectations file (xfail/skip per case id)")
    p.add_argument("--json", help="write the JSON report here")
    p.add_argument("--markdown", help="write the Markdown report here")
    p.add_argument("--html", help="write the HTML report here")
    p.add_argument("--junit", help="write JUnit XML here")
    p.add_argument(
        "-n",
        dest="workers",
        default=None,
        help="run cases in N worker processes, or auto (the physical cores); 0: in this process",
    )
    p.add_argument("-q", "--quiet", action="store_true", help="print only the summary")
    p.add_argument(
        "--hazard-probe",
        action="store_true",
        help="also run vmap_hazard: batch sizes equal to sample dim sizes, which catch rules that "
        "find the batch dim by its size (off by default: a collision can hide a misplaced dim)",
    )


def options_from_args(args: argparse.Namespace) -> Options:
    from harness.checks.catalogue import check_names
    from harness.engine.parallel import parse_workers

    parse_workers(getattr(args, "workers", None))  # a bad -n is refused before anything prints
    if getattr(args, "shard", None):
        from harness.engine.shard import Shard, baseline_durations

        Shard.parse(args.shard)
        if getattr(args, "shard_durations", None):
            baseline_durations(args.shard_durations, "")  # an unreadable file: refused now
    if getattr(args, "expectations", None):
        from harness import expectations as ex

        try:
            ex.load(args.expectations)
        except ex.ExpectationsError as e:
            raise CliError(str(e)) from None
    checks = None
    if args.checks:
        checks = tuple(c.strip() for c in args.checks.split(",") if c.strip())
        known = check_names()
        for c in checks:
            if c not in known:
                raise CliError(f"unknown check {c!r}; known checks: {', '.join(known)}")
    if args.dtype is not None and args.dtype not in DTYPES:
        raise CliError(f"unknown dtype {args.dtype!r}; use one of {', '.join(DTYPES)}")
    if args.device != "cpu":
        try:
            torch.empty(0, device=args.device)
        except Exception as e:
            raise CliError(
                f"device {args.device!r} is not usable here ({str(e).splitlines()[0]})"
            ) from None
    opts = Options(
        checks=checks,
        seed=args.seed,
        dtype=DTYPES[args.dtype] if args.dtype is not None else None,
        device=args.device,
        plan_cap=args.plan_cap,
        timeout_s=args.timeout,
        hazard_probe=bool(getattr(args, "hazard_probe", False)),
    )
    if args.batch_size:
        opts = opts.replace(batch_sizes=parse_int_list(args.batch_size, "--batch-size"))
    if args.nested_batch_sizes:
        sizes = parse_int_list(args.nested_batch_sizes, "--nested-batch-sizes")
        if len(set(sizes)) != len(sizes) or len(sizes) < 2:
            raise CliError("--nested-batch-sizes needs two or more different sizes, e.g. 2,3")
        opts = opts.replace(nested_batch_sizes=sizes)
    if args.plan_cap < 1:
        raise CliError("--plan-cap must be >= 1")
    if args.timeout is not None and args.timeout <= 0:
        raise CliError("--timeout must be a positive number of seconds")
    return opts


def check_output_paths(args: argparse.Namespace) -> None:
    """Refuse an unwritable report path before running anything."""
    import os

    for flag in ("json", "markdown", "html", "junit"):
        path = getattr(args, flag, None)
        if not path:
            continue
        parent = os.path.dirname(os.path.abspath(path)) or "."
        if os.path.isdir(path):
            raise CliError(f"--{flag} {path}: is a directory; give a file path")
        probe = parent
        while not os.path.exists(probe):
            probe = os.path.dirname(probe)
        if not os.path.isdir(probe):
            raise CliError(f"--{flag} {path}: {probe} is a file, not a directory")
        if not os.access(probe, os.W_OK):
            raise CliError(f"--{flag} {path}: cannot write there (no permission on {probe})")
        from harness.core.safe_io import output_target

        try:  # a device, a FIFO: refused now, not after the run
            output_target(path)
        except UsageError as e:
            raise CliError(f"--{flag} {e}") from None
        # absolute now: a Function that changes the working directory cannot move the reports
        setattr(args, flag, os.path.abspath(path))


def keep_previous_reports(result: RunResult, args: argparse.Namespace) -> list[str]:
    """An interrupted run keeps each earlier report it would replace, as NAME.previous.EXT.

    A partial report must not silently take the place of a complete one; the
    partial report is written to the path asked for, and the earlier file stays
    beside it (one line each says so). An earlier report that was itself
    interrupted (its JSON, Markdown or HTML says so) is simply replaced.
    """
    import os

    if not result.metadata.get("interrupted"):
        return []
    lines = []
    for flag in ("json", "markdown", "html", "junit"):
        path = getattr(args, flag, None)
        if not path:
            continue
        real = os.path.realpath(path)
        if not os.path.isfile(real) or os.path.getsize(real) == 0:
            continue
        if _is_interrupted_report(real, flag):
            continue
        stem, ext = os.path.splitext(real)
        kept = f"{stem}.previous{ext}"
        try:
            os.replace(real, kept)
        except OSError as e:
            raise CliError(
                f"--{flag} {path}: the run was interrupted and the earlier report could not be "
                f"kept as {kept} ({e.strerror}); nothing was written over it"
            ) from None
        lines.append(
            f"interrupted: the earlier {path} is kept as {kept}; {path} holds this partial run"
        )
    return lines


#: How a Markdown or HTML report of an interrupted run says so (see harness/reports/report.py and html.py).
_INTERRUPTED_MARKS = {"markdown": "> **Interrupted**", "html": '<p class="interrupted">'}


def _is_interrupted_report(path: str, flag: str) -> bool:
    """The file at ``path`` is a report of an interrupted run (JUnit XML does not say)."""
    import json

    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            if flag == "json":
                return bool(json.load(f)["metadata"]["interrupted"])
            mark = _INTERRUPTED_MARKS.get(flag)
            return mark is not None and mark in f.read(1 << 16)
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        return False


def write_reports(result: RunResult, args: argparse.Namespace) -> list[str]:
    """Write every report asked for; return one line per write that failed (disk full, ...).

    One failed write does not stop the others; the caller prints the summary first, then
    these lines, and exits 2, so the results are never lost to an I/O error.
    """
    from harness.reports import report

    for line in keep_previous_reports(result, args):
        print(line, file=sys.stderr)
    failed: list[str] = []

    def attempt(flag: str, path: str, write: Callable[[RunResult, str], None]) -> None:
        try:
            write(result, path)
        except OSError as e:
            failed.append(f"--{flag} {path}: could not write the report ({e.strerror or e})")
        except UsageError as e:
            failed.append(f"--{flag} {e}")

    if getattr(args, "json", None):
        attempt("json", args.json, report.write_json)
    if getattr(args, "markdown", None):
        attempt("markdown", args.markdown, report.write_markdown)
    for flag, module, fn in (
        ("html", "harness.reports.html", "write_html"),
        ("junit", "harness.reports.junit", "write_junit"),
    ):
        path = getattr(args, flag, None)
        if path:
            attempt(flag, path, getattr(importlib.import_module(module), fn))
    return failed


def report_write_failures(args: argparse.Namespace, failed: Sequence[str]) -> None:
    """After the summary: one line per failed write (``args.write_failures`` makes it exit 2)."""
    args.write_failures = list(failed)
    for line in failed:
        print(f"afdb {getattr(args, 'command', '')}: error: {line}", file=sys.stderr)


def apply_expectations(
    result: RunResult, path: str | None, known_entries: set[str] | None = None
) -> list[str]:
    """Apply the expectations file to the results; return warnings (unmatched ids).

    An expectation is stale when it names an entry the source does not have
    (``known_entries``), or an entry and check this run covered without a match;
    entries and checks the selection left out say nothing about it.
    """
    if not path:
        return []
    from harness import expectations as ex

    try:
        exps = ex.load(path)
    except ex.ExpectationsError as e:
        raise CliError(str(e)) from None
    for r in result.cases:
        ex.apply(exps, r)
    covered = {(c.entry, c.check) for c in result.cases if c.sample is not None}
    ran = {e for e, _ in covered}
    known = known_entries if known_entries is not None else {c.entry for c in result.cases}

    def stale(exp_id: str) -> bool:
        parts = exp_id.split("/")
        if parts[0] not in known:
            return True
        return parts[0] in ran and (len(parts) < 2 or (parts[0], parts[1]) in covered)

    unmatched = [e for e in exps.unmatched([c.id for c in result.cases]) if stale(e.id)]
    result.metadata["expectations"] = path
    result.metadata["unmatched_expectations"] = [e.id for e in unmatched]
    return [f"expectation {e.id!r} matches no case in this run" for e in unmatched]


# --- printing ---------------------------------------------------------------------------


class Progress:
    """One line per entry as its results arrive (or nothing with --quiet).

    The time shown is the sum of the entry's case durations, which means the same
    in-process and under workers (where results arrive all at once at the end).
    """

    def __init__(self, quiet: bool, expectations: Any = None) -> None:
        self.quiet = quiet
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
        if self.expectations is not None:
            import dataclasses

            from harness.expectations import apply

            status = apply(self.expectations, dataclasses.replace(r)).status
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
            cells = "; ".join(f"{c}: {status_cell(cnt)}" for c, cnt in bad.items())
            print(f"{visible(entry, keep_newlines=False):<{width}}  {cells}", file=out)
    from harness.reports.grouping import failure_groups, terminal_lines

    for line in terminal_lines(
        failure_groups(result.cases), limit=20, message_chars=500, message_lines=1
    ):
        print(line, file=out)
    print(f"{result.verdict}: {result.summary_line()}", file=out)


# --- afdb list --------------------------------------------------------------------------


def cmd_list(args: argparse.Namespace) -> int:
    from harness.checks.catalogue import CHECKS, check_names
    from harness.sources import load_source

    if args.checks:
        check_names()
        for name, spec in CHECKS.items():
            if not spec.catalogue:  # afdb certify's backend checks
                continue
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
) -> RunResult:
    """Run the cases in-process or in workers, apply expectations, write reports, print.

    ``target`` is a user target (``harness.targets.TargetSpec``) for ``afdb check``;
    ``summary`` replaces the default printed summary; ``known_entries`` are all the
    source's entry names (for telling a stale expectation from an unselected one).
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
    progress = Progress(args.quiet, expectations)
    workers = worker_count(args)
    interrupted = False
    only, shard_note = shard_selection(entries, options, args, source)
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
            )
        except KeyboardInterrupt:
            interrupted = True
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

        try:
            cases = run_entries(
                entries, options, progress=progress, target=target, select=select, collect=cases
            )
        except KeyboardInterrupt:
            interrupted = True
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
        result.metadata["target_spec"] = target.to_dict()
    result.metadata["interrupted"] = interrupted
    if shard_note is not None:
        result.metadata["shard"] = shard_note
    warnings = apply_expectations(result, getattr(args, "expectations", None), known_entries)
    for warning in warnings:
        print(f"warning: {visible(warning)}", file=sys.stderr)
    failed = write_reports(result, args)
    (summary or print_summary)(result)
    report_write_failures(args, failed)
    return result


def worker_count(args: argparse.Namespace) -> int:
    """Worker processes for this command: ``-n`` as given (auto: the physical cores), else
    one for ``afdb check`` (isolation by default) and none (in this process) for ``afdb run``."""
    from harness.engine.parallel import parse_workers

    n = parse_workers(getattr(args, "workers", None))
    if n is None:
        return 1 if getattr(args, "isolate", False) else 0
    return n


def shard_selection(
    entries: Sequence[Any], options: Options, args: argparse.Namespace, source: str
) -> tuple[set[str] | None, dict[str, Any] | None]:
    """The case ids of ``--shard K/N`` (None: every case) and what the report records about it."""
    text = getattr(args, "shard", None)
    if not text:
        return None, None
    from harness.engine import shard
    from harness.engine.parallel import _enumerate

    spec = shard.Shard.parse(text)
    _, cases, early = _enumerate(entries, options)
    ids = [*early, *(c.id for c in cases)]
    durations, baseline = shard.baseline_durations(getattr(args, "shard_durations", None), source)
    shard_of = shard.assign(ids, spec.count, durations)
    only = {i for i, s in zip(ids, shard_of) if s == spec.index - 1}
    note = {
        "index": spec.index,
        "count": spec.count,
        "balanced_by": f"durations in {baseline}" if baseline else "case counts",
        "total_cases": len(ids),
        # Each case's position in the whole run, so `afdb merge` restores the run's order.
        "positions": [n for n, i in enumerate(ids) if i in only],
    }
    return only, note


def cmd_run(args: argparse.Namespace) -> int:
    from harness.sources import expectations_path, load_source, options_for_source, select_entries

    options = options_from_args(args)
    check_output_paths(args)
    everything = load_source(args.source)
    entries = select_entries(everything, args.names)
    options = options_for_source(args.source, entries, options)
    if args.no_expectations:
        args.expectations = None
    elif not args.expectations:
        committed = expectations_path(args.source)
        if committed is not None:
            args.expectations = str(committed)
            if not args.quiet:
                print(f"using the committed expectations {committed} (--no-expectations to ignore)")
    result = execute(
        entries, options, args, source=args.source, known_entries={e.name for e in everything}
    )
    if getattr(args, "write_failures", None):
        return 2  # the summary was printed; a report the user asked for is missing
    if result.metadata.get("interrupted"):
        return 130
    return result.exit_status


# --- main -------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="afdb",
        description="Conformance suite for torch.autograd.Function under torch.func transforms.",
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks for usage errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("list", help="entries, their capabilities and API axes")
    p.add_argument("--source", default="afdb", help="entry source: afdb (default) or pytorch")
    p.add_argument("--axes", action="store_true", help="API axes and the entries covering each")
    p.add_argument("--checks", action="store_true", help="the check catalogue")
    p.add_argument("-v", "--verbose", action="store_true", help="show tags")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("run", help="run the database (or a selection) and write reports")
    p.add_argument(
        "names", nargs="*", metavar="SELECT", help="entry names or tag:TAG (default: all)"
    )
    p.add_argument("--source", default="afdb", help="entry source: afdb (default) or pytorch")
    add_common_options(p)
    p.add_argument(
        "--shard",
        metavar="K/N",
        help="run shard K of N (a deterministic part, balanced by a baseline's durations); "
        "put the shard reports together with `afdb merge`",
    )
    p.add_argument(
        "--shard-durations",
        metavar="REPORT",
        help="JSON report whose case durations balance the shards (default: the committed "
        "baseline of the source; none: balanced by case counts)",
    )
    p.add_argument(
        "--no-expectations",
        action="store_true",
        help="ignore the source's committed expectations (harness/known_failures/SOURCE.json)",
    )
    p.set_defaults(func=cmd_run)

    for name in COMMAND_MODULES:
        importlib.import_module(name).add_parsers(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse prints its own one-line usage error
        return 2 if e.code not in (0, None) else 0
    args.argv = argv  # recorded in the report's metadata as the command line
    if not getattr(args, "command", None):
        parser.print_help()
        return 2
    func: Callable[[argparse.Namespace], int] = args.func
    previous_term = _sigterm_as_ctrl_c()
    try:
        return func(args)
    except UsageError as e:
        if args.debug:
            raise
        print(
            f"afdb {args.command}: error: {visible(str(e), keep_newlines=False)}", file=sys.stderr
        )
        return 2
    except KeyboardInterrupt:
        print("afdb: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `afdb list | head`: the reader left; not an error of ours
        sys.stderr.close()
        return 0
    finally:
        if previous_term is not None:
            import signal

            signal.signal(signal.SIGTERM, previous_term)


def _sigterm_as_ctrl_c() -> Any:
    """SIGTERM (a CI timeout, ``kill``) stops a run as Ctrl-C does: workers stopped, temporary
    folders removed, the interrupted report written. Returns the handler it replaced."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return None

    def on_term(signum: int, frame: Any) -> None:
        handler = signal.getsignal(signal.SIGINT)
        if callable(handler) and handler is not on_term:
            handler(signal.SIGINT, frame)  # whatever Ctrl-C does here
        raise KeyboardInterrupt

    return signal.signal(signal.SIGTERM, on_term)


def entry() -> None:
    """The ``afdb`` command: ``main``, then a prompt exit.

    The interpreter's own finalisation after a run (torch's and ``torch._dynamo``'s
    modules torn down one by one) took 0.3 to 0.6 s, a tenth of ``afdb run --source
    pytorch``. Every report is written, fsynced and closed by then, so the exit
    flushes the standard streams, runs the ``atexit`` handlers (temporary folders,
    logging) and ends the process. It also means a thread a Function left running does
    not keep the finished command waiting.
    """
    import atexit
    import os

    code = main()
    for stream in (sys.stdout, sys.stderr):
        # A reader that left, a stream already closed: nothing more to deliver.
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    try:
        atexit._run_exitfuncs()
    finally:
        os._exit(code)


if __name__ == "__main__":
    entry()
