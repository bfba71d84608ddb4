"""The one line that says what a recording holds."""

from __future__ import annotations

from pathlib import Path

from harness.core.locations import portable_path
from harness.recording.model import Recording


def _n(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def summary_line(rec: Recording, out_dir: str | Path) -> str:
    """``recorded 5 Functions (12 calls) to .afdb/recorded; 1 call not recordable``."""
    line = (
        f"recorded {_n(len(rec.functions), 'Function')} ({_n(rec.call_count, 'call')}) to "
        f"{portable_path(str(out_dir))}"
    )
    if rec.skipped_count:
        line += f"; {_n(rec.skipped_count, 'call')} not recorded (see skipped in recording.json)"
    if rec.never_called:
        line += f"; {_n(len(rec.never_called), 'Function')} of the named sources never called"
    return line
