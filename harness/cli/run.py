"""``afdb run`` and ``afdb list``: the database sources (``harness.sources.database``) run
through ``harness.session.execute``, which every running command shares."""

from __future__ import annotations

import argparse

from harness.cli.selection import apply_last_failed, last_failed_note
from harness.session.execute import closing_lines, controller_threads, execute, run_status
from harness.session.outputs import check_output_paths
from harness.session.settings import options_from_args

# --- afdb list --------------------------------------------------------------------------


def cmd_list(args: argparse.Namespace) -> int:
    from harness.checks.catalogue import CHECKS, check_names
    from harness.sources.database import DatabaseSource

    if args.checks:
        for name in check_names():  # catalogue order (afdb certify's backend checks left out)
            spec = CHECKS[name]
            print(f"{name:<14} [{spec.family}] {spec.description} (reference: {spec.reference})")
        return 0
    entries = DatabaseSource(args.source).entries()
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


def cmd_run(args: argparse.Namespace) -> int:
    from harness.sources.database import DatabaseSource
    from harness.sources.select import case_prefixes, select_entries

    rerun = apply_last_failed(args, user=False)
    options = options_from_args(args)
    check_output_paths(args)
    controller_threads(args)
    source = DatabaseSource(args.source)
    everything = source.entries()
    names = list(args.names)
    if rerun is not None:
        if not rerun:
            print(f"nothing to rerun: {args.last_failed} has no non-conforming case")
            return 0
        names = names or rerun
    entries = select_entries(everything, names)
    args.case_prefixes = case_prefixes(entries, names)
    options = source.options(entries, options)
    if args.no_expectations:
        args.expectations = None
    elif not args.expectations:
        committed = source.expectations()
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


# --- main -------------------------------------------------------------------------------
