"""The one way a reproducer writes the harness's data into its text: plain literals only.

Both scripts (``script``, the full one, and ``minimal``, the short one) write seeds,
names, tolerances and paths through ``literal``, so neither can ever embed an object's
``repr`` that is not Python source a reader can trust.
"""

from __future__ import annotations

import ast
from typing import Any


def literal(value: Any) -> str:
    """``repr(value)`` for plain data only (None, bool, int, float, str, lists, tuples, dicts).

    The script must not contain anything but literals built from the harness's own data.
    """

    def plain(v: Any) -> bool:
        if v is None or isinstance(v, (bool, int, float, str)):
            return type(v) in (type(None), bool, int, float, str)
        if type(v) in (list, tuple):
            return all(plain(x) for x in v)
        if type(v) is dict:
            return all(plain(k) and plain(x) for k, x in v.items())
        return False

    if not plain(value):
        raise ValueError(f"not plain data for a reproducer: {type(value).__name__}")
    text = repr(value)
    ast.literal_eval(text)  # nan/inf and the like would not be literals
    return text
