"""The one way a reproducer writes the harness's data into its text: plain literals only.

Both scripts (``script``, the full one, and ``minimal``, the short one) write seeds,
names, tolerances, steps and paths through ``literal``, so neither can ever embed an
object's ``repr`` that is not Python source a reader can trust. A float that is not
finite has no literal: it is written ``float('inf')``, ``float('-inf')`` or
``float('nan')`` (``repr`` would write ``inf``, a NameError in the script); every other
float is its ``repr`` (``-0.0``, subnormals and the largest doubles round-trip).
"""

from __future__ import annotations

import ast
import math
from typing import Any

#: The only calls a written literal may hold: the non-finite floats.
_NONFINITE = {"float('inf')", "float('-inf')", "float('nan')"}


def _float(v: float) -> str:
    if math.isnan(v):
        return "float('nan')"
    if math.isinf(v):
        return "float('inf')" if v > 0 else "float('-inf')"
    return repr(v)


def _text(v: Any) -> str:
    if type(v) is float:
        return _float(v)
    if type(v) in (type(None), bool, int, str):
        return repr(v)
    if type(v) is list:
        return "[" + ", ".join(_text(x) for x in v) + "]"
    if type(v) is tuple:
        inner = ", ".join(_text(x) for x in v)
        return f"({inner},)" if len(v) == 1 else f"({inner})"
    if type(v) is dict:
        return "{" + ", ".join(f"{_text(k)}: {_text(x)}" for k, x in v.items()) + "}"
    raise ValueError(f"not plain data for a reproducer: {type(v).__name__}")


def _only_literals(node: ast.AST) -> bool:
    """The parsed text is literals and the non-finite float calls, nothing else."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call) and ast.unparse(sub).replace('"', "'") not in _NONFINITE:
            return False
    return True


def literal(value: Any) -> str:
    """Python source for plain data only (None, bool, int, float, str, lists, tuples, dicts)
    that evaluates to ``value`` (non-finite floats as ``float('inf')`` and the like).

    The script must not contain anything but literals built from the harness's own data.
    """
    text = _text(value)
    tree = ast.parse(text, mode="eval")
    if not _only_literals(tree):  # never: _text writes nothing else
        raise ValueError(f"not a literal: {text}")
    return text
