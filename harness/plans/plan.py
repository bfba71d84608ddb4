"""Batching plans: what each vmap level batches, and the plans generated for a sample.

A plan says, for each vmap level (outermost first), the batch size, the
``in_dims`` of every positional argument and the ``out_dims``. A tuple, list or
dict argument gets an ``in_dims`` pytree of the same structure, and each tensor
leaf inside it is batched on its own (``in_dims=(0,(None,1))``). The arguments a
plan batches are built in ``harness.plans.slices``; the loop reference and the vmapped
call in ``harness.plans.batching``.

Plan strategy (documented in the README and recorded in every report). The
*units* are the tensor leaves of the arguments (a linked group of arguments is
one unit); each takes one of ``None``, ``0``, an interior position and ``-1``
(duplicates dropped):

* one level: every combination except the all-``None`` one if there are at most
  ``cap`` ("exhaustive"); beyond, a strength-2 covering array ("pairwise",
  ``harness.plans.pairwise``): every pair (unit A at position p, unit B at position q)
  occurs in some plan, built deterministically from the seed. Two more plans use
  ``out_dims=-1`` and an interior ``out_dims``.
* nested: a fixed set of level pairs (both 0, -1 outside, -1 inside, interior
  both, each unit batched at one level only, a non-zero out_dims), then the
  one-level rows of every level zipped together ("pairwise per level"), with
  different batch sizes per level (2 outside, 3 inside by default).
* chunked: batch size 3 in chunks of 2, so the rule sees batch sizes 2 and 1.
* the hazard probe (opt-in): batch sizes equal to the sample's own dim sizes, every leaf
  batched, then each leaf with a dim of that size left unbatched.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import torch

from autograd_function_db.entry import Sample
from harness.plans.pairwise import exhaustive_rows, pairwise_rows
from harness.plans.pytrees import (
    Address,
    fmt,
    get_at,
    is_container,
    jsonable,
    leaves,
    map_leaves,
)

#: ``out_dims`` may be an int, or "mid": an interior position resolved per output at run time.
OutDim = int | str
MID = "mid"

DEFAULT_BATCH_SIZE = 2

#: The strategy names a report can show.
EXHAUSTIVE, PAIRWISE = "exhaustive", "pairwise"


@dataclass(frozen=True)
class LevelPlan:
    batch_size: int
    #: One entry per positional argument: None, an int, or a pytree of them for a container.
    in_dims: tuple[Any, ...]
    out_dims: OutDim = 0
    chunk_size: int | None = None

    def describe(self, *, show_size: bool) -> str:
        text = f"in_dims={fmt(tuple(self.in_dims))}"
        if self.out_dims != 0:
            text += f",out_dims={self.out_dims}"
        if show_size:
            text += f",B={self.batch_size}"
        if self.chunk_size is not None:
            text += f",chunk={self.chunk_size}"
        return text


@dataclass(frozen=True)
class Plan:
    levels: tuple[LevelPlan, ...]
    strategy: str = EXHAUSTIVE

    @property
    def id(self) -> str:
        # Worked out once per plan (ids name every case and label every message); the
        # dataclass is frozen, so the cached text cannot go stale.
        cached = self.__dict__.get("_id")
        if cached is None:
            cached = self._make_id()
            object.__setattr__(self, "_id", cached)
        return cached

    def _make_id(self) -> str:
        return self._levels_id()

    def _levels_id(self) -> str:
        nested = len(self.levels) > 1
        return "|".join(
            lv.describe(show_size=nested or lv.batch_size != DEFAULT_BATCH_SIZE)
            for lv in self.levels
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "strategy": self.strategy,
            "levels": [
                {
                    "batch_size": lv.batch_size,
                    "in_dims": [jsonable(d) for d in lv.in_dims],
                    "out_dims": lv.out_dims,
                    "chunk_size": lv.chunk_size,
                }
                for lv in self.levels
            ],
        }


def normalize_dim(dim: int, ndim: int) -> int:
    """A dim in [-ndim, ndim) as a non-negative index."""
    if not -ndim <= dim < ndim:
        raise IndexError(f"dim {dim} out of range for {ndim} dims")
    return dim % ndim


def resolve_out_dim(out_dim: OutDim, per_slice_ndim: int) -> int:
    """The concrete out_dim for one output; "mid" is an interior position where one exists."""
    if out_dim == MID:
        return (per_slice_ndim + 1) // 2
    assert isinstance(out_dim, int)
    return out_dim


# --- plan generation ----------------------------------------------------------------------


def _rank_tree(a: Any) -> Any:
    return map_leaves(a, lambda _k, v: v.dim() if isinstance(v, torch.Tensor) else None)


@dataclass(frozen=True)
class ArgLayout:
    """What plan generation needs to know about a sample: tensor ranks and linked groups."""

    ranks: tuple[int | None, ...]  # None for a non-tensor argument (containers included)
    linked: tuple[tuple[int, ...], ...] = ()
    #: Per argument: None, or for a tuple/list/dict argument its skeleton holding each
    #: tensor leaf's rank (None at plain-value leaves).
    trees: tuple[Any, ...] = ()
    #: Distinct dim sizes of the sample's tensors (for the hazard probe).
    sizes: tuple[int, ...] = ()
    #: (address, shape) of every tensor leaf (the hazard probe leaves a leaf unbatched
    #: where one of its dims equals the batch size).
    shapes: tuple[tuple[Address, tuple[int, ...]], ...] = ()
    #: Bytes of the sample's tensors (the hazard probe's memory budget).
    nbytes: int = 0

    @classmethod
    def of(cls, sample: Sample, linked: tuple[tuple[int, ...], ...] = ()) -> ArgLayout:
        ranks = tuple(a.dim() if isinstance(a, torch.Tensor) else None for a in sample.args)
        trees = tuple(_rank_tree(a) if is_container(a) else None for a in sample.args)
        layout = cls(ranks, (), trees)
        has_tensor = {a[0] for a in layout.addresses()}
        linked = tuple(tuple(i for i in g if i in has_tensor) for g in linked)
        shapes = tuple(
            ((i, *keys), tuple(t.shape))
            for i, a in enumerate(sample.args)
            for keys, t in leaves(a)
            if isinstance(t, torch.Tensor)
        )
        return cls(
            ranks,
            tuple(g for g in linked if g),
            trees,
            sample_sizes(sample),
            shapes,
            sample_nbytes(sample),
        )

    def _tree(self, i: int) -> Any:
        return self.trees[i] if i < len(self.trees) else None

    def addresses(self) -> list[Address]:
        """Every tensor leaf: ``(i,)`` for a tensor argument, ``(i, *keys)`` inside a container."""
        out: list[Address] = []
        for i, r in enumerate(self.ranks):
            tree = self._tree(i)
            if tree is not None:
                out += [(i, *keys) for keys, rank in leaves(tree) if rank is not None]
            elif r is not None:
                out.append((i,))
        return out

    def rank(self, address: Address) -> int:
        tree = self._tree(address[0])
        rank = get_at(tree, tuple(address[1:])) if tree is not None else self.ranks[address[0]]
        assert isinstance(rank, int)
        return rank

    def units(self) -> list[tuple[Address, ...]]:
        """Tensor leaves that are batched or unbatched together (a linked group is one unit)."""
        grouped = {i for g in self.linked for i in g}
        addrs = self.addresses()
        singles = [(a,) for a in addrs if a[0] not in grouped]
        groups = [tuple(a for a in addrs if a[0] in g) for g in self.linked]
        return sorted([*singles, *(g for g in groups if g)])

    def in_dims(self, assignment: dict[Address, Any]) -> tuple[Any, ...]:
        """The in_dims tuple (a pytree per container argument; None for an unbatched one)."""
        out: list[Any] = []
        for i in range(len(self.ranks)):
            tree = self._tree(i)
            if tree is None:
                out.append(assignment.get((i,)))
                continue

            def leaf(keys: tuple[Any, ...], r: Any, i: int = i) -> Any:
                return assignment.get((i, *keys)) if r is not None else None

            spec = map_leaves(tree, leaf)
            out.append(None if all(d is None for _, d in leaves(spec)) else spec)
        return tuple(out)

    def uniform(self, dim: Any) -> dict[Address, Any]:
        """Every tensor leaf at ``dim``."""
        return {a: dim for a in self.addresses()}


def dim_choices(rank: int) -> list[int]:
    """Batch-dim positions for a tensor of ``rank`` per-slice dims: 0, interior, -1 (deduped)."""
    out = [0]
    if rank >= 2:
        out.append((rank + 1) // 2)
    if rank >= 1:
        out.append(-1)
    return out


def unit_choices(
    layout: ArgLayout, unit: tuple[Address, ...], extra: int = 0
) -> list[dict[Address, Any]]:
    """The positions of one unit: None, 0, interior, -1 (every member at the same kind).

    ``extra`` adds dims to every rank (the batch dims of inner levels of a nested plan).
    """
    choices: list[dict[Address, Any]] = [{a: None for a in unit}]
    for kind in ("zero", "mid", "last"):
        picked: dict[Address, Any] = {}
        for a in unit:
            opts = dim_choices(layout.rank(a) + extra)
            picked[a] = {"zero": 0, "mid": opts[1] if len(opts) == 3 else None, "last": opts[-1]}[
                kind
            ]
        if any(v is None for v in picked.values()):
            continue
        if kind == "last" and all(layout.rank(a) + extra == 0 for a in unit):
            continue  # -1 is 0 for a 0-d slice
        if picked not in choices:
            choices.append(picked)
    return choices


def any_batched(row: tuple[int, ...]) -> bool:
    """The rows plans keep: some unit batched (index 0 of every domain is "unbatched")."""
    return any(r != 0 for r in row)


@functools.lru_cache(maxsize=1024)
def _rows_any_batched(
    sizes: tuple[int, ...], cap: int, seed: int
) -> tuple[tuple[tuple[int, ...], ...], str]:
    rows, strategy = _choose_rows(sizes, cap, seed, any_batched)
    return tuple(rows), strategy


def choose_rows(
    sizes: Sequence[int], cap: int, seed: int, allowed: Callable[[tuple[int, ...]], bool]
) -> tuple[list[tuple[int, ...]], str]:
    """Every allowed combination when there are at most ``cap``, else a pairwise covering array.

    Index 0 of every domain is "unbatched"; the pairwise rows start from index 1 (all at 0).
    The rows are a function of the arguments alone, so those of ``any_batched`` (every
    plan generator's) are worked out once per domain sizes, not once per sample and check.
    """
    if allowed is any_batched:
        rows, strategy = _rows_any_batched(tuple(sizes), cap, seed)
        return list(rows), strategy
    return _choose_rows(sizes, cap, seed, allowed)


def _choose_rows(
    sizes: Sequence[int], cap: int, seed: int, allowed: Callable[[tuple[int, ...]], bool]
) -> tuple[list[tuple[int, ...]], str]:
    total = 1
    for s in sizes:
        total *= s
    if total <= cap + 1:
        rows = exhaustive_rows(sizes, allowed)
        if len(rows) <= cap:
            return rows, EXHAUSTIVE

    def rot(row: tuple[int, ...]) -> tuple[int, ...]:
        return tuple((v + 1) % s for v, s in zip(row, sizes))

    rotated = pairwise_rows(sizes, seed=seed, allowed=lambda r: allowed(rot(r)))
    return [rot(r) for r in rotated], PAIRWISE


def _level_rows(
    layout: ArgLayout, *, extra: int = 0, cap: int, seed: int
) -> tuple[list[tuple[Any, ...]], str]:
    """The in_dims of one level's plans (a batched unit in each) and the strategy used."""
    per_unit = [unit_choices(layout, u, extra) for u in layout.units()]
    if not per_unit:
        return [], EXHAUSTIVE

    rows, strategy = choose_rows([len(c) for c in per_unit], cap, seed, any_batched)
    out = []
    for row in rows:
        assignment: dict[Address, Any] = {}
        for options, r in zip(per_unit, row):
            assignment.update(options[r])
        out.append(layout.in_dims(assignment))
    return out, strategy


def single_level_plans(
    layout: ArgLayout,
    batch_size: int = DEFAULT_BATCH_SIZE,
    *,
    cap: int = 16,
    seed: int = 0,
) -> list[Plan]:
    rows, strategy = _level_rows(layout, cap=cap, seed=seed)
    if not rows:
        return []
    plans = [Plan((LevelPlan(batch_size, dims),), strategy) for dims in rows]
    all_zero = layout.in_dims(layout.uniform(0))
    for out_dims in (-1, MID):
        plans.append(Plan((LevelPlan(batch_size, all_zero, out_dims),), strategy))
    return plans


def nested_plans(
    layout: ArgLayout,
    batch_sizes: Sequence[int] = (2, 3),
    *,
    cap: int = 16,
    seed: int = 0,
) -> list[Plan]:
    """Two or more levels; every plan batches the Function's inputs at every level.

    First a fixed set of level combinations, then the one-level rows of each level
    (pairwise, or exhaustive when few) zipped together, so every level on its own sees
    every pair of unit positions.
    """
    units = layout.units()
    if not units:
        return []
    depth = len(batch_sizes)

    def at(kind: str, ranks_extra: int) -> dict[Address, Any]:
        a: dict[Address, Any] = {}
        for address in layout.addresses():
            opts = dim_choices(layout.rank(address) + ranks_extra)
            a[address] = {"zero": 0, "last": -1, "mid": opts[1] if len(opts) == 3 else 0}[kind]
        return a

    def level_dims(kind: str, level: int, only: set[Address] | None = None) -> tuple[Any, ...]:
        a = at(kind, depth - level - 1)
        if only is not None:
            a = {k: (d if k in only else None) for k, d in a.items()}
        return layout.in_dims(a)

    specs: list[tuple[tuple[tuple[Any, ...], OutDim], ...]] = []
    for outer_kind, inner_kind in (
        ("zero", "zero"),
        ("last", "zero"),
        ("zero", "last"),
        ("mid", "mid"),
    ):
        specs.append(
            tuple((level_dims(outer_kind if k == 0 else inner_kind, k), 0) for k in range(depth))
        )
    specs.append(tuple((level_dims("zero", k), -1 if k == 0 else MID) for k in range(depth)))
    if len(units) > 1:
        for u in units:
            others = {a for v in units if v != u for a in v}
            specs.append(
                tuple(
                    (level_dims("zero", k, set(u) if k % 2 == 0 else others), 0)
                    for k in range(depth)
                )
            )
    plans = []
    seen = set()
    for spec in specs:
        plan = Plan(
            tuple(LevelPlan(batch_sizes[k], dims, out) for k, (dims, out) in enumerate(spec)),
            "nested-fixed",
        )
        if plan.id not in seen:
            seen.add(plan.id)
            plans.append(plan)
    per_level = [
        _level_rows(layout, extra=depth - k - 1, cap=cap, seed=seed + k) for k in range(depth)
    ]
    longest = max(len(rows) for rows, _ in per_level)
    strategy = f"{per_level[0][1]} per level"
    for m in range(longest):
        plan = Plan(
            tuple(
                LevelPlan(batch_sizes[k], rows[m % len(rows)])
                for k, (rows, _) in enumerate(per_level)
            ),
            strategy,
        )
        if plan.id not in seen:
            seen.add(plan.id)
            plans.append(plan)
    return plans


#: A plan type (``Plan`` or a subclass) that ``unique_plans`` keeps.
PlanT = TypeVar("PlanT", bound="Plan")


def unique_plans(plans: Sequence[PlanT]) -> list[PlanT]:
    """``plans`` in order, each id once: two choices that land on the same in_dims (a unit
    with one position, the extras' position repeating a row's) are one case, not two."""
    out: list[PlanT] = []
    seen: set[str] = set()
    for plan in plans:
        if plan.id not in seen:
            seen.add(plan.id)
            out.append(plan)
    return out


def chunked_plans(layout: ArgLayout, batch_size: int = 3, chunk_size: int = 2) -> list[Plan]:
    """vmap with chunk_size, so the rule sees batch sizes smaller than the whole batch."""
    units = layout.units()
    if not units:
        return []
    assignments = [layout.uniform(0), layout.uniform(-1)]
    if len(units) > 1:
        for u in units:
            assignments.append({a: (0 if a in u else None) for a in layout.addresses()})
    return unique_plans(
        [
            Plan((LevelPlan(batch_size, layout.in_dims(a), 0, chunk_size),), "chunked")
            for a in assignments
        ]
    )


# --- the hazard probe ---------------------------------------------------------------------

#: At most this many distinct sample dim sizes become hazard batch sizes.
HAZARD_SIZES_MAX = 3
#: The most bytes the hazard probe batches a sample into (its inputs alone; outputs, the
#: loop reference and gradients take a few times more). A sample dim of 12,000 would
#: batch a 48 kB sample into 576 MB: that size is skipped, with a note.
HAZARD_BYTES_MAX = 64 * 2**20


@dataclass(frozen=True)
class HazardPlan(Plan):
    """A plan whose batch size equals a sample dim size (the id says ``hazard=N``)."""

    hazard: int = 0
    #: Why the plan is not run ("": it is): the batch would exceed ``HAZARD_BYTES_MAX``.
    skipped: str = ""

    def _make_id(self) -> str:
        return f"{self._levels_id()},hazard={self.hazard}"

    def to_dict(self) -> dict[str, Any]:
        d = super().to_dict()
        d["id"] = self.id
        d["hazard"] = self.hazard
        return d


def sample_sizes(sample: Sample) -> tuple[int, ...]:
    """Distinct dim sizes of every tensor leaf of a sample, sorted."""
    return tuple(
        sorted(
            {
                s
                for a in sample.args
                for _, t in leaves(a)
                if isinstance(t, torch.Tensor)
                for s in t.shape
            }
        )
    )


def sample_nbytes(sample: Sample) -> int:
    """Bytes of every tensor leaf of a sample."""
    return sum(
        t.numel() * t.element_size()
        for a in sample.args
        for _, t in leaves(a)
        if isinstance(t, torch.Tensor)
    )


def _mib(n: int) -> str:
    return f"{n / 2**20:,.0f} MiB"


def hazard_skip_note(size: int, nbytes: int) -> str:
    return (
        f"not run: the hazard probe at batch size {size} would batch this sample {size} times "
        f"(about {_mib(size * nbytes)} for the inputs alone, more for the outputs, the loop "
        f"reference and gradients), beyond its {_mib(HAZARD_BYTES_MAX)} budget; the probe's "
        "other sizes and every other check still run on this sample"
    )


def hazard_plans(layout: ArgLayout, sizes: Sequence[int]) -> list[Plan]:
    """For each distinct sample size >= 2 (up to a few), one level at that batch size with every
    leaf at an interior dim, then at the last dim: a rule that finds the batch dim by its size
    (``list(x.shape).index(info.batch_size)``) then picks a sample dim instead. Then, for
    each unit with a dim of that size (when there are several units), that unit unbatched and
    the others at 0: a rule that decides *whether* an argument is batched by its size
    (``x.shape[-1] == info.batch_size``) then takes the unbatched one for a batched one.

    A size that would batch the sample beyond ``HAZARD_BYTES_MAX`` gives one plan marked
    ``skipped`` (its case is ``unsupported`` with the note), never a batch that exhausts memory.
    """
    units = layout.units()
    if not units:
        return []
    shapes = dict(layout.shapes)
    plans: list[Plan] = []
    seen: set[str] = set()
    for n in [s for s in sizes if s >= 2][:HAZARD_SIZES_MAX]:
        mid: dict[Address, Any] = {}
        for a in layout.addresses():
            opts = dim_choices(layout.rank(a))
            mid[a] = opts[1] if len(opts) == 3 else opts[-1]
        if n * layout.nbytes > HAZARD_BYTES_MAX:
            skip = hazard_skip_note(n, layout.nbytes)
            plans.append(HazardPlan((LevelPlan(n, layout.in_dims(mid)),), "hazard", n, skip))
            continue
        assignments = [mid, layout.uniform(-1)]
        if len(units) > 1:
            for unit in units:
                if any(n in shapes.get(a, ()) for a in unit):
                    assignments.append({a: (None if a in unit else 0) for a in layout.addresses()})
        for assignment in assignments:
            plan = HazardPlan((LevelPlan(n, layout.in_dims(assignment)),), "hazard", n)
            if plan.id not in seen:
                seen.add(plan.id)
                plans.append(plan)
    return plans


# --- the dtype leg ------------------------------------------------------------------------


@dataclass(frozen=True)
class DtypeLeg(Plan):
    """Not a vmap plan: the case runs its check with the sample's floating tensors cast to
    ``dtype`` (the float32 leg of a float64 sample); the id says ``dtype=float32``."""

    dtype: str = "float32"

    def _make_id(self) -> str:
        return f"dtype={self.dtype}"

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "strategy": self.strategy, "levels": [], "dtype": self.dtype}
