"""Sub-checks outside the program's own use of a recorded Function.

The vjp checks differentiate each input alone as well as all together. A recorded Function
knows which inputs its program differentiated together in each call
(``Capabilities.grad_patterns``). Where the Function *raises* on a subset no recorded call
used (an ODE adjoint whose backward assumes its parameters always require grad, as the
public API guarantees), that is a loud limitation outside the program's use, not a wrong
answer: the sub-check is named as not checked in the case's notes. A wrong value on such a
subset (a gradient silently missing) still fails, as does a raise on a pattern a call made.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def outside_recorded_use(entry: Any, ins: Sequence[int], every: Sequence[int]) -> str:
    """Why ``ins`` is a set of inputs no recorded call differentiated together ('' when a
    call did, when ``ins`` is every input, or when the entry is not a recording's)."""
    patterns = tuple(getattr(getattr(entry, "caps", None), "grad_patterns", ()) or ())
    if not patterns or tuple(ins) == tuple(every) or tuple(ins) in patterns:
        return ""
    used = "; ".join("inputs " + ", ".join(map(str, p)) for p in patterns if p)
    return f"no recorded call differentiated only these (the calls differentiated {used})"


def noted_outside_use(
    notes: list[str],
    entry: Any,
    label: str,
    ins: Sequence[int],
    every: Sequence[int],
    error: BaseException,
) -> bool:
    """Whether ``error`` (the Function raising on sub-check ``label``, inputs ``ins``) is
    outside the recorded program's use; if so the sub-check is named in ``notes`` as not
    checked."""
    why = outside_recorded_use(entry, ins, every)
    if why:
        notes.append(not_checked_note(label, error, why))
    return bool(why)


def not_checked_note(name: str, error: BaseException, why: str) -> str:
    cause = error.__cause__ or error
    first = str(cause).strip().splitlines()[0][:200] if str(cause).strip() else ""
    return (
        f"{name}: not checked: the Function raises when only these inputs need a gradient "
        f"({type(cause).__name__}: {first}), and {why}"
    )
