"""The ``afdb`` command line.

Exit status: 0 everything conforms, 1 something does not, 2 bad usage or a
target that cannot be loaded (one line on stderr; ``--debug`` adds the traceback), 3 the
suite itself failed on some case (``internal``), 5 nothing was checked (every case
``unsupported`` or ``skip``: pytest's status for "no tests ran"), 130 interrupted (Ctrl-C
or SIGTERM, at any moment: while torch is imported, while workers start, while reports are
written).

Importing this module imports neither torch nor the commands (``build_parser`` does), so
``entry`` has its signal handlers in place before anything slow runs.

Subcommands live in small modules: this one holds ``list`` and ``run``; other
modules named in ``COMMAND_MODULES`` add theirs through ``add_parsers(sub)``.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import sys
from collections.abc import Callable, Sequence
from typing import Any

from harness.core.errors import UsageError

#: Modules that contribute subcommands (each defines ``add_parsers(subparsers)``).
COMMAND_MODULES = (
    "harness.cli.report",
    "harness.cli.check",
    "harness.cli.repro",
    "harness.cli.merge",
    "harness.cli.certify",
    "harness.cli.record",
    "harness.cli.migrate",
)


class OneLineParser(argparse.ArgumentParser):
    """argparse, except that a usage error is one line (``afdb run: error: ...``), exit 2."""

    def error(self, message: str) -> Any:  # type: ignore[override]
        from harness.core.textsafe import visible

        line = visible(message, keep_newlines=False)
        self.exit(2, f"{self.prog}: error: {line} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    from harness.cli.common import add_common_options
    from harness.cli.run import cmd_list, cmd_run
    from harness.cli.selection import add_selection_options

    parser = OneLineParser(
        prog="afdb",
        description="Conformance suite for torch.autograd.Function under torch.func transforms.",
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks for usage errors")
    parser.add_argument("--version", action=_Version, help="print the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("list", help="entries, their capabilities and API axes")
    p.add_argument("--source", default="afdb", help="entry source: afdb (default) or pytorch")
    p.add_argument("--axes", action="store_true", help="API axes and the entries covering each")
    p.add_argument("--checks", action="store_true", help="the check catalogue")
    p.add_argument("-v", "--verbose", action="store_true", help="show tags")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("run", help="run the database (or a selection) and write reports")
    p.add_argument(
        "names",
        nargs="*",
        metavar="SELECT",
        help="entry names, tag:TAG, or case id prefixes such as NumpyMul/vmap (default: all)",
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
    add_selection_options(p, "run")
    p.set_defaults(func=cmd_run)

    for name in COMMAND_MODULES:
        importlib.import_module(name).add_parsers(sub)
    return parser


class _Version(argparse.Action):
    """``--version``: the line is made when asked for (it imports torch, which ``--help``
    never does)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(
            option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, nargs=0, **kwargs
        )

    def __call__(self, parser: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> None:
        print(version_line())
        parser.exit()


def version_line() -> str:
    """``afdb 0.1.0 (torch 2.13.0+cpu, Python 3.11.7)``."""
    import platform

    import torch

    from harness.engine.metadata import SUITE_VERSION

    return f"afdb {SUITE_VERSION} (torch {torch.__version__}, Python {platform.python_version()})"


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # OneLineParser printed its one-line usage error
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
        from harness.core.textsafe import visible

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


class _CommandSignals:
    """SIGINT and SIGTERM for the whole command: ``KeyboardInterrupt`` while it runs (from
    the first import on), only noted once it is over (flushing, ``atexit``), so no signal
    at any moment ends it with a traceback or "Exception ignored" noise."""

    def __init__(self) -> None:
        self.raising = True
        self.noted = False

    def __call__(self, signum: int, frame: Any) -> None:
        self.noted = True
        if self.raising:
            raise KeyboardInterrupt

    def install(self) -> None:
        import signal

        for signum in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(ValueError, OSError):
                signal.signal(signum, self)


def _run_main(signals: _CommandSignals) -> int:
    try:
        try:
            return main()
        finally:
            signals.raising = False  # first: a signal from here on is only noted
    except KeyboardInterrupt:  # before main's own handling (importing the commands, torch)
        signals.raising = False
        with contextlib.suppress(Exception):
            print("afdb: interrupted", file=sys.stderr)
        return 130


def entry() -> None:
    """The ``afdb`` command: ``main``, then a prompt exit (130 if a signal came at any point).

    The interpreter's own finalisation after a run (torch's and ``torch._dynamo``'s
    modules torn down one by one) took 0.3 to 0.6 s, a tenth of ``afdb run --source
    pytorch``. Every report is written, fsynced and closed by then, so the exit
    flushes the standard streams, runs the ``atexit`` handlers (temporary folders,
    logging) and ends the process. It also means a thread a Function left running does
    not keep the finished command waiting.
    """
    signals = _CommandSignals()
    signals.install()
    code = _run_main(signals)
    import atexit
    import os

    for stream in (sys.stdout, sys.stderr):
        # A reader that left, a stream already closed: nothing more to deliver.
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    try:
        atexit._run_exitfuncs()
    finally:
        os._exit(130 if signals.noted else code)


if __name__ == "__main__":
    entry()
