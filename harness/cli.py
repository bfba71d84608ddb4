"""The ``afdb`` command line.

Exit status: 0 everything conforms, 1 something does not, 2 bad usage or a
target that cannot be loaded (one line on stderr; ``--debug`` adds the traceback).

Subcommands live in small modules: this one holds ``list`` and ``run``; other
modules named in ``COMMAND_MODULES`` add theirs through ``add_parsers(sub)``.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from .api import UsageError
from .options import DTYPES, Options
from .results import CaseResult, RunResult

#: Modules that contribute subcommands (each defines ``add_parsers(subparsers)``).
COMMAND_MODULES = ("cli_report", "cli_check", "cli_certify")


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
        help="run cases in N worker processes (pytest-xdist), or auto",
    )
    p.add_argument("-q", "--quiet", action="store_true", help="print only the summary")


def options_from_args(args: argparse.Namespace) -> Options:
    from .checks import check_names

    checks = None
    if args.checks:
        checks = tuple(c.strip() for c in args.checks.split(",") if c.strip())
        known = check_names()
        for c in checks:
            if c not in known:
                raise CliError(f"unknown check {c!r}; known checks: {', '.join(known)}")
    if args.dtype not in DTYPES:
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
        dtype=DTYPES[args.dtype],
        device=args.device,
        plan_cap=args.plan_cap,
        timeout_s=args.timeout,
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


def write_reports(result: RunResult, args: argparse.Namespace) -> None:
    from . import report

    if getattr(args, "json", None):
        report.write_json(result, args.json)
    if getattr(args, "markdown", None):
        report.write_markdown(result, args.markdown)
    for flag, module, fn in (
        ("html", "html_report", "write_html"),
        ("junit", "junit", "write_junit"),
    ):
        path = getattr(args, flag, None)
        if path:
            try:
                mod = importlib.import_module(f"{__package__}.{module}")
            except ModuleNotFoundError:
                raise CliError(f"--{flag} is not available in this build") from None
            getattr(mod, fn)(result, path)


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
    from . import expectations as ex

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

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.current: str | None = None
        self.counts: dict[str, int] = {}
        self.seconds = 0.0

    def __call__(self, r: CaseResult) -> None:
        if r.entry != self.current:
            self.flush()
            self.current = r.entry
        self.counts[r.status] = self.counts.get(r.status, 0) + 1
        self.seconds += r.duration_s

    def flush(self) -> None:
        if self.current is not None and not self.quiet:
            parts = ", ".join(f"{n} {s}" for s, n in sorted(self.counts.items()))
            print(f"{self.current}: {parts} ({self.seconds:.1f}s in cases)", flush=True)
        self.counts = {}
        self.seconds = 0.0


def print_summary(result: RunResult, out: Any = None) -> None:
    out = out or sys.stdout
    from .report import status_cell

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
            if any(s in cnt for s in ("fail", "error", "xpass", "timeout", "crash"))
        }
        if bad:
            cells = "; ".join(f"{c}: {status_cell(cnt)}" for c, cnt in bad.items())
            print(f"{entry:<{width}}  {cells}", file=out)
    for r in result.failures()[:20]:
        print(f"  {r.status.upper()} {r.id}\n    {r.message[:500]}", file=out)
        if r.repro:
            print(f"    reproduce: {r.repro}", file=out)
    if len(result.failures()) > 20:
        print(f"  ... {len(result.failures()) - 20} more in the reports", file=out)
    print(f"{result.verdict}: {result.summary_line()}", file=out)


# --- afdb list --------------------------------------------------------------------------


def cmd_list(args: argparse.Namespace) -> int:
    from .checks import CHECKS, check_names
    from .sources import load_source

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


def select_entries(entries: Sequence[Any], names: Sequence[str]) -> list[Any]:
    """Entries by name, or by tag with ``tag:NAME``; every selector must match something."""
    if not names:
        return list(entries)
    chosen: list[Any] = []
    for sel in names:
        if sel.startswith("tag:"):
            hits = [e for e in entries if sel[4:] in e.tags]
        else:
            hits = [e for e in entries if e.name == sel]
        if not hits:
            known = ", ".join(e.name for e in list(entries)[:8])
            raise CliError(
                f"{sel!r} matches no entry; names look like {known}, ... (see `afdb list`), or use tag:TAG"
            )
        chosen.extend(h for h in hits if h not in chosen)
    return chosen


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
    from .metadata import run_metadata
    from .runner import run_entries

    started = time.time()
    progress = Progress(args.quiet)
    expectations = None
    if getattr(args, "expectations", None):
        from . import expectations as ex

        try:
            expectations = ex.load(args.expectations)
        except ex.ExpectationsError as e:
            raise CliError(str(e)) from None
    workers = getattr(args, "workers", None)
    interrupted = False
    isolate = getattr(args, "isolate", False)  # afdb check: a worker process even for one
    if workers not in (None, "0", "1") or (isolate and workers != "0"):
        from .parallel import run_parallel

        cases: list[CaseResult] = []
        try:
            run_parallel(
                entries,
                options,
                workers or "1",
                source=source,
                target=target,
                progress=progress,
                expectations=getattr(args, "expectations", None),
                collect=cases,
                backend=getattr(args, "backend_spec", None),
            )
        except KeyboardInterrupt:
            interrupted = True
    else:
        select = None
        cases = []
        if expectations is not None:
            from .expectations import skip_result

            def select(case: Any) -> bool:
                skipped = skip_result(expectations, case)  # recorded, not run
                if skipped is not None:
                    cases.append(skipped)
                return skipped is None

        try:
            cases = run_entries(
                entries, options, progress=progress, target=target, select=select, collect=cases
            )
        except KeyboardInterrupt:
            interrupted = True
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
    warnings = apply_expectations(result, getattr(args, "expectations", None), known_entries)
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    write_reports(result, args)
    (summary or print_summary)(result)
    return result


def cmd_run(args: argparse.Namespace) -> int:
    from .sources import expectations_path, load_source, options_for_source

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
    if result.metadata.get("interrupted"):
        return 130
    return 0 if result.ok else 1


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
        "--no-expectations",
        action="store_true",
        help="ignore the source's committed expectations file (reports/expectations/SOURCE.json)",
    )
    p.set_defaults(func=cmd_run)

    for name in COMMAND_MODULES:
        try:
            mod = importlib.import_module(f"{__package__}.{name}")
        except ModuleNotFoundError as e:
            if e.name != f"{__package__}.{name}":
                raise
            continue
        mod.add_parsers(sub)
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
    try:
        return func(args)
    except UsageError as e:
        if args.debug:
            raise
        print(f"afdb {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("afdb: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `afdb list | head`: the reader left; not an error of ours
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
