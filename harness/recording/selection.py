"""Which calls a recording keeps: those that cover the most argument combinations.

A call's *combination* is its arguments' nodes with every tensor reduced to its dtype and
rank: the non-tensor values (mode strings, flags, enum members, sizes) and the kinds of
tensors. Distinct calls (``values.Snapshot.key``: shapes included) are ranked within their
combination in the order they were made; a call's priority is (its rank, its combination's
place in the order combinations first appeared). The kept calls are the ``cap`` of highest
priority: every combination's first call before any combination's second, and so on, so
five option combinations called one after another are each represented although the
first test made twenty calls of the first. Kept in the order the calls were made.

``Selector`` does this as calls arrive (a call that drops out never comes back: a later
call only adds entries), ``select`` over a finished list (the merge of pytest-xdist
parts): the same rule, so the same program keeps the same calls.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

#: Combinations tracked per Function (those beyond are counted under one line).
MAX_COMBINATIONS = 1000
#: Combinations seen but not kept that a recording names per Function.
MAX_NAMED = 20


def _reduced(node: Any) -> Any:
    if isinstance(node, dict):
        if len(node) == 1 and "tensor" in node and isinstance(node["tensor"], dict):
            t = node["tensor"]
            return {"tensor": [t.get("dtype"), len(t.get("shape", ()))]}
        return {k: _reduced(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_reduced(v) for v in node]
    return node


def combination(args: list[Any], kwargs: dict[str, Any]) -> str:
    """The combination key of a call's nodes (tensors as dtype and rank)."""
    return json.dumps([_reduced(args), _reduced(kwargs)], separators=(",", ":"), sort_keys=True)


def _text(node: Any) -> str:
    if not isinstance(node, dict) or len(node) != 1:
        return json.dumps(node, separators=(",", ":"))
    ((kind, value),) = node.items()
    if kind == "tensor":
        dtype, rank = value if isinstance(value, list) else (value.get("dtype"), 0)
        return f"{dtype} {rank}-d tensor"
    if kind in ("none", "bool", "int", "float", "str"):
        return repr(value) if kind != "none" else "None"
    if kind in ("tuple", "list", "size"):
        items = ", ".join(_text(v) if kind != "size" else str(v) for v in value)
        return f"({items})" if kind != "list" else f"[{items}]"
    if kind == "dict":
        return "{" + ", ".join(f"{k!r}: {_text(v)}" for k, v in value) + "}"
    if kind == "enum":
        return f"{str(value.get('type', '')).rpartition(':')[2]}.{value.get('member')}"
    if kind == "ellipsis":
        return "..."
    if kind in ("dtype", "device", "memory_format", "layout"):
        return str(value)
    return f"{kind} {json.dumps(value, separators=(',', ':'))}"


def describe(key: str) -> str:
    """A combination key as the call's arguments read: ``(float64 2-d tensor, 'reflect')``."""
    args, kwargs = json.loads(key)
    parts = [_text(a) for a in args] + [f"{k}={_text(v)}" for k, v in sorted(kwargs.items())]
    return "(" + ", ".join(parts) + ")"


@dataclass
class _Combo:
    index: int
    where: str
    distinct: int = 0
    calls: int = 0
    kept: int = 0


@dataclass
class Selector:
    """Keeps up to ``cap`` calls by priority as they arrive (see the module's doc)."""

    cap: int
    combos: dict[str, _Combo] = field(default_factory=dict)
    #: Calls seen of combinations beyond ``MAX_COMBINATIONS`` (never kept, named as one).
    overflow: int = 0
    kept: list[tuple[tuple[int, int], str]] = field(default_factory=list)

    def seen(self, combo: str, where: str) -> _Combo | None:
        """Count a call of ``combo`` (repeats included); None past the tracking limit."""
        c = self.combos.get(combo)
        if c is None:
            if len(self.combos) >= MAX_COMBINATIONS:
                self.overflow += 1
                return None
            c = self.combos[combo] = _Combo(len(self.combos), where)
        c.calls += 1
        return c

    def offer(self, combo: str) -> tuple[bool, str | None, tuple[int, int]]:
        """A new distinct call of ``combo`` (already ``seen``): (keep it, the combination
        of the kept call it would replace or None, its priority). Changes nothing: call
        ``keep`` when it is kept."""
        c = self.combos[combo]
        priority = (c.distinct + 1, c.index)
        c.distinct += 1
        if len(self.kept) < self.cap:
            return True, None, priority
        worst = max(range(len(self.kept)), key=lambda i: self.kept[i][0])
        if priority < self.kept[worst][0]:
            return True, self.kept[worst][1], priority
        return False, None, priority

    def worst(self) -> int:
        """The position in ``kept`` of the call of lowest priority (the one ``offer`` names)."""
        return max(range(len(self.kept)), key=lambda i: self.kept[i][0])

    def keep(self, combo: str, priority: tuple[int, int]) -> None:
        self.kept.append((priority, combo))
        self.combos[combo].kept += 1

    def drop(self, position: int) -> None:
        _, combo = self.kept.pop(position)
        self.combos[combo].kept -= 1

    def not_kept(self) -> list[dict[str, Any]]:
        """The combinations with no kept call: ``combination`` (readable), ``count`` (calls
        seen) and ``where`` (the first), in the order they first appeared."""
        missing = [(k, c) for k, c in self.combos.items() if c.kept == 0]
        missing.sort(key=lambda kc: kc[1].index)
        out = [
            {"combination": describe(k), "count": c.calls, "where": c.where}
            for k, c in missing[:MAX_NAMED]
        ]
        rest = sum(c.calls for _, c in missing[MAX_NAMED:]) + self.overflow
        if rest:
            out.append({"combination": "other combinations", "count": rest, "where": ""})
        return out


def select(
    calls: Iterable[tuple[str, str, str]], cap: int
) -> tuple[list[int], list[dict[str, Any]]]:
    """Over calls in the order made, each (its key, its combination, where): the positions
    kept (in order) and the combinations not kept. The same rule as ``Selector``."""
    sel = Selector(cap)
    keys: set[str] = set()
    kept_at: list[int] = []
    for i, (key, combo, where) in enumerate(calls):
        if sel.seen(combo, where) is None or key in keys:
            continue
        keys.add(key)
        keep, replaced, priority = sel.offer(combo)
        if not keep:
            continue
        if replaced is not None:
            position = sel.worst()
            sel.drop(position)
            kept_at.pop(position)
        sel.keep(combo, priority)
        kept_at.append(i)
    return sorted(kept_at), sel.not_kept()
