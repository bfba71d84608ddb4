"""Batching plans, and batched arguments built from distinct per-slice data.

A plan says, for each vmap level (outermost first), the batch size, the
``in_dims`` of every positional argument and the ``out_dims``. Arguments are
built by stacking independently drawn slices, never by repeating one slice, so
a rule that mixes or drops batch elements changes the result.

Plan strategy (documented in the README and recorded in every report):

* one level: every tensor argument (or linked group of arguments) takes each of
  ``None``, ``0``, an interior position and ``-1`` (duplicates dropped), minus the
  all-``None`` plan. If the product is at most ``cap`` plans, all run
  ("exhaustive"). Above it, "covering": all at 0, all at -1, all at the interior
  position, each unit alone at each of its choices with the others at 0, each
  unit unbatched with the others at 0, then seeded random fill up to ``cap``.
  Two more plans use ``out_dims=-1`` and an interior ``out_dims``.
* nested: a fixed set of level pairs (both 0, -1 outside, -1 inside, interior
  both, each unit batched at one level only, a non-zero out_dims), with
  different batch sizes per level (2 outside, 3 inside by default).
* chunked: batch size 3 in chunks of 2, so the rule sees batch sizes 2 and 1.
"""

from __future__ import annotations

import hashlib
import itertools
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from autograd_function_db.entry import Sample

#: ``out_dims`` may be an int, or "mid": an interior position resolved per output at run time.
OutDim = int | str
MID = "mid"

DEFAULT_BATCH_SIZE = 2


@dataclass(frozen=True)
class LevelPlan:
    batch_size: int
    in_dims: tuple[int | None, ...]
    out_dims: OutDim = 0
    chunk_size: int | None = None

    def describe(self, *, show_size: bool) -> str:
        dims = ",".join("None" if d is None else str(d) for d in self.in_dims)
        if len(self.in_dims) == 1:
            dims += ","
        text = f"in_dims=({dims})"
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
    strategy: str = "exhaustive"

    @property
    def id(self) -> str:
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
                    "in_dims": list(lv.in_dims),
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


def seed_cpu_rng(seed: int) -> None:
    """Seed the CPU generator (what ``fork_rng(devices=[])`` saves and restores).

    ``torch.manual_seed`` also queues a lazy seed for each accelerator that is not
    initialised, formatting a stack trace each time (about a millisecond, a few
    per cent of a run); an initialised CUDA is still seeded as torch.manual_seed does.
    """
    if torch.cuda.is_initialized():
        torch.manual_seed(seed)
    else:
        torch.default_generator.manual_seed(seed)


def seeded_call(fn: Callable[..., Any], seed: int) -> Callable[..., Any]:
    """``fn`` called with the global RNG reseeded to ``seed`` (and restored afterwards)."""

    def call(*args: Any) -> Any:
        with torch.random.fork_rng(devices=[]):
            seed_cpu_rng(seed)
            return fn(*args)

    return call


# --- slices -------------------------------------------------------------------------------


def derive_seed(*parts: object) -> int:
    """A stable 63-bit seed from any parts (the run seed, the case id, a slice path)."""
    digest = hashlib.sha256("\x1f".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "little") & 0x7FFF_FFFF_FFFF_FFFF


class SliceSource:
    """Per-slice argument tuples for one sample, drawn from the generator with derived seeds.

    ``args(path)`` gives fresh copies (so in-place Functions never corrupt the
    cache): ``path`` is the index of the slice at each level, outermost first.
    The all-zero path is the base sample. Data is drawn once per path and cached.
    """

    def __init__(
        self,
        draw: Callable[[int], Sequence[Sample]],
        sample_index: int,
        seed_parts: tuple[object, ...],
    ) -> None:
        self._draw = draw
        self._index = sample_index
        self._seed_parts = seed_parts
        self._cache: dict[tuple[int, ...], tuple[Any, ...]] = {}

    def _raw(self, path: tuple[int, ...]) -> tuple[Any, ...]:
        key = tuple(path)
        # Trailing zeros do not change the slice: (0,) and (0, 0) are the same base slice.
        while key and key[-1] == 0:
            key = key[:-1]
        if key not in self._cache:
            seed = derive_seed(*self._seed_parts, "slice", key)
            samples = list(self._draw(seed))
            if self._index >= len(samples):
                raise ValueError(
                    f"the sample generator gave {len(samples)} samples for seed {seed}, "
                    f"fewer than for the base seed; the count must not depend on the seed"
                )
            self._cache[key] = samples[self._index].args
        return self._cache[key]

    def args(self, path: tuple[int, ...] = ()) -> tuple[Any, ...]:
        return tuple(
            a.detach().clone() if isinstance(a, torch.Tensor) else a for a in self._raw(path)
        )

    def arg(self, path: tuple[int, ...], index: int, *, copy: bool = True) -> Any:
        """Argument ``index`` at ``path``: a fresh copy, or (``copy=False``) the cached tensor
        detached, for a caller that only reads it (``torch.stack`` copies anyway)."""
        a = self._raw(path)[index]
        if isinstance(a, torch.Tensor):
            return a.detach().clone() if copy else a.detach()
        return a


# --- building batched arguments and looping -------------------------------------------------


def arg_path(plan: Plan, arg: int, path: tuple[int, ...]) -> tuple[int, ...]:
    """The slice an argument takes at ``path``: index 0 at every level where it is unbatched."""
    return tuple(i if plan.levels[k].in_dims[arg] is not None else 0 for k, i in enumerate(path))


def _slice_arg(slices: Any, path: tuple[int, ...], index: int, copy: bool = True) -> Any:
    """One argument of a slice (a source without ``arg``, such as a wrapper adding extra
    arguments, gives the whole fresh tuple, from which the one is taken)."""
    one = getattr(slices, "arg", None)
    if one is None:
        return slices.args(path)[index]
    return one(path, index, copy=copy)


def slice_call_args(plan: Plan, slices: SliceSource, path: tuple[int, ...]) -> tuple[Any, ...]:
    """The per-slice arguments a loop passes to the Function at ``path``."""
    n = len(plan.levels[0].in_dims)
    return tuple(_slice_arg(slices, arg_path(plan, j, path), j) for j in range(n))


def build_batched_args(plan: Plan, slices: SliceSource) -> tuple[Any, ...]:
    """Stack per-slice data into the batched arguments the vmapped call receives."""
    n = len(plan.levels[0].in_dims)

    def build(arg: int, level: int, path: tuple[int, ...], stacked: bool) -> Any:
        if level == len(plan.levels):
            # Under a stack the cached slice is only read; an argument batched at no
            # level is the slice itself, so it gets its own copy (in-place Functions).
            return _slice_arg(slices, arg_path(plan, arg, path), arg, copy=not stacked)
        lv = plan.levels[level]
        dim = lv.in_dims[arg]
        if dim is None:
            return build(arg, level + 1, (*path, 0), stacked)
        parts = [build(arg, level + 1, (*path, i), True) for i in range(lv.batch_size)]
        return torch.stack(parts, dim=normalize_dim(dim, parts[0].dim() + 1))

    return tuple(build(j, 0, (), False) for j in range(n))


def as_tuple(out: Any) -> tuple[Any, ...]:
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


def loop_reference(
    fn: Callable[..., Any], plan: Plan, slices: SliceSource
) -> tuple[tuple[Any, ...], bool]:
    """Call ``fn`` once per slice (nested loops for nested plans), stack at each level's out_dims.

    Returns the stacked outputs as a tuple and whether ``fn`` returned a tuple.
    This never touches the Function's vmap rule: it is the reference for it.
    """
    returned_tuple = False

    def run(level: int, path: tuple[int, ...]) -> tuple[Any, ...]:
        nonlocal returned_tuple
        if level == len(plan.levels):
            out = fn(*slice_call_args(plan, slices, path))
            returned_tuple = isinstance(out, (tuple, list))
            return tuple(o.detach() if isinstance(o, torch.Tensor) else o for o in as_tuple(out))
        lv = plan.levels[level]
        per_slice = [run(level + 1, (*path, i)) for i in range(lv.batch_size)]
        stacked = []
        for k, first in enumerate(per_slice[0]):
            if not isinstance(first, torch.Tensor):
                stacked.append(first)
                continue
            dim = resolve_out_dim(lv.out_dims, first.dim())
            stacked.append(
                torch.stack([s[k] for s in per_slice], dim=normalize_dim(dim, first.dim() + 1))
            )
        return tuple(stacked)

    outs = run(0, ())
    return outs, returned_tuple


def vmapped(
    fn: Callable[..., Any], plan: Plan, out_dims: Sequence[Any], randomness: str = "error"
) -> Callable[..., Any]:
    """``fn`` wrapped in one ``torch.func.vmap`` per level (outermost first in the plan).

    ``out_dims[k]`` is the concrete out_dims for level k (an int, or a tuple per output);
    ``randomness`` is passed to every level (torch's default, "error", unless a random
    entry is being checked).
    """
    wrapped = fn
    for k in reversed(range(len(plan.levels))):
        lv = plan.levels[k]
        wrapped = torch.func.vmap(
            wrapped,
            in_dims=lv.in_dims,
            out_dims=out_dims[k],
            chunk_size=lv.chunk_size,
            randomness=randomness,
        )
    return wrapped


class RepeatedSlices(SliceSource):
    """A SliceSource that gives the base slice at every path: batched arguments built from
    it repeat one slice, which is wanted only where per-slice outputs must be compared with
    each other (randomness="different" must make them differ)."""

    def __init__(self, slices: SliceSource) -> None:  # noqa: D107 (no super: delegates)
        self._slices = slices

    def args(self, path: tuple[int, ...] = ()) -> tuple[Any, ...]:
        return self._slices.args(())

    def arg(self, path: tuple[int, ...], index: int, *, copy: bool = True) -> Any:
        return self._slices.arg((), index, copy=copy)


def concrete_out_dims(plan: Plan, stacked: Sequence[Any], returned_tuple: bool) -> list[Any]:
    """Resolve each level's out_dims ("mid" -> ints per output) from the stacked reference.

    At level k (0 outermost) an output's per-slice rank is its stacked rank minus
    k + 1: it still carries the batch dims of the levels inside k.
    """
    result: list[Any] = []
    for k, lv in enumerate(plan.levels):
        if lv.out_dims != MID:
            result.append(lv.out_dims)
            continue
        dims = tuple(
            resolve_out_dim(MID, o.dim() - k - 1) if isinstance(o, torch.Tensor) else 0
            for o in stacked
        )
        result.append(dims if returned_tuple else dims[0])
    return result


# --- plan generation ----------------------------------------------------------------------


@dataclass(frozen=True)
class ArgLayout:
    """What plan generation needs to know about a sample: tensor ranks and linked groups."""

    ranks: tuple[int | None, ...]  # None for a non-tensor argument
    linked: tuple[tuple[int, ...], ...] = ()

    @classmethod
    def of(cls, sample: Sample, linked: tuple[tuple[int, ...], ...] = ()) -> ArgLayout:
        ranks = tuple(a.dim() if isinstance(a, torch.Tensor) else None for a in sample.args)
        linked = tuple(
            tuple(i for i in g if i < len(ranks) and ranks[i] is not None) for g in linked
        )
        return cls(ranks, tuple(g for g in linked if g))

    def units(self) -> list[tuple[int, ...]]:
        """Argument groups that are batched or unbatched together."""
        grouped = {i for g in self.linked for i in g}
        singles = [(i,) for i, r in enumerate(self.ranks) if r is not None and i not in grouped]
        return sorted([*singles, *self.linked])


def dim_choices(rank: int) -> list[int]:
    """Batch-dim positions for a tensor of ``rank`` per-slice dims: 0, interior, -1 (deduped)."""
    out = [0]
    if rank >= 2:
        out.append((rank + 1) // 2)
    if rank >= 1:
        out.append(-1)
    return out


def _unit_choices(layout: ArgLayout, unit: tuple[int, ...]) -> list[dict[int, int | None]]:
    choices: list[dict[int, int | None]] = [{i: None for i in unit}]
    kinds = ("zero", "mid", "last")
    for kind in kinds:
        picked: dict[int, int | None] = {}
        for i in unit:
            rank = layout.ranks[i]
            assert rank is not None
            opts = dim_choices(rank)
            picked[i] = {"zero": 0, "mid": opts[1] if len(opts) == 3 else None, "last": opts[-1]}[
                kind
            ]
        if any(v is None for v in picked.values()):
            continue
        if kind == "last" and all(layout.ranks[i] == 0 for i in unit):
            continue  # -1 is 0 for a 0-d slice
        if picked not in choices:
            choices.append(picked)
    return choices


def _in_dims(layout: ArgLayout, assignment: dict[int, int | None]) -> tuple[int | None, ...]:
    return tuple(assignment.get(i) for i in range(len(layout.ranks)))


def single_level_plans(
    layout: ArgLayout,
    batch_size: int = DEFAULT_BATCH_SIZE,
    *,
    cap: int = 16,
    seed: int = 0,
) -> list[Plan]:
    units = layout.units()
    if not units:
        return []
    per_unit = [_unit_choices(layout, u) for u in units]
    combos = []
    for pick in itertools.product(*per_unit):
        assignment: dict[int, int | None] = {}
        for part in pick:
            assignment.update(part)
        if all(v is None for v in assignment.values()):
            continue
        combos.append(_in_dims(layout, assignment))
    if len(combos) <= cap:
        chosen, strategy = combos, "exhaustive"
    else:
        strategy = "covering"
        zero: dict[int, int | None] = {i: 0 for u in units for i in u}
        base: list[dict[int, int | None]] = [zero]
        for kind_index in (1, 2, 3):  # all interior, all last where possible
            alt = {}
            for options in per_unit:
                alt.update(options[min(kind_index, len(options) - 1)])
            base.append(alt)
        for options in per_unit:
            for opt in options:
                base.append({**zero, **opt})
        chosen = []
        for a in base:
            dims = _in_dims(layout, a)
            if dims in combos and dims not in chosen:
                chosen.append(dims)
        rest = [c for c in combos if c not in chosen]
        random.Random(seed).shuffle(rest)
        chosen.extend(rest[: max(0, cap - len(chosen))])
    plans = [Plan((LevelPlan(batch_size, dims),), strategy) for dims in chosen]
    all_zero = _in_dims(layout, {i: 0 for u in units for i in u})
    for out_dims in (-1, MID):
        plans.append(Plan((LevelPlan(batch_size, all_zero, out_dims),), strategy))
    return plans


def nested_plans(layout: ArgLayout, batch_sizes: Sequence[int] = (2, 3)) -> list[Plan]:
    """Two or more levels; every plan batches the Function's inputs at every level."""
    units = layout.units()
    if not units:
        return []
    depth = len(batch_sizes)

    def at(kind: str, ranks_extra: int) -> dict[int, int | None]:
        a: dict[int, int | None] = {}
        for u in units:
            for i in u:
                rank = layout.ranks[i]
                assert rank is not None
                opts = dim_choices(rank + ranks_extra)
                a[i] = {"zero": 0, "last": -1, "mid": opts[1] if len(opts) == 3 else 0}[kind]
        return a

    def level_dims(kind: str, level: int, only: set[int] | None = None) -> tuple[int | None, ...]:
        a = at(kind, depth - level - 1)
        if only is not None:
            a = {i: (d if i in only else None) for i, d in a.items()}
        return _in_dims(layout, a)

    specs: list[tuple[tuple[tuple[int | None, ...], OutDim], ...]] = []
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
            others = {i for v in units if v != u for i in v}
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
    return plans


def chunked_plans(layout: ArgLayout, batch_size: int = 3, chunk_size: int = 2) -> list[Plan]:
    """vmap with chunk_size, so the rule sees batch sizes smaller than the whole batch."""
    units = layout.units()
    if not units:
        return []
    zero: dict[int, int | None] = {i: 0 for u in units for i in u}
    last: dict[int, int | None] = {i: -1 for u in units for i in u}
    assignments = [zero, last]
    if len(units) > 1:
        for u in units:
            assignments.append({i: (0 if i in u else None) for v in units for i in v})
    plans, seen = [], set()
    for a in assignments:
        plan = Plan((LevelPlan(batch_size, _in_dims(layout, a), 0, chunk_size),), "chunked")
        if plan.id not in seen:
            seen.add(plan.id)
            plans.append(plan)
    return plans
