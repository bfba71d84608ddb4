"""``afdb check --recorded [DIR] [PREFIX...]``: check every Function a recording saw.

The command line's side only: its options, the default declaration its capability flags
make, and ``afdb record --check`` / ``harness.check_recorded`` (which take ``afdb check``'s
option strings). The recording is a source (``harness.sources.recording``); checking it is
``harness.session.recorded.check_recording``, which ``pytest --afdb`` calls too.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from harness.core.errors import CliError
from harness.session.recorded import check_recording
from harness.sources.recording import DEFAULT_DIR

if TYPE_CHECKING:  # core.options imports torch; `afdb check --help` must not
    pass


def add_recorded_options(p: argparse.ArgumentParser) -> None:
    """``--recorded [DIR]`` and ``--declare LINE`` (``afdb check`` and ``afdb repro``)."""
    p.add_argument(
        "--recorded",
        nargs="?",
        const=DEFAULT_DIR,
        metavar="DIR",
        help=f"check every Function of a recording (`afdb record`; default {DEFAULT_DIR}) "
        "with its recorded calls as samples; TARGETs are then name prefixes that select some",
    )
    p.add_argument(
        "--declare",
        action="append",
        metavar="LINE",
        help="with --recorded: what one Function's class cannot say, e.g. "
        "'mylib.ops:RoundSTE gradient=custom nondiff-args=1'; repeatable",
    )


def default_declaration(args: argparse.Namespace) -> Any:
    """The command line's capability flags, for every recorded Function (a --declare line
    for one Function replaces them for it)."""
    from harness.cli.target_options import spec_from_args
    from harness.sources.declare import Declaration

    spec = spec_from_args(args, "recorded:all")
    return Declaration("*", spec.gradient, dict(spec.capabilities))


def cmd_check_recorded(args: argparse.Namespace) -> int:
    if getattr(args, "accept", False):
        raise CliError("--accept with --recorded is not supported yet; write the file by hand")
    if getattr(args, "last_failed", None):
        from harness.cli.selection import apply_last_failed

        rerun = apply_last_failed(args, user=True, recorded=True) or []
        if not rerun:
            print(f"nothing to rerun: {args.last_failed} has no non-conforming case")
            return 0
        args.target = list(args.target or ()) or rerun
    if getattr(args, "watch", False):
        raise CliError("--watch with --recorded: record again instead (afdb record)")
    args.default_declaration = default_declaration(args)
    status, _, _ = check_recording(args)
    return status


def check_after_record(
    directory: str,
    recording: Any,
    classes: Mapping[str, Any],
    declarations: Sequence[str],
    live: Mapping[str, Any] | None = None,
    options: Sequence[str] = (),
) -> int:
    """``afdb record --check``: the recording checked in the recording process (``live``:
    the recorder's live snapshots, ``Recorder.live_calls``; ``options``: more of ``afdb
    check``'s options)."""
    from harness.cli.main import build_parser

    argv = ["check", "--recorded", directory, *options]
    for line in declarations:
        argv += ["--declare", line]
    args = build_parser().parse_args(argv)
    args.argv = argv
    args.live_calls = live
    args.default_declaration = default_declaration(args)
    status, _, _ = check_recording(args, recording=recording, classes=classes)
    return status


def check_recorded(recorder: Any, *options: str, declare: Sequence[str] = ()) -> int:
    """After ``with harness.recording(DIR) as recorder: ...``: check the recording in this
    process, with its live classes and live values, as ``afdb record --check`` does;
    ``options`` are ``afdb check``'s (``"--checks", "vjp"``). Returns the exit status."""
    return check_after_record(
        str(recorder.out_dir),
        recorder.result(),
        recorder.classes,
        list(declare),
        recorder.live_calls(),
        options,
    )
