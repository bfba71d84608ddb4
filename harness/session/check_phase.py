"""What a recorded check's phase decides besides its cases: how many workers it uses by
default, and the reports it writes when nothing could be checked.

Kept apart from ``harness.session.recorded`` (the one path of every recorded check), which
calls these at its two seams.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any


def default_workers(args: argparse.Namespace, entries: Sequence[Any]) -> str:
    """Spread the check over the machine's cores unless ``-n`` (``--afdb-workers``) says
    otherwise: one worker per Function up to the physical cores (``-n auto``), where there is
    more than one Function; one worker (isolation) for a single Function. Returns the line
    that says so ('' when ``-n`` decided, or for one Function)."""
    if getattr(args, "workers", None) is not None or len(entries) < 2:
        return ""
    from harness.engine.cores import physical_cores

    cores = physical_cores()
    n = max(1, min(cores, len(entries)))
    args.workers = str(n)
    return (
        f"the cases run in {n} worker process{'es' if n != 1 else ''} (one per Function, up "
        f"to the {cores} physical core{'s' if cores != 1 else ''}; -n / --afdb-workers N "
        "sets it)"
    )


def write_empty_reports(
    args: argparse.Namespace, options: Any, recorded: dict[str, Any], started: float
) -> None:
    """The reports asked for, written also when no Function could be checked (no case ran):
    ``recorded`` (the verdicts' metadata) says why each was not. A failed write is one line."""
    import sys

    from harness.core.results import RunResult
    from harness.engine.metadata import run_metadata
    from harness.session.outputs import write_reports

    argv = getattr(args, "argv", None)
    metadata = run_metadata(
        options,
        started=started,
        source="recorded",
        command=["afdb", *argv] if argv is not None else None,
    )
    metadata["interrupted"] = False
    metadata["recorded"] = recorded
    for line in write_reports(RunResult([], metadata), args):
        print(f"afdb check: error: {line}", file=sys.stderr)


__all__ = ["default_workers", "write_empty_reports"]
