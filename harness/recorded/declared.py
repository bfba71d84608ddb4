"""What a declaration for a Function the recording does not hold is: a misspelt name, a
class that is not an ``autograd.Function``, or a Function these tests never called.

Every recorded check (``afdb check --recorded``, ``afdb record --check``, ``pytest --afdb``)
says it in its summary and its report (``metadata.recorded.notes``), never silently
ignoring the line. The name is looked up only in modules the process already imported
(the tests imported the package under ``pytest --afdb``), in their namespaces (``vars``):
nothing is imported and no code of the package runs for it.
"""

from __future__ import annotations

import difflib
import sys
from collections.abc import Iterable, Sequence
from typing import Any

import torch

from harness.core.textsafe import visible


def _loaded(target: str) -> tuple[bool, Any]:
    """(whether the module is imported here, the object the name leads to or None)."""
    module, _, qual = target.partition(":")
    obj: Any = sys.modules.get(module)
    if obj is None or not qual:
        return False, None
    for part in qual.split("."):
        try:
            obj = vars(obj).get(part)
        except TypeError:
            return True, None
        if obj is None:
            return True, None
    return True, obj


def _what(target: str, recorded: Sequence[str]) -> str:
    loaded, obj = _loaded(target)
    if isinstance(obj, type) and not issubclass(obj, torch.autograd.Function):
        return f"{target} is a class but not an autograd.Function"
    if isinstance(obj, type):
        return "an autograd.Function these tests never called"
    close = difflib.get_close_matches(target, list(recorded), n=1, cutoff=0.75)
    if close:
        return f"no Function of that name was called; did you mean {close[0]}?"
    if loaded:
        module = target.partition(":")[0]
        return f"{module} has no such name: a misspelt name?"
    return "no Function of that name was called: a misspelt name, or one never called?"


def unknown_declaration_notes(declared: Iterable[str], recorded: Sequence[str]) -> list[str]:
    """One ``note:`` line per declared target the recording does not hold."""
    notes = []
    for name in declared:
        if name in recorded:
            continue
        notes.append(
            f"note: a declaration names {visible(name, keep_newlines=False)}, which the "
            f"recording does not hold ({visible(_what(name, recorded), keep_newlines=False)}); "
            "the line is not used"
        )
    return notes
