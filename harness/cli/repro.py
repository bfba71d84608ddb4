"""``afdb repro CASE_ID``: write a standalone script that reproduces one case.

The case comes from the database, a user's target (TARGET, ``--samples``), a report
(``--report``: seed, dtype, batch sizes, capabilities) or a recording (``--recorded``);
the script is the minimal plain-torch one (``harness.repro.minimal``) or, with ``--full``,
the self-checking one (``harness.repro.script``).
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import os
import re
import shlex
import sys
from typing import TYPE_CHECKING, Any

from harness.cli.check_recorded import add_recorded_options, default_declaration
from harness.cli.target_options import add_target_options, prepared, spec_from_args
from harness.core.dtype_names import DTYPE_NAMES, SAMPLE_DTYPES
from harness.core.errors import CliError, UsageError
from harness.core.textsafe import visible
from harness.session.recorded import recording_source

if TYPE_CHECKING:
    from harness.core.options import Options


def add_parsers(sub: Any) -> None:
    """``afdb repro``'s parser."""
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
    add_target_options(r)
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
        from harness.sources.database import DatabaseSource

        if md:
            options = options.replace(
                batch_sizes=tuple(md.get("batch_sizes", options.batch_sizes)),
                nested_batch_sizes=tuple(md.get("nested_batch_sizes", options.nested_batch_sizes)),
            )
        name = args.case_id.split("/", 1)[0]
        entries = {e.name: e for e in DatabaseSource(md.get("source") or "afdb").entries()}
        if name not in entries:
            raise CliError(
                f"{args.case_id}: no database entry {name!r}; for your own Function pass "
                "TARGET (and --samples) as for afdb check, or --report FILE"
            )
        entry = entries[name]
    try:
        _, case = find_case(entry, options, args.case_id)
    except KeyError:
        from harness.engine.cases import enumerate_cases
        from harness.engine.sample_cache import EntryData

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


def repro_entry(args: argparse.Namespace, options: Options) -> tuple[Any, Options]:
    """``afdb repro CASE_ID --recorded DIR``: the case's entry and the run's batch sizes."""
    from harness.cli.repro_settings import rebuild_spec
    from harness.recording import load_recording

    recording = load_recording(args.recorded)
    name = args.case_id.split("/", 1)[0]
    args.rebuild_spec = rebuild_spec(args)
    classes = None
    if args.rebuild_spec is not None:
        from harness.sources.rebuild import rebuild

        qualname = name.partition(":")[2]
        spec, kwargs = args.rebuild_spec
        classes = {name: rebuild(spec, kwargs, qualname)}
    args.default_declaration = default_declaration(args)
    source = recording_source(args, recording, classes)
    entries = source.entries()
    by_name = {e.name: e for e in entries}
    function = recording.function(name)
    if name not in by_name and function is not None and not function.importable:
        from harness.recorded.repro_lines import test_name

        test = test_name([c.where for c in function.calls])
        rerun = f"pytest --afdb {shlex.quote(test)}" if test else "pytest --afdb"
        raise CliError(
            f"{args.case_id}: {name} is made inside a function or only in the recording "
            f"process, and no factory was named (--rebuild): rerun `{rerun}` and read the "
            "case there"
        )
    if name not in by_name:
        raise CliError(
            f"{args.case_id}: the recording {args.recorded} has no checkable Function {name!r}"
        )
    fixed = bool(getattr(args, "batch_size", None) or getattr(args, "nested_batch_sizes", None))
    return by_name[name], source.options(entries, options, fixed=fixed)
