"""Global state a Function left changed, which the suite put back: a failure where it changes
results, a note where it does not.

A case captures torch's and the process's global state before it runs (grad mode, the
default dtype, the number of threads, autocast, modes, the working directory, signal
handlers...) and puts back whatever the Function changed (``harness.engine.isolation``,
``harness.engine.case_state``). State that changes what the caller's next line computes
(autocast, the default dtype or device, grad or inference mode, torch function and dispatch
modes, anomaly mode, deterministic algorithms) fails the case (``left_changed``): in a
user's program the same leak breaks every line after it. State that changes nothing
computed (the number of threads, the working directory, log levels, signal handlers) is the
suite's hygiene, not a wrong answer: the case keeps its status and its message carries the
note (``case_note``); the Function's verdict line says it once (``verdict_note``), and so
does the report.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

#: The words that end the note in a case's message (and find it again).
RESTORED = "restored before the next case"

_NOTE = re.compile(r"note: the Function (.+?) \(" + re.escape(RESTORED) + r"\)")


def case_note(changes: Sequence[str]) -> str:
    """``note: the Function left the number of threads at 2 (was 1) (restored before the
    next case)`` for the phrases of what changed."""
    return f"note: the Function {'; '.join(changes)} ({RESTORED})"


def left_changed(changes: Sequence[str]) -> str:
    """The failure of a case whose Function left state changed that changes results."""
    return (
        f"the Function {'; '.join(changes)} and did not put it back: that changes what the "
        "caller's next line computes (a failure, not a note; " + RESTORED + ")"
    )


def changes_in(message: str) -> list[str]:
    """The phrases of the state notes in one case's message (none: [])."""
    found: list[str] = []
    for m in _NOTE.finditer(message):
        for phrase in m.group(1).split("; "):
            if phrase not in found:
                found.append(phrase)
    return found


def _general(phrase: str) -> str:
    """The phrase without its values, so the same change counts once ("left the number of
    threads at 2 (was 1)" and "... at 1 (was 2)" are one kind)."""
    return re.sub(r"\b(at|was) [^;()]+", r"\1 ...", phrase)


def verdict_note(cases: Iterable[Any]) -> str:
    """``note: the Function left the number of threads at 2 (was 1) in 3 cases, restored each
    time (the suite's hygiene, not a verdict)`` for the cases of one Function ("" when
    none changed anything)."""
    count = 0
    kinds: dict[str, str] = {}
    for c in cases:
        phrases = changes_in(getattr(c, "message", "") or "")
        if not phrases:
            continue
        count += 1
        for p in phrases:
            kinds.setdefault(_general(p), p)
    if not count:
        return ""
    shown = "; ".join(list(kinds.values())[:3]) + ("; ..." if len(kinds) > 3 else "")
    where = "in 1 case, restored" if count == 1 else f"in {count} cases, restored each time"
    return f"note: the Function {shown} {where} (the suite's hygiene, not a verdict)"
