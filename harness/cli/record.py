"""``afdb record [-o DIR] ... -m MODULE [ARGS...]`` / ``afdb record [...] SCRIPT.py [ARGS...]``:
run a program as ``python -m MODULE`` / ``python SCRIPT.py`` would, with every
autograd.Function call recorded to DIR (default ``.afdb/recorded``).

The program runs in this process through ``runpy`` with the ``sys.argv``, ``sys.path[0]``
and ``__main__`` Python gives it. Its exit status is the command's; a program that raises
or calls ``sys.exit`` still leaves its recording. ``-m pytest`` records through the pytest
plugin (``--afdb-record=DIR``), so pytest-xdist workers are recorded too and each call's
place is its test's node id.
"""

from __future__ import annotations

import argparse
import os
import runpy
import sys
import traceback
from pathlib import Path
from typing import Any

from harness.core.errors import CliError

DEFAULT_DIR = ".afdb/recorded"


def _megabytes(text: str) -> int:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of MiB") from None
    if not value >= 0 or value > 1 << 40:
        raise argparse.ArgumentTypeError(f"{text!r}: give a size in MiB >= 0")
    return int(value * (1 << 20))


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give a whole number >= 1")
    return value


def add_parsers(sub: Any) -> None:
    p = sub.add_parser(
        "record",
        help="run a program (a test suite, a script) and record its autograd.Function calls",
        description="Run `python -m MODULE ARGS` or `python SCRIPT.py ARGS` in this process "
        "with every torch.autograd.Function call observed, and write up to K distinct calls "
        "per Function to DIR (JSON and safetensors; never pickle). Exit status: the "
        "program's own (2 for bad usage of afdb record itself).",
    )
    p.add_argument(
        "-o", "--output", default=DEFAULT_DIR, metavar="DIR", help=f"default {DEFAULT_DIR}"
    )
    p.add_argument(
        "--source",
        action="append",
        default=[],
        metavar="PKG",
        help="also list the Functions defined in package PKG that no call reached (repeatable)",
    )
    p.add_argument(
        "--ops",
        action="append",
        default=[],
        metavar="NS",
        help="also record the torch.library custom ops of namespace NS (repeatable)",
    )
    p.add_argument(
        "--max-calls",
        type=_positive,
        default=8,
        metavar="K",
        help="calls kept per Function, covering the most argument combinations (default 8)",
    )
    p.add_argument(
        "--tensor-limit",
        type=_megabytes,
        default=16 << 20,
        metavar="MB",
        help="a call with a tensor larger than this (MiB) is not kept (default 16)",
    )
    p.add_argument(
        "--total-limit",
        type=_megabytes,
        default=256 << 20,
        metavar="MB",
        help="the recording's tensors stop at this size (MiB; default 256)",
    )
    p.add_argument(
        "-m",
        dest="module",
        nargs=argparse.REMAINDER,
        metavar="MODULE [ARGS]",
        help="run a module as `python -m MODULE ARGS` does",
    )
    p.add_argument(
        "script",
        nargs=argparse.REMAINDER,
        metavar="SCRIPT.py [ARGS]",
        help="or run a script as `python SCRIPT.py ARGS` does",
    )
    p.add_argument(
        "--check",
        action="store_true",
        help="then check every recorded Function in this process, with the live classes (so "
        "those defined in __main__ or a function are checked too); -m pytest: as pytest --afdb",
    )
    p.add_argument(
        "--declare",
        action="append",
        default=[],
        metavar="LINE",
        help="with --check: what one Function's class cannot say (as afdb check --declare)",
    )
    p.set_defaults(func=cmd_record)

    p = sub.add_parser(
        "recording",
        help="validate a recording and list what it holds",
        description="Read a recording (validated: a damaged or hostile one is one line, exit "
        "2) and print one line per Function: its calls kept, calls seen, calls not recorded "
        "and why, where it was called inside another Function; then the Functions of the "
        "named sources never called.",
    )
    p.add_argument(
        "dir", nargs="?", default=DEFAULT_DIR, metavar="DIR", help=f"default {DEFAULT_DIR}"
    )
    p.set_defaults(func=cmd_recording)


def _program(args: argparse.Namespace) -> tuple[str | None, str | None, list[str]]:
    """(module, script, its arguments), or CliError naming what is missing."""
    if args.module is not None:
        if args.script:
            raise CliError("give either -m MODULE or SCRIPT.py, not both")
        if not args.module:
            raise CliError("-m needs a module name, e.g. afdb record -m pytest tests/")
        return args.module[0], None, args.module[1:]
    if not args.script:
        raise CliError("give the program to run: -m MODULE [ARGS] or SCRIPT.py [ARGS]")
    script = args.script[0]
    if script.startswith("-"):
        raise CliError(f"unknown option {script}; options come before -m MODULE or SCRIPT.py")
    if not os.path.isfile(script):
        raise CliError(f"{script}: no such script; give the path of a Python file")
    return None, script, args.script[1:]


def _exit_status(e: SystemExit) -> int:
    """The status ``python`` exits with for ``sys.exit(code)``."""
    if e.code is None:
        return 0
    if isinstance(e.code, int):
        return e.code
    print(e.code, file=sys.stderr)
    return 1


def run_program(module: str | None, script: str | None, argv: list[str]) -> int:
    """Run the program here as the interpreter would; its exit status."""
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    try:
        if module is not None:
            sys.argv = [module, *argv]
            sys.path[0:1] = [os.getcwd()]
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        else:
            assert script is not None
            sys.argv = [script, *argv]
            sys.path[0:1] = [os.path.dirname(os.path.realpath(script))]
            runpy.run_path(script, run_name="__main__")
        return 0
    except SystemExit as e:
        return _exit_status(e)
    except KeyboardInterrupt:
        raise
    except BaseException as e:
        tb = e.__traceback__
        while tb is not None and (  # the traceback Python would print: the program's frames
            tb.tb_frame.f_code.co_filename in (__file__, "<frozen runpy>")
            or tb.tb_frame.f_code.co_filename.endswith("runpy.py")
        ):
            tb = tb.tb_next
        traceback.print_exception(type(e), e, tb)
        return 1
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path


def cmd_record(args: argparse.Namespace) -> int:
    from harness.core.locations import portable_path
    from harness.recording import recording, store
    from harness.recording.summary import summary_line

    module, script, argv = _program(args)
    out_dir = Path(args.output)
    store.check_target(out_dir)
    if module == "pytest":  # through the plugin: xdist workers and node ids
        extra = [f"--afdb-record={out_dir}", f"--afdb-max-calls={args.max_calls}"]
        extra += [f"--afdb-tensor-limit={args.tensor_limit / (1 << 20)}"]
        extra += [f"--afdb-total-limit={args.total_limit / (1 << 20)}"]
        extra += [f"--afdb-source={s}" for s in args.source]
        extra += [f"--afdb-ops={n}" for n in args.ops]
        if getattr(args, "check", False):  # pytest --afdb: the check at the session's end
            extra += ["--afdb", *(f"--afdb-declare={line}" for line in args.declare)]
        if os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD"):
            extra = ["-p", "afdb_pytest_plugin", *extra]
        status = run_program(module, None, [*extra, *argv])
        if not (out_dir / store.INDEX).exists():
            raise CliError(
                f"pytest wrote no recording to {portable_path(str(out_dir))} (exit status "
                f"{status}; see pytest's message above, or the plugin was turned off with "
                "-p no:afdb)"
            )
        return status  # the plugin printed the summary line
    else:
        shown = f"-m {module}" if module else portable_path(str(script))
        program = " ".join([shown, *argv])
        with recording(
            out_dir,
            sources=tuple(args.source),
            ops=tuple(args.ops),
            max_calls=args.max_calls,
            tensor_limit=args.tensor_limit,
            total_limit=args.total_limit,
            program=program,
        ) as recorder:
            status = run_program(module, script, argv)
        print(summary_line(recorder.result(), out_dir), file=sys.stderr)
        if getattr(args, "check", False):
            from harness.cli.check_recorded import check_after_record
            from harness.recording import load_recording

            rec = load_recording(out_dir)
            checked = check_after_record(
                str(out_dir), rec, recorder.classes, args.declare or (), recorder.live_calls()
            )
            return status if status else checked
    return status


def cmd_recording(args: argparse.Namespace) -> int:
    from harness.core.textsafe import visible
    from harness.recording import load_recording
    from harness.recording.summary import describe, summary_line

    rec = load_recording(args.dir)
    for line in describe(rec):
        print(visible(line, keep_newlines=False))
    print(summary_line(rec, args.dir, verb="read"))
    return 0
