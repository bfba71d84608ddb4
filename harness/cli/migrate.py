"""``afdb migrate TARGET``: a legacy ``forward(ctx, ...)`` Function rewritten to the
torch.func style, verified against the original before anything is written.

Prints the unified diff, one line per class (migrated and verified, refused and why, or
the difference found), what happened to ``generate_vmap_rule`` with ``--vmap generate``,
and the summary of the suite's torch.func checks on each migrated class. Exit 0: migrated
and verified (or nothing to migrate); 1: the verification found a difference (nothing
written unless ``--force``); 2: refused (one line why) or bad input.
"""

from __future__ import annotations

import argparse
from typing import Any

from harness.cli.target_options import arg_positions
from harness.core.textsafe import visible

DOC_LINK = "docs/migrating.md"


def add_parsers(sub: Any) -> None:
    p = sub.add_parser(
        "migrate",
        help="rewrite a legacy forward(ctx, ...) Function for torch.func, verified first",
        description="Rewrite legacy forward(ctx, ...) autograd.Functions as forward(*args) + "
        "setup_context(ctx, inputs, output), verify each against the original on samples "
        "(forward, gradients, double backward, at float64 and the samples' dtype), then run "
        "the torch.func checks on it. Prints a unified diff; --write applies it. Exit 0: "
        "migrated and verified, or nothing to migrate; 1: the verification found a difference "
        "(nothing written unless --force); 2: refused (one line why) or bad input. See "
        f"{DOC_LINK}.",
    )
    p.add_argument(
        "target",
        metavar="TARGET",
        help="path/file.py[:Class], package.module[:Class], or a file, folder or package (every "
        "legacy Function in it)",
    )
    p.add_argument(
        "--samples",
        metavar="SAMPLES",
        help="module:attr or path/file.py:attr of a callable returning argument tuples or "
        "Sample objects, as afdb check takes (default: the class's `samples` attribute)",
    )
    p.add_argument(
        "--recorded",
        metavar="DIR",
        help="verify on the calls recorded in DIR (harness.recording) instead of --samples",
    )
    p.add_argument(
        "--vmap",
        choices=("generate",),
        help="generate: add generate_vmap_rule = True, kept only if the vmap checks pass",
    )
    p.add_argument(
        "--write",
        action="store_true",
        help="apply the diff to the files named (each replaced atomically) once every migration "
        "verified",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="with --write, write a migration even when the verification found a difference",
    )
    p.add_argument(
        "--checks",
        metavar="LIST",
        help="the torch.func checks run on the migrated class, e.g. vmap,vjp (default: all; "
        "none: skip them)",
    )
    p.add_argument(
        "--gradient",
        choices=("derivative", "custom"),
        default="derivative",
        help="for the torch.func checks: custom when backward is deliberately not the "
        "derivative (straight-through, clipping)",
    )
    p.add_argument(
        "--nondiff-args",
        dest="nondiff_args",
        type=arg_positions,
        metavar="N,M",
        help="for the torch.func checks: argument positions never differentiated",
    )
    p.add_argument(
        "--no-double-backward",
        action="store_true",
        help="for the torch.func checks: backward is not differentiable",
    )
    p.add_argument(
        "--randomness", action="store_true", help="for the torch.func checks: uses randomness"
    )
    p.add_argument(
        "--debug", action="store_true", default=argparse.SUPPRESS, help="tracebacks for errors"
    )
    p.set_defaults(func=cmd_migrate)


def _settings(args: argparse.Namespace) -> Any:
    from harness.core.errors import CliError
    from harness.migrate.run import Settings

    if args.force and not args.write:
        raise CliError("--force only changes what --write does; add --write")
    if args.samples and args.recorded:
        raise CliError("give --samples or --recorded, not both")
    checks: tuple[str, ...] | None = None
    if args.checks:
        names = tuple(c.strip() for c in args.checks.split(",") if c.strip())
        if names == ("none",):
            checks = ()
        else:
            from harness.checks.catalogue import check_names

            known = check_names()
            unknown = [c for c in names if c not in known]
            if unknown or not names:
                raise CliError(
                    f"--checks {args.checks}: unknown check {unknown[0] if unknown else '(none)'!r}"
                    f"; known: {', '.join(known)}, or none"
                )
            checks = names
    opts: dict[str, Any] = {}
    if args.gradient != "derivative":
        opts["gradient"] = args.gradient
    if args.nondiff_args:
        opts["nondiff_args"] = tuple(args.nondiff_args)
    if args.no_double_backward:
        opts["double_backward"] = False
    if args.randomness:
        opts["randomness"] = True
    return Settings(
        samples=args.samples,
        recorded=args.recorded,
        generate_vmap=args.vmap == "generate",
        write=args.write,
        force=args.force,
        func_checks=checks,
        check_options=opts,
    )


def cmd_migrate(args: argparse.Namespace) -> int:
    import sys

    from harness.cli.check import print_check_summary
    from harness.migrate.run import DIFFERS, MIGRATED, exit_status, migrate

    settings = _settings(args)

    def progress(line: str) -> None:
        print(f"afdb migrate: {line}", file=sys.stderr, flush=True)

    files = migrate(args.target, settings, progress)
    status = exit_status(files)
    for f in files:
        diff = f.diff()
        if diff:
            sys.stdout.write(diff if diff.endswith("\n") else diff + "\n")
    for f in files:
        for c in f.classes:
            print(visible(f"{f.source.label}:{c.name}: {c.message}", keep_newlines=False))
            if c.status == DIFFERS and c.verdict is not None:
                for line in c.verdict.differences[1:6]:
                    print(f"  difference: {visible(line, keep_newlines=False)}")
            if c.vmap:
                print(f"  {visible(c.vmap, keep_newlines=False)}")
            if c.checks_note:
                print(f"  {visible(c.checks_note, keep_newlines=False)}")
            if c.status == MIGRATED and c.checks is not None:
                print(f"  torch.func checks on the migrated {c.name}:")
                print_check_summary(c.checks)
    changed = [f for f in files if f.rewritten != f.original]
    if any(f.written for f in files):
        for f in files:
            if f.written:
                print(f"wrote {f.source.label}")
    elif changed and status == 1:
        print(
            "nothing written: the verification found a difference (see above); fix the "
            "migration by hand, or --write --force to write it anyway"
        )
    elif changed and not args.write:
        print("not written: pass --write to apply the diff above")
    elif not changed and status == 0:
        print("nothing to migrate")
    print(f"see {DOC_LINK} for what the migration does and the manual options")
    return status
