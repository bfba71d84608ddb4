"""The one line that says what a recording holds."""

from __future__ import annotations

from pathlib import Path

from harness.core.locations import portable_path
from harness.recording.live import Live, placeholders
from harness.recording.model import Recording


def _n(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def summary_line(rec: Recording, out_dir: str | Path, verb: str = "recorded") -> str:
    """``recorded 5 Functions (12 calls) to .afdb/recorded; 1 call not recorded (...)``;
    ``verb="read"``: ``read 5 Functions (12 calls) from DIR; ...``."""
    where = "from" if verb == "read" else "to"
    line = (
        f"{verb} {_n(len(rec.functions), 'Function')} ({_n(rec.call_count, 'call')}) {where} "
        f"{portable_path(str(out_dir))}"
    )
    if rec.skipped_count:
        line += f"; {_n(rec.skipped_count, 'call')} not recorded (see skipped in recording.json)"
    if rec.never_called:
        line += f"; {_n(len(rec.never_called), 'Function')} of the named sources never called"
    return line


def describe(rec: Recording) -> list[str]:
    """One line per Function (and per Function never called) of a recording."""
    lines = []
    for f in rec.functions:
        kind = "custom op" if f.kind == "custom_op" else ("legacy" if f.legacy else "Function")
        text = f"{f.target} ({kind}): {_n(len(f.calls), 'call')} kept of {f.call_count} seen"
        live = [
            c for c in f.calls if any(isinstance(v, Live) for v in placeholders([c.args, c.kwargs]))
        ]
        if live:
            kinds = sorted(
                {
                    v.type + (f": {v.why}" if v.why else "")
                    for c in live
                    for v in placeholders([c.args, c.kwargs])
                    if isinstance(v, Live)
                }
            )
            text += f"; {_n(len(live), 'call')} live-only ({', '.join(kinds)})"
        if not f.importable:
            text += "; not importable (defined in __main__ or inside a function)"
        if f.under_transform:
            text += f"; {f.under_transform} under a torch.func transform"
        if f.nested_in:
            text += "; called inside " + ", ".join(f"`{n}`" for n in f.nested_in)
        for s in f.skipped:
            text += f"; {_n(s.count, 'call')} not recorded: {s.reason} (first at {s.where})"
        if f.not_kept:
            combos = [f"{n.combination} x{n.count}" for n in f.not_kept]
            text += (
                f"; {_n(len(f.not_kept), 'argument combination')} seen but not kept (over "
                f"--max-calls): " + ", ".join(combos)
            )
        lines.append(text)
    lines.extend(f"{t}: never called" for t in rec.never_called)
    return lines
