"""``afdb check TARGET`` (the CI gate for one user Function) and ``afdb repro CASE_ID``.

``afdb check`` runs every case in a worker process by default (``--no-isolate``
runs them in this process): a Function that segfaults or calls ``os._exit``
then gets ``crash`` and the run goes on, instead of taking the command down.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import os
import re
import shlex
import sys
from collections import Counter
from typing import TYPE_CHECKING, Any

from harness.cli.common import add_common_options
from harness.cli.selection import add_selection_options, apply_last_failed, last_failed_note
from harness.core.dtype_names import DTYPE_NAMES, SAMPLE_DTYPES
from harness.core.errors import CliError, UsageError
from harness.core.locations import portable_path, portable_spec
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
    from harness.core.options import Options


def _arg_positions(text: str) -> tuple[int, ...]:
    """``1,2`` -> (1, 2): argument positions (integers >= 0), for ``--nondiff-args``."""
    try:
        values = tuple(int(v) for v in text.replace(",", " ").split())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected argument positions such as 1,2; got {text!r}"
        ) from None
    if not values or any(v < 0 for v in values):
        raise argparse.ArgumentTypeError(
            f"expected argument positions >= 0, e.g. 1,2; got {text!r}"
        )
    return tuple(sorted(set(values)))


def _add_target_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--samples",
        metavar="SAMPLES",
        help="module:attr or path/file.py:attr of a callable returning argument tuples or "
        "Sample objects (default: the target's `samples` attribute)",
    )
    p.add_argument(
        "--inplace-arg",
        dest="inplace_args",
        type=int,
        action="append",
        metavar="N",
        help="argument N is modified in place (mark_dirty); repeatable",
    )
    p.add_argument(
        "--nondiff-output",
        dest="nondiff_outputs",
        type=int,
        action="append",
        metavar="N",
        help="output N is not differentiable (mark_non_differentiable); repeatable",
    )
    p.add_argument(
        "--nondiff-args",
        dest="nondiff_args",
        type=_arg_positions,
        metavar="N,M",
        help="argument positions never differentiated (float parameter tables, masks stored as "
        "floats): no tangent, cotangent or gradient for them, e.g. 1,2",
    )
    p.add_argument(
        "--randomness", action="store_true", help="the Function uses randomness (vmap randomness)"
    )
    p.add_argument(
        "--gradient",
        choices=("derivative", "custom"),
        default="derivative",
        help="custom: backward is deliberately not the derivative (straight-through, clipping)",
    )
    p.add_argument(
        "--no-double-backward",
        action="store_true",
        help="backward is not differentiable (skip second-order checks)",
    )
    p.add_argument(
        "--dtypes",
        metavar="LIST",
        help="the dtypes the Function supports, e.g. float64 (a float64-only Function: no "
        "float32 leg for its float64 samples) or float32,float64",
    )
    p.add_argument("--name", help="entry name in case ids (default: the class name)")
    p.add_argument(
        "--debug", action="store_true", default=argparse.SUPPRESS, help="tracebacks for errors"
    )


def add_parsers(sub: Any) -> None:
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
    _add_target_options(p)
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

    r = sub.add_parser(
        "repro",
        help="write a standalone script that reproduces one case",
        description="Write a minimal plain-torch script (about 30 lines: the Function, the "
        "case's sample drawn with the suite's seeds, the one transform call, the reference, "
        "the difference; exit 1 when it reproduces), or with --full the self-checking script "
        "that rebuilds the case's exact inputs. Either imports only torch and the Function's "
        "module.",
    )
    r.add_argument("case_id", metavar="CASE_ID")
    r.add_argument(
        "target", nargs="?", metavar="TARGET", help="the user Function (as for afdb check)"
    )
    r.add_argument("--target", dest="target_opt", help=argparse.SUPPRESS)
    add_recorded_options(r)
    r.add_argument(
        "--report",
        help="take seed, dtype, batch sizes and capabilities from a JSON report; a report of "
        "your own Function needs TARGET (and --samples) named too: a report's word imports nothing",
    )
    _add_target_options(r)
    r.add_argument("--seed", type=int, default=None)
    r.add_argument(
        "--dtype",
        default=None,
        help=f"one of {', '.join(DTYPE_NAMES)}, or {SAMPLE_DTYPES} (the samples' own dtypes)",
    )
    r.add_argument("--device", default=None)
    r.add_argument("--batch-size")
    r.add_argument("--nested-batch-sizes")
    r.add_argument("--plan-cap", type=int, default=None)
    r.add_argument(
        "-o", "--output", help="where to write the script (default: repro_<case>.py; - for stdout)"
    )
    r.add_argument(
        "--full",
        action="store_true",
        help="the full self-checking script (rebuilds every input exactly; default: a minimal "
        "plain-torch script of about 30 lines)",
    )
    from harness.cli.repro_settings import add_repro_options

    add_repro_options(r)
    r.set_defaults(func=cmd_repro)


# --- building the target ------------------------------------------------------------------


def spec_from_args(args: argparse.Namespace, target: str) -> Any:
    from harness.sources.target import TargetSpec

    caps: dict[str, Any] = {}
    if args.inplace_args:
        caps["inplace_args"] = tuple(args.inplace_args)
    if args.nondiff_outputs:
        caps["nondiff_outputs"] = tuple(args.nondiff_outputs)
    if getattr(args, "nondiff_args", None):
        caps["nondiff_args"] = tuple(args.nondiff_args)
    if args.randomness:
        caps["randomness"] = True
    if args.no_double_backward:
        caps["double_backward"] = False
    if getattr(args, "dtypes", None):
        from harness.sources.entries import declared_dtypes

        names = tuple(n.strip() for n in args.dtypes.split(",") if n.strip())
        try:
            declared_dtypes(names)
        except UsageError as e:
            raise CliError(f"--dtypes {args.dtypes}: {e}") from None
        caps["dtypes"] = names
    # A file under the working directory is recorded relative to it (reports travel); the
    # directory itself stays in base_dir for this process only (never in a report).
    return TargetSpec(
        portable_spec(target) or target,
        portable_spec(args.samples),
        gradient=args.gradient,
        capabilities=caps,
        name=args.name,
        batch_size=getattr(args, "batch_size", None) or None,
        nested_batch_sizes=getattr(args, "nested_batch_sizes", None) or None,
        base_dir=os.getcwd(),
    )


def prepared(spec: Any, options: Options) -> tuple[Any, Options]:
    """The entry and options for a user target: samples validated (each calls the Function
    once with no transform), batch sizes chosen."""
    from harness.sources.batch_sizes import choose_batch_sizes
    from harness.sources.user_samples import (
        base_samples,
        refuse_unfit_samples,
        samples_note,
        slice_notes,
    )

    entry = spec.make_entry()
    base_samples(entry, options)  # a samples callable that raises or returns nothing: exit 2
    refuse_unfit_samples(entry, options)  # samples that cannot call the Function: exit 2
    options = choose_batch_sizes(
        entry,
        options,
        fixed_single=bool(spec.batch_size),
        fixed_nested=bool(spec.nested_batch_sizes),
    )
    note = slice_notes(entry, base_samples(entry, options))
    if note:
        options = options.replace(slice_note=note)
    capped = samples_note(entry)
    return entry, (options.replace(samples_note=capped) if capped else options)


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


# --- afdb repro -------------------------------------------------------------------------


def _report_settings(path: str) -> dict[str, Any]:
    from harness.cli.repro_settings import report_settings

    return report_settings(path)


def _names_the_recorded(spec: Any, recorded: dict[str, Any]) -> bool:
    """Whether the TARGET (and --samples) the user named are the report's target spec."""
    from harness.sources.imports import same_spec

    samples = recorded.get("samples")
    if not same_spec(spec.target, recorded["target"]):
        return False
    return (spec.samples is None and samples is None) or (
        spec.samples is not None and samples is not None and same_spec(spec.samples, samples)
    )


def _name_it_yourself(args: argparse.Namespace, recorded: dict[str, Any]) -> str:
    """The refusal when a report's cases are of a user Function the user did not name."""
    command = ["afdb", "repro", args.case_id, recorded["target"]]
    if recorded.get("samples"):
        command += ["--samples", recorded["samples"]]
    command += ["--report", args.report]
    shown = visible(" ".join(shlex.quote(c) for c in command), keep_newlines=False)
    samples = f" with the samples {recorded['samples']}" if recorded.get("samples") else ""
    return visible(
        f"--report {args.report}: its cases are of the Function {recorded['target']}{samples}, "
        "which afdb does not import on a report's word; to reproduce one, name it yourself, "
        f"after reading it: {shown}",
        keep_newlines=False,
    )


def cmd_repro(args: argparse.Namespace) -> int:
    from harness.core.errors import UsageError
    from harness.core.options import DTYPES, Options, parse_dtype
    from harness.engine.cases import find_case
    from harness.sources.target import TargetSpec

    target_text = args.target or args.target_opt
    md: dict[str, Any] = _report_settings(args.report) if args.report else {}
    # a user's Function without a report: its samples' own dtypes, as afdb check runs it
    default_dtype = SAMPLE_DTYPES if target_text and not md else "float32"
    options = Options(
        seed=md.get("seed", 0),
        dtype=parse_dtype(md.get("dtype", default_dtype)),
        device=md.get("device", "cpu"),
    )
    if md.get("plan_cap"):
        options = options.replace(plan_cap=int(md["plan_cap"]))
    if args.seed is not None:
        options = options.replace(seed=args.seed)
    if args.dtype is not None:
        if args.dtype not in DTYPES and args.dtype != SAMPLE_DTYPES:
            raise CliError(
                f"unknown dtype {args.dtype!r}; use one of {', '.join(DTYPES)} or "
                f"{SAMPLE_DTYPES} (the samples' own)"
            )
        options = options.replace(dtype=parse_dtype(args.dtype))
    if args.device:
        options = options.replace(device=args.device)
    if args.plan_cap:
        options = options.replace(plan_cap=args.plan_cap)
    if ",hazard=" in args.case_id:  # a hazard-probe case exists only with the probe on
        options = options.replace(hazard_probe=True)
    from harness.session.settings import parse_int_list

    if args.batch_size:
        options = options.replace(batch_sizes=parse_int_list(args.batch_size, "--batch-size"))
    if args.nested_batch_sizes:
        options = options.replace(
            nested_batch_sizes=parse_int_list(args.nested_batch_sizes, "--nested-batch-sizes")
        )
    spec: Any = None
    recorded = md.get("target_spec")
    from_report = False
    if args.recorded is not None:  # a recorded Function: its entry from the recording
        from harness.cli.check_recorded import repro_entry

        entry, options = repro_entry(args, options)
        from harness.core.locations import portable_path
        from harness.session.recorded import RecordedTarget

        spec = RecordedTarget(
            portable_path(args.recorded), tuple(args.declare or ()), rebuild=args.rebuild_spec
        )
    elif md.get("source") == "recorded":
        raise CliError(
            f"--report {args.report}: its cases are of recorded Functions; name the recording: "
            f"afdb repro {shlex.quote(args.case_id)} --recorded DIR"
        )
    elif recorded and not target_text:  # a report names code: it runs only if the user names it
        raise CliError(_name_it_yourself(args, recorded))
    if target_text:
        spec = spec_from_args(args, target_text)
        if recorded and _names_the_recorded(spec, recorded):
            # the report's settings (capabilities, batch sizes), the user's own names
            spec = dataclasses.replace(
                TargetSpec.from_dict(recorded),
                target=spec.target,
                samples=spec.samples,
                base_dir=os.getcwd(),
            )
            from_report = True
    if args.recorded is not None:
        pass  # the entry and options from the recording, above
    elif spec is not None:
        if from_report:
            options = options.replace(
                batch_sizes=tuple(md.get("batch_sizes", options.batch_sizes)),
                nested_batch_sizes=tuple(md.get("nested_batch_sizes", options.nested_batch_sizes)),
                chunk=tuple(md.get("chunk", options.chunk)),  # type: ignore[arg-type]
            )
            entry = spec.make_entry()
        else:
            entry, options = prepared(spec, options)
    else:
        from harness.sources.database import load_source

        if md:
            options = options.replace(
                batch_sizes=tuple(md.get("batch_sizes", options.batch_sizes)),
                nested_batch_sizes=tuple(md.get("nested_batch_sizes", options.nested_batch_sizes)),
            )
        name = args.case_id.split("/", 1)[0]
        entries = {e.name: e for e in load_source(md.get("source") or "afdb")}
        if name not in entries:
            raise CliError(
                f"{args.case_id}: no database entry {name!r}; for your own Function pass "
                "TARGET (and --samples) as for afdb check, or --report FILE"
            )
        entry = entries[name]
    try:
        _, case = find_case(entry, options, args.case_id)
    except KeyError:
        from harness.engine.cases import EntryData, enumerate_cases

        ids = [c.id for c in enumerate_cases(EntryData(entry, options))]
        close = difflib.get_close_matches(args.case_id, ids, n=3, cutoff=0.5)
        hint = f"; did you mean {', '.join(close)}" if close else ""
        raise CliError(
            f"no case {args.case_id!r} for {entry.name} with seed {options.seed}, batch sizes "
            f"{list(options.batch_sizes)}{hint}? (ids come from the report or `afdb check` output)"
        ) from None
    if case.unsupported:
        raise UsageError(f"{case.id} is unsupported ({case.unsupported}): nothing to reproduce")
    from harness.repro.minimal import NotMinimal, generate_minimal
    from harness.repro.script import generate

    argv = list(getattr(args, "argv", None) or sys.argv[1:])
    for flag in ("-o", "--output"):  # the command that makes the script again, here
        while flag in argv[:-1]:
            del argv[argv.index(flag) : argv.index(flag) + 2]
    argv = [a for a in argv if a != "--full" and not a.startswith("--output=")]
    command = "afdb " + " ".join(shlex.quote(a) for a in argv)
    out = args.output or script_name(case.id)
    note = ""
    script = ""
    if not args.full:
        where = os.getcwd() if out == "-" else os.path.dirname(os.path.abspath(out))
        try:
            script = generate_minimal(
                entry,
                options,
                case,
                target=spec,
                command=command,
                script_dir=where,
                sub_check=args.sub_check or "",
            )
        except NotMinimal as e:
            note = f" (the minimal one does not cover {e})"
    if not script:
        script = generate(entry, options, case, target=spec, command=command)
    if out == "-":
        sys.stdout.write(script)
        if note:
            print(f"afdb repro: wrote the full script{note}", file=sys.stderr)
        return 0
    from harness.reports.report import write_atomic

    try:  # through a symlink to its target; a device or FIFO is refused, not replaced
        write_atomic(out, script)
    except UsageError as e:
        raise CliError(f"-o {e}") from None
    except OSError as e:
        raise CliError(f"-o {out}: cannot write the script ({e.strerror})") from None
    kind = "a minimal script" if not note and not args.full else "the full script"
    print(f"wrote {out}, {kind}{note}; run it with: python {out}")
    return 0


def script_name(case_id: str) -> str:
    """``repro_<case id>.py`` in letters, digits, ``-`` and ``_``: a sign stays a sign
    (``out_dims=-1`` and ``out_dims=1`` get two names); a long id is cut and keeps a
    digest of the whole, so two long ids never share a name."""
    import hashlib

    readable = re.sub(r"[^A-Za-z0-9-]+", "_", case_id).strip("_")
    if len(readable) > 80:
        digest = hashlib.sha256(case_id.encode()).hexdigest()[:8]
        readable = f"{readable[:71]}_{digest}"
    return f"repro_{readable}.py"
