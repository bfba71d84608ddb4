"""The API-axis catalogue: every axis of the torch.autograd.Function API the database covers,
the tags (or entry facts) that cover it, and coverage over a list of entries.

An axis is covered by an entry when the entry carries one of the axis's tags (an
alternative may require several tags at once), or when the axis's ``predicate`` holds
(dtype axes read ``entry.dtypes``, custom-op axes read ``entry.custom_op``). The
catalogue requires at least two entries per axis (``MIN_ENTRIES``); the tests hold the
registry to it.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from .entry import VMAP_GENERATED, VMAP_RULE, Entry

MIN_ENTRIES = 2

#: An alternative: one tag, or a frozenset of tags that must all be present.
TagSpec = str | frozenset[str]


@dataclass(frozen=True)
class Axis:
    name: str
    group: str
    description: str
    tags: tuple[TagSpec, ...] = ()
    predicate: Callable[[Entry], bool] | None = field(default=None, compare=False)

    def covers(self, entry: Entry) -> bool:
        for spec in self.tags:
            wanted = {spec} if isinstance(spec, str) else spec
            if wanted <= entry.tags:
                return True
        return bool(self.predicate and self.predicate(entry))

    def tag_text(self) -> str:
        parts = [s if isinstance(s, str) else "+".join(sorted(s)) for s in self.tags]
        if self.predicate is not None:
            parts.append("(entry facts)")
        return " | ".join(parts)


def _all(*tags: str) -> frozenset[str]:
    return frozenset(tags)


def _has_dtype(*dtypes: torch.dtype) -> Callable[[Entry], bool]:
    return lambda e: any(d in e.dtypes for d in dtypes)


AXES: tuple[Axis, ...] = (
    # what is saved
    Axis("saved:inputs", "saved", "inputs saved for backward/forward", ("saved:inputs",)),
    Axis("saved:outputs", "saved", "outputs saved", ("saved:outputs",)),
    Axis(
        "saved:intermediates",
        "saved",
        "an intermediate (returned as an output, or computed in setup_context)",
        ("saved:intermediates",),
    ),
    Axis("saved:non-tensor", "saved", "Python values stored on ctx", ("saved:non-tensor",)),
    Axis(
        "saved:save_for_backward",
        "saved",
        "ctx.save_for_backward",
        ("saved:inputs", "saved:outputs", "saved:intermediates"),
    ),
    Axis(
        "saved:save_for_forward", "saved", "ctx.save_for_forward (for jvp)", ("saved:for-forward",)
    ),
    # inputs
    Axis("inputs:one-tensor", "inputs", "a single tensor argument", ("inputs:one-tensor",)),
    Axis("inputs:several", "inputs", "several tensor arguments", ("inputs:several",)),
    Axis(
        "inputs:mixed-python",
        "inputs",
        "tensors mixed with Python numbers, ints, bools or tuples",
        ("inputs:python-int", "inputs:python-float", "inputs:python-bool", "inputs:python-tuple"),
    ),
    Axis("inputs:python-tuple", "inputs", "a Python tuple argument", ("inputs:python-tuple",)),
    Axis(
        "inputs:container",
        "inputs",
        "tensors inside a tuple or dict argument (an in_dims pytree)",
        ("inputs:container",),
    ),
    Axis(
        "inputs:default-args", "inputs", "forward has default arguments", ("inputs:default-args",)
    ),
    Axis("inputs:none-arg", "inputs", "an argument passed as None", ("inputs:none-arg",)),
    Axis("inputs:index-tensor", "inputs", "integer index tensors", ("inputs:index-tensor",)),
    # outputs
    Axis("outputs:one-tensor", "outputs", "one tensor output", ("outputs:one-tensor",)),
    Axis("outputs:tuple", "outputs", "a tuple of outputs", ("outputs:tuple",)),
    Axis(
        "outputs:nondiff-int",
        "outputs",
        "an integer output marked non-differentiable",
        ("outputs:nondiff-int",),
    ),
    Axis(
        "outputs:nondiff-float",
        "outputs",
        "a floating output marked non-differentiable",
        ("outputs:nondiff-float",),
    ),
    Axis("outputs:input-as-is", "outputs", "an input returned as-is", ("outputs:input-as-is",)),
    Axis("outputs:view", "outputs", "a view of an input", ("outputs:view",)),
    # ctx features
    Axis("ctx:mark_dirty", "ctx", "in place, ctx.mark_dirty", ("ctx:mark_dirty",)),
    Axis(
        "ctx:mark_non_differentiable",
        "ctx",
        "ctx.mark_non_differentiable",
        ("ctx:mark_non_differentiable",),
    ),
    Axis(
        "ctx:once_differentiable",
        "ctx",
        "@once_differentiable backward",
        ("ctx:once_differentiable",),
        predicate=lambda e: e.caps.once_differentiable,
    ),
    Axis(
        "ctx:set_materialize_grads",
        "ctx",
        "ctx.set_materialize_grads(False): None gradients and tangents",
        ("ctx:materialize_grads_false",),
    ),
    Axis(
        "ctx:needs_input_grad",
        "ctx",
        "backward reads ctx.needs_input_grad",
        ("ctx:needs_input_grad",),
    ),
    # vmap
    Axis(
        "vmap:rule",
        "vmap",
        "a hand-written vmap staticmethod (or register_vmap rule)",
        ("vmap:rule",),
        predicate=lambda e: e.caps.vmap == VMAP_RULE,
    ),
    Axis(
        "vmap:generated",
        "vmap",
        "generate_vmap_rule = True",
        ("vmap:generated",),
        predicate=lambda e: e.caps.vmap == VMAP_GENERATED,
    ),
    Axis(
        "vmap:composed",
        "vmap",
        "a rule built from other Functions (nested vmap works through it)",
        ("vmap:composed",),
    ),
    Axis(
        "vmap:expand-unbatched",
        "vmap",
        "a rule that expands unbatched arguments with info.batch_size",
        ("vmap:expand-unbatched",),
    ),
    Axis(
        "vmap:none-out-dim",
        "vmap",
        "a rule that returns None as the out_dim of an unbatched output",
        ("vmap:none-out-dim",),
    ),
    Axis(
        "vmap:randomness",
        "vmap",
        "a rule that honours info.randomness (error / same / different)",
        ("vmap:randomness",),
        predicate=lambda e: e.caps.randomness,
    ),
    # operation kinds
    Axis(
        "op:elementwise-unary",
        "op",
        "elementwise unary",
        ("op:unary", _all("op:elementwise", "inputs:one-tensor")),
    ),
    Axis(
        "op:elementwise-binary-broadcast",
        "op",
        "elementwise binary with broadcasting",
        (_all("op:elementwise", "op:broadcast"), _all("op:binary", "op:broadcast")),
    ),
    Axis(
        "op:reduction",
        "op",
        "reductions over an int dim (with keepdim)",
        ("op:reduction",),
    ),
    Axis("op:indexing", "op", "indexing, gather, scatter", ("op:indexing", "op:scatter")),
    Axis("op:sort", "op", "sort, topk", ("op:sort",)),
    Axis("op:shape", "op", "shape ops: transpose, reshape, expand, permute", ("op:shape",)),
    Axis("op:matmul", "op", "matmul with broadcast batch dims", ("op:matmul",)),
    Axis("op:linalg", "op", "a linear solve or a Cholesky factorisation", ("op:linalg",)),
    Axis("backend:numpy", "op", "numpy-backed forward", ("backend:numpy",)),
    Axis("backend:torch", "op", "torch-backed forward", ("backend:torch",)),
    # dtypes
    Axis("dtype:float32", "dtype", "runs in float32", (), _has_dtype(torch.float32)),
    Axis("dtype:float64", "dtype", "runs in float64", (), _has_dtype(torch.float64)),
    Axis(
        "dtype:complex",
        "dtype",
        "complex dtypes where meaningful",
        ("dtype:complex",),
        _has_dtype(torch.complex64, torch.complex128),
    ),
    # torch.library custom ops
    Axis(
        "custom-op",
        "custom-op",
        "torch.library.custom_op with register_fake / register_autograd / register_vmap",
        ("custom-op",),
        predicate=lambda e: e.custom_op is not None,
    ),
)

AXIS_BY_NAME: dict[str, Axis] = {a.name: a for a in AXES}


def axes_of(entry: Entry, axes: Sequence[Axis] = AXES) -> list[str]:
    """The names of the axes an entry exercises, in catalogue order."""
    return [a.name for a in axes if a.covers(entry)]


def coverage(entries: Iterable[Entry], axes: Sequence[Axis] = AXES) -> dict[str, list[str]]:
    """``{axis name: [names of the entries that exercise it]}`` for every axis (empty lists kept)."""
    entries = list(entries)
    return {a.name: [e.name for e in entries if a.covers(e)] for a in axes}


def undercovered(
    entries: Iterable[Entry], minimum: int = MIN_ENTRIES, axes: Sequence[Axis] = AXES
) -> dict[str, list[str]]:
    """The axes with fewer than ``minimum`` entries (and the entries they do have)."""
    return {k: v for k, v in coverage(entries, axes).items() if len(v) < minimum}


def _get(result: Any, key: str) -> Any:
    return result[key] if isinstance(result, Mapping) else getattr(result, key)


@dataclass
class AxisRow:
    """One row of the axes x checks table."""

    axis: str
    group: str
    description: str
    entries: list[str]
    #: check -> status -> number of cases (only cases of entries on this axis).
    checks: dict[str, dict[str, int]]

    def to_dict(self) -> dict[str, Any]:
        return {
            "axis": self.axis,
            "group": self.group,
            "description": self.description,
            "entry_count": len(self.entries),
            "entries": list(self.entries),
            "checks": {c: dict(s) for c, s in self.checks.items()},
        }


def axis_check_table(
    entries: Iterable[Entry], results: Iterable[Any], axes: Sequence[Axis] = AXES
) -> list[AxisRow]:
    """The data of the axes x checks table: for every axis, the entries that exercise it and,
    per check, how many of those entries' cases ran with each status.

    ``results`` are CaseResults (or their dicts, as in a JSON report): anything with
    ``entry``, ``check`` and ``status``. Checks with no case on an axis are left out.
    """
    cov = coverage(entries, axes)
    by_entry: dict[str, Counter[tuple[str, str]]] = defaultdict(Counter)
    checks_in_order: list[str] = []
    for r in results:
        check = _get(r, "check")
        by_entry[_get(r, "entry")][(check, _get(r, "status"))] += 1
        if check not in checks_in_order:
            checks_in_order.append(check)
    rows = []
    for a in axes:
        table: dict[str, Counter[str]] = {}
        for name in cov[a.name]:
            for (check, status), n in by_entry.get(name, Counter()).items():
                table.setdefault(check, Counter())[status] += n
        ordered = {c: dict(table[c]) for c in checks_in_order if c in table}
        rows.append(AxisRow(a.name, a.group, a.description, cov[a.name], ordered))
    return rows


__all__ = [
    "AXES",
    "AXIS_BY_NAME",
    "MIN_ENTRIES",
    "Axis",
    "AxisRow",
    "axes_of",
    "axis_check_table",
    "coverage",
    "undercovered",
]
