"""``afdb check TARGET``: the CI gate for one user Function (``afdb repro`` is ``harness.cli.repro``).

``afdb check`` runs every case in a worker process by default (``--no-isolate``
runs them in this process): a Function that segfaults or calls ``os._exit``
then gets ``crash`` and the run goes on, instead of taking the command down.
"""

from __future__ import annotations

import argparse
import os
import shlex
from collections import Counter
from typing import TYPE_CHECKING, Any

from harness.cli.common import add_common_options
from harness.cli.selection import add_selection_options, apply_last_failed, last_failed_note
from harness.cli.target_options import add_target_options, prepared, spec_from_args
from harness.core.dtype_names import DTYPE_NAMES
from harness.core.errors import CliError
from harness.core.locations import portable_path
from harness.core.results import STATUSES, RunResult
from harness.core.signals import deferred_signals
from harness.core.textsafe import visible
from harness.session.execute import (
    closing_lines,
    controller_threads,
    execute,
    run_status,
    worker_count,
)
from harness.session.outputs import check_output_paths
from harness.session.settings import options_from_args

if TYPE_CHECKING:  # torch loads when a command runs, never for `afdb --help`
    pass


def add_parsers(sub: Any) -> None:
    """``afdb check``'s parser."""
    p = sub.add_parser(
        "check",
        help="check one user Function (the CI gate)",
        description="Check one torch.autograd.Function under the torch.func transforms. "
        "Exit 0: conforms; 1: does not; 2: bad usage or a target that cannot be loaded; 3: "
        "the suite failed on some case (internal); 5: nothing was checked (every case "
        "unsupported or skipped); 130: interrupted.",
    )
    p.add_argument(
        "target",
        nargs="*",
        metavar="TARGET",
        help="module:attr or path/file.py:attr of the Function (with --recorded: name "
        "prefixes of recorded Functions, none for all)",
    )
    add_target_options(p)
    from harness.cli.check_recorded import add_recorded_options

    add_recorded_options(p)
    add_common_options(p)
    p.add_argument(
        "--no-isolate",
        dest="isolate",
        action="store_false",
        help="run the cases in this process (faster start; a crashing Function kills the run)",
    )
    p.add_argument(
        "--accept",
        action="store_true",
        help="write --expectations FILE from this run (created when missing): one expectation "
        "per root cause (an id prefix), new ones with a reason placeholder",
    )
    add_selection_options(p, "check")
    p.add_argument(
        "--watch",
        action="store_true",
        help="keep running: check again each time the target's (or the samples') file changes, "
        "in this process with torch already imported",
    )
    # For tests and benchmarks: stop after N runs; seconds between looks at the files.
    p.add_argument("--watch-iterations", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--watch-interval", type=float, default=None, help=argparse.SUPPRESS)
    # A user's samples keep their own dtypes unless --dtype is given.
    p.set_defaults(func=cmd_check, isolate=True, dtype=None)
    for action in p._actions:
        if action.dest == "dtype":
            action.help = (
                f"cast floating samples to one of {', '.join(DTYPE_NAMES)} (default: keep "
            )
            action.help += "the samples' own dtypes)"


def describe_function(entry: Any) -> str:
    return ", ".join(entry.caps.describe())


# --- afdb check -------------------------------------------------------------------------


def print_check_summary(result: RunResult) -> None:
    """Per-check status counts, then every non-conforming case with its message and repro."""
    per: dict[str, Counter[str]] = {}
    for c in result.cases:
        per.setdefault(c.check, Counter())[c.status] += 1
    reasons: dict[str, str] = {}
    for c in result.cases:
        if c.status == "unsupported" and c.check not in reasons:
            reasons[c.check] = c.message
    from harness.checks.catalogue import LEGACY_FIX

    print("")
    legacy = [c for c, counts in per.items() if set(counts) == {"unsupported"}]
    legacy = [c for c in legacy if reasons.get(c) == LEGACY_FIX]
    if len(legacy) > 1:  # one line for the torch.func checks a legacy Function cannot run
        print(f"  ---- {len(legacy)} torch.func checks unsupported ({', '.join(legacy[:4])}, ...): "
              "legacy forward(ctx, ...), see the note below")  # fmt: skip
    from harness.reports.grouping import message_headline

    said: dict[str, str] = {}  # a reason shown once; later checks with it name the first
    for check, counts in per.items():
        if len(legacy) > 1 and check in legacy:
            continue
        cells = ", ".join(f"{counts[s]} {s}" for s in STATUSES if counts[s])
        bad = any(counts[s] for s in ("internal", "fail", "error", "xpass", "timeout", "crash"))
        mark = "FAIL" if bad else ("----" if set(counts) <= {"unsupported", "skip"} else "ok  ")
        line = f"  {mark} {check:<14} {cells}"
        if check in reasons and set(counts) == {"unsupported"}:
            reason = reasons[check].split("\n", 1)[0]
            if reason in said:
                line += f" (as {said[reason]})"
            else:
                said[reason] = check
                line += f" ({visible(message_headline(reason, 120), keep_newlines=False)})"
        print(line)
    from harness.reports.grouping import failure_groups, terminal_lines

    groups = failure_groups(result.cases)
    if groups:
        print("")
    for line in terminal_lines(groups, limit=30):
        print(line)
    unmatched = result.metadata.get("unmatched_expectations") or []
    for u in unmatched:
        print(f"  note: expectation {visible(repr(u))} matches no case")
    from harness.api import summary_notes, verdict_line

    for note in summary_notes(result):
        print(f"note: {note}" if not note.startswith("nothing checked") else note)
    print(verdict_line(result))


def cmd_check(args: argparse.Namespace) -> int:
    if args.recorded is not None:
        from harness.cli.check_recorded import cmd_check_recorded

        return cmd_check_recorded(args)
    if args.declare:
        raise CliError("--declare needs --recorded (for one Function, use its flags)")
    if len(args.target) != 1:
        raise CliError(
            "name one TARGET (module:attr or path/file.py:attr), or check a recording with "
            "--recorded [DIR]"
        )
    args.target = args.target[0]
    if getattr(args, "watch", False):
        from harness.cli.watch import run_watch

        return run_watch(args, check_once)
    return check_once(args)


def check_once(args: argparse.Namespace) -> int:
    """One ``afdb check`` run: load the target, run its cases, print and write the reports."""
    from harness.engine.isolation import DEFAULT_TIMEOUT_S

    if args.accept and not args.expectations:
        raise CliError("--accept needs --expectations FILE (the file to write)")
    rerun = apply_last_failed(args, user=True)
    if rerun is not None and not rerun:
        print(f"nothing to rerun: {args.last_failed} has no non-conforming case")
        return 0
    if args.accept and rerun is not None:
        raise CliError("--accept writes the expectations of a whole run; leave --last-failed out")
    options = options_from_args(args)
    if options.timeout_s is None:
        options = options.replace(timeout_s=DEFAULT_TIMEOUT_S)
    check_output_paths(args)
    if args.accept and not args.expectations:
        raise CliError("--accept needs --expectations FILE (the file to write)")
    controller_threads(args)
    spec = spec_from_args(args, args.target)
    entry, options = prepared(spec, options)
    if not args.quiet:
        name = visible(f"{spec.target}: {entry.name}", keep_newlines=False)
        print(f"afdb check {name} ({describe_function(entry)})")
        if options.batch_size_note:
            print(f"batch sizes: {options.batch_size_note}")
        if options.slice_note:
            print(f"slices: {options.slice_note}")
        if options.samples_note:
            print(f"samples: {visible(options.samples_note, keep_newlines=False)}")
        from harness.checks.dtype_leg import LEG_ANNOUNCEMENT, leg_runs
        from harness.sources.user_samples import base_samples

        if leg_runs(entry, base_samples(entry, options), options):
            print(f"dtypes: {LEG_ANNOUNCEMENT}")
        n = worker_count(args)
        mode = (
            f"in {n} worker processes"
            if n > 1
            else ("in a worker process" if n == 1 else "in this process")
        )
        print(f"running the cases {mode}, timeout {options.timeout_s:g} s per case")
        if rerun is not None:
            print(last_failed_note(args))
    accept_path = None
    try:
        if args.accept:
            accept_path = args.expectations
            args.expectations = None
            with deferred_signals():  # the temporary file is removed below once it exists
                args.expectations = _skips_only(accept_path)
            if args.expectations:  # a temporary copy of its skips: the report names the file
                args.expectations_label = f"{portable_path(accept_path)} (its skips)"
        result = execute(
            [entry],
            options,
            args,
            source="user",
            target=spec,
            summary=None if args.quiet else print_check_summary,
        )
    finally:
        if accept_path is not None and args.expectations:
            with deferred_signals():
                os.unlink(args.expectations)
    if accept_path is not None:
        return _accept(accept_path, result, args)
    status = run_status(result, args)
    command = f"afdb check {shlex.quote(args.target)}"
    if args.samples:
        command += f" --samples {shlex.quote(args.samples)}"
    closing_lines(result, args, status, rerun_command=command)
    return status


def _accept(path: str, result: RunResult, args: argparse.Namespace) -> int:
    """``--accept``: write the expectations file from the run; 1 while reasons are missing."""
    import os

    from harness import expectations as ex

    created = not os.path.exists(path)
    new, changes = ex.accept(path, result.cases)
    for line in changes:
        print(f"accept: {line}")
    if not changes:
        print(f"accept: {path} already matches this run")
    if not args.quiet:
        written = [*getattr(args, "written", []), path]
        count = f"{len(new.items)} expectation{'s' if len(new.items) != 1 else ''}"
        print(f"wrote {', '.join(written)} ({'created, ' if created else ''}{count})")
    needs = sum(e.reason == ex.PLACEHOLDER for e in new.items)
    if needs:
        print(f"accept: {needs} new expectation(s) need a reason before the file validates")
        print(f"next: replace each TODO reason in {path} with why it is expected to fail")
        return 1
    return 0


def _skips_only(path: str) -> str | None:
    """A temporary expectations file with the skips of ``path`` (skipped cases must not run)."""
    import tempfile

    from harness import expectations as ex

    previous = ex.load_previous(path)
    skips = [
        ex.Expectation(e.id, e.status, e.reason if e.reason != ex.PLACEHOLDER else "kept")
        for e in (previous.items if previous else ())
        if e.status == "skip"
    ]
    if not skips:
        return None
    fd, tmp = tempfile.mkstemp(suffix=".json", prefix="afdb-skips-")
    with os.fdopen(fd, "w") as f:
        f.write(ex.Expectations(tuple(skips)).to_json())
    return tmp
