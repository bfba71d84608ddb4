"""Batching plans, and batched arguments built from distinct per-slice data.

A plan says, for each vmap level (outermost first), the batch size, the
``in_dims`` of every positional argument and the ``out_dims``. Arguments are
built by stacking independently drawn slices, never by repeating one slice, so
a rule that mixes or drops batch elements changes the result. A tuple, list or
dict argument gets an ``in_dims`` pytree of the same structure, and each tensor
leaf inside it is batched on its own (``in_dims=(0,(None,1))``).

Plan strategy (documented in the README and recorded in every report). The
*units* are the tensor leaves of the arguments (a linked group of arguments is
one unit); each takes one of ``None``, ``0``, an interior position and ``-1``
(duplicates dropped):

* one level: every combination except the all-``None`` one if there are at most
  ``cap`` ("exhaustive"); beyond, a strength-2 covering array ("pairwise",
  ``harness.pairwise``): every pair (unit A at position p, unit B at position q)
  occurs in some plan, built deterministically from the seed. Two more plans use
  ``out_dims=-1`` and an interior ``out_dims``.
* nested: a fixed set of level pairs (both 0, -1 outside, -1 inside, interior
  both, each unit batched at one level only, a non-zero out_dims), then the
  one-level rows of every level zipped together ("pairwise per level"), with
  different batch sizes per level (2 outside, 3 inside by default).
* chunked: batch size 3 in chunks of 2, so the rule sees batch sizes 2 and 1.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from autograd_function_db.entry import Sample

from .pairwise import exhaustive_rows, pairwise_rows
from .pytree_args import (
    Address,
    Keys,
    clone_tensors,
    dim_at,
    fmt,
    get_at,
    is_container,
    jsonable,
    leaves,
    map_leaves,
)
from .pytrees import leaves as output_leaves

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


#: Seeds handed to sample callables stay below this, so user code can pass them to
#: ``np.random.RandomState`` or do arithmetic on them (``torch.manual_seed(seed * 7919 + i)``).
SAMPLE_SEED_LIMIT = 2**31


def sample_seed(*parts: object) -> int:
    """The seed a sample callable receives: derived like ``derive_seed``, below 2**31."""
    return derive_seed(*parts) % SAMPLE_SEED_LIMIT


def _slice_key(path: tuple[int, ...]) -> tuple[int, ...]:
    """Trailing zeros do not change the slice: (0,) and (0, 0) are the same base slice."""
    key = tuple(path)
    while key and key[-1] == 0:
        key = key[:-1]
    return key


def _fresh(a: Any) -> Any:
    """A fresh copy of one argument (tensor leaves cloned, plain values shared)."""
    if isinstance(a, torch.Tensor):
        return a.detach().clone()
    return clone_tensors(a) if is_container(a) else a


class SliceSource:
    """Per-slice argument tuples for one sample, drawn from the generator with derived seeds.

    ``args(path)`` gives fresh copies (so in-place Functions never corrupt the
    cache): ``path`` is the index of the slice at each level, outermost first.
    The all-zero path is the base sample. Data is drawn once per path and cached
    (one source serves every case of a sample: nothing cached is ever handed out).
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
        #: Stacked leaves already built for a plan (see ``PlanSlices.batched``), by argument,
        #: keys, batch dims and batch sizes per level: each is handed out as a copy.
        self._stacks: dict[tuple[Any, ...], torch.Tensor] = {}
        #: Per-slice call arguments (detached views of ``_cache``'s tensors, never handed out)
        #: by which levels batch each argument, then path (``PlanSlices.call_args``).
        self._call_slices: dict[tuple[Any, ...], dict[tuple[int, ...], tuple[Any, ...]]] = {}
        #: Plan readers by plan id (``PlanSlices.of``): they hold no data of their own (only
        #: detached views of the cached slices).
        self._readers: dict[str, PlanSlices] = {}

    def stacks(self, index: int) -> dict[tuple[Any, ...], torch.Tensor] | None:
        """Where stacked leaves of argument ``index`` are kept between plans and cases."""
        return self._stacks

    def _raw(self, path: tuple[int, ...]) -> tuple[Any, ...]:
        cached = self._cache.get(path)
        if cached is not None:
            return cached
        key = _slice_key(path)
        if key not in self._cache:
            seed = sample_seed(*self._seed_parts, "slice", key)
            samples = list(self._draw(seed))
            if self._index >= len(samples):
                raise ValueError(
                    f"the sample generator gave {len(samples)} samples for seed {seed}, "
                    f"fewer than for the base seed; the count must not depend on the seed"
                )
            self._cache[key] = samples[self._index].args
        self._cache[tuple(path)] = self._cache[key]
        return self._cache[key]

    def args(self, path: tuple[int, ...] = ()) -> tuple[Any, ...]:
        return tuple(_fresh(a) for a in self._raw(path))

    #: The cached arguments at a path themselves, for a caller that only reads them and
    #: never hands them out (the batching helpers copy what they pass on).
    peek = _raw


# --- building batched arguments and looping -------------------------------------------------


def leaf_dim(level: LevelPlan, address: Address) -> Any:
    """The batch dim of the leaf at ``address`` at one level (None: unbatched there)."""
    return dim_at(level.in_dims[address[0]], tuple(address[1:]))


def _tensor_path(path: tuple[int, ...], dims: Any, batched: str) -> tuple[int, ...]:
    """The slice a tensor argument reads at ``path``: the path itself where every level
    batches it, the base slice where none does, else index 0 at the levels that do not."""
    if batched == "all":
        return path
    if batched == "none":
        return ()
    return _own_path(path, dims)


def _own_path(path: tuple[int, ...], dims: tuple[Any, ...]) -> tuple[int, ...]:
    """The slice a leaf with batch ``dims`` per level takes at ``path``: index 0 at every
    level that does not batch it."""
    return tuple([i if d is not None else 0 for i, d in zip(path, dims)])


def _copy(t: torch.Tensor) -> torch.Tensor:
    """A copy of a cached tensor, cut from any autograd graph and forward-mode tangent."""
    return t.detach().clone()


class PlanSlices:
    """One plan's per-slice and batched arguments: which levels batch each leaf is worked out
    once per plan, not once per leaf and slice (a loop reference reads every slice). Every
    tensor handed out is a copy or a stack, never the source's cached data."""

    def __init__(self, plan: Plan, slices: SliceSource) -> None:
        self.plan = plan
        self.slices = slices
        peek = getattr(slices, "peek", None)
        #: The cached arguments at a path, only to be read (``SliceSource.peek``); a source
        #: without it gives copies (then each leaf is copied twice, never shared).
        self.peek: Callable[[tuple[int, ...]], tuple[Any, ...]] = (
            peek if peek is not None else slices.args
        )
        n = len(plan.levels[0].in_dims)
        base_args = self.peek(())
        #: Per argument: (kind, dims, base, batched): a plain value (its base value is
        #: passed), a tensor (its batch dim per level; ``batched``: at every level, at none,
        #: or at some), or a container (its base value and the dims per level of each tensor
        #: leaf, by keys).
        self.layout: list[tuple[str, Any, Any, str]] = []
        #: Plans of a sample that batch the same arguments at the same levels read the same
        #: slices: the source keeps them by that mask (the views are its own tensors).
        mask: list[Any] = []
        in_dims = [lv.in_dims for lv in plan.levels]
        for j in range(n):
            base = base_args[j]
            if isinstance(base, torch.Tensor):
                dims = tuple([d[j] for d in in_dims])  # a tensor's in_dims entry is its dim
                batched_at = tuple([d is not None for d in dims])
                every = False not in batched_at
                none = True not in batched_at
                self.layout.append(
                    ("tensor", dims, None, "all" if every else "none" if none else "some")
                )
                mask.append(batched_at)
            elif is_container(base):
                per_leaf = {
                    keys: self._dims((j, *keys))
                    for keys, v in leaves(base)
                    if isinstance(v, torch.Tensor)
                }
                self.layout.append(("container", per_leaf, base, ""))
                mask.append(None)
            else:
                self.layout.append(("value", None, base, ""))
                mask.append(None)
        #: No container argument and a source that caches its slices: the per-slice call
        #: arguments are looked up once per path (``_at``: the cached tensors detached, never
        #: handed out) and each call gets its own clones of them.
        self._simple = peek is not None and all(k != "container" for k, *_ in self.layout)
        self._tensor = tuple([k == "tensor" for k, *_ in self.layout])
        kept_at = getattr(slices, "_call_slices", None)
        self._at: dict[tuple[int, ...], tuple[Any, ...]] = (
            kept_at.setdefault(tuple(mask), {}) if kept_at is not None else {}
        )

    @classmethod
    def of(cls, plan: Plan, slices: SliceSource) -> PlanSlices:
        """The reader of ``plan`` over ``slices``: one kept by a source that keeps them (a
        sample's ``SliceSource``, by plan id), else a new one."""
        kept = getattr(slices, "_readers", None)
        if kept is None:
            return cls(plan, slices)
        reader = kept.get(plan.id)
        if reader is None or (reader.plan is not plan and reader.plan.levels != plan.levels):
            reader = kept[plan.id] = cls(plan, slices)
        return reader

    def _dims(self, address: Address) -> tuple[Any, ...]:
        return tuple(leaf_dim(lv, address) for lv in self.plan.levels)

    def leaf(
        self, j: int, keys: Keys, dims: tuple[Any, ...], path: tuple[int, ...], copy: bool
    ) -> Any:
        """The tensor leaf ``keys`` of argument ``j`` in the slice at ``path`` (index 0 at every
        level that does not batch it): its own copy, or (``copy=False``, for a caller that only
        reads it, as ``torch.stack`` does) the cached tensor detached."""
        value = get_at(self.peek(_own_path(path, dims))[j], keys)
        return _copy(value) if copy else value.detach()

    def call_args(self, path: tuple[int, ...]) -> tuple[Any, ...]:
        """The per-slice arguments a loop passes to the Function at ``path``."""
        if self._simple:
            at = self._at.get(path)
            if at is None:
                at = self._at[path] = self._slice_at(path)
            out = []
            for a, is_tensor in zip(at, self._tensor):
                out.append(a.clone() if is_tensor else a)  # its own copy (see ``_copy``)
            return tuple(out)
        peek = self.peek
        out = []
        for j, (kind, dims, base, batched) in enumerate(self.layout):
            if kind == "tensor":
                own = _tensor_path(path, dims, batched)
                out.append(peek(own)[j].detach().clone())  # its own copy (see ``_copy``)
            elif kind == "value":
                out.append(base)
            else:

                def copied(keys: Keys, v: Any, j: int = j, dims: Any = dims) -> Any:
                    return self.leaf(j, keys, dims[keys], path, copy=True) if keys in dims else v

                out.append(map_leaves(base, copied))
        return tuple(out)

    def _slice_at(self, path: tuple[int, ...]) -> tuple[Any, ...]:
        """The cached arguments at ``path`` (no container among them), tensors detached:
        only ever cloned, never handed out."""
        peek = self.peek
        out: list[Any] = []
        for j, (kind, dims, base, batched) in enumerate(self.layout):
            if kind == "tensor":
                out.append(peek(_tensor_path(path, dims, batched))[j].detach())
            else:
                out.append(base)
        return tuple(out)

    def batched(self) -> tuple[Any, ...]:
        """Per-slice data stacked into the batched arguments the vmapped call receives.

        A stacked leaf is kept by the source (``stacks``) and later plans of the sample get
        a copy of it: stacking is deterministic, so the copy equals a fresh stack.
        """
        levels = self.plan.levels
        sizes = tuple(lv.batch_size for lv in levels)
        stacks_of = getattr(self.slices, "stacks", None)

        def build(
            j: int,
            keys: Keys,
            dims: tuple[Any, ...],
            level: int,
            path: tuple[int, ...],
            stacked: bool,
        ) -> Any:
            if level == len(levels):
                # Under a stack the slice is only read; a leaf batched at no level is the
                # slice itself, so it gets its own copy (in-place Functions modify it).
                return self.leaf(j, keys, dims, path, copy=not stacked)
            dim = dims[level]
            if dim is None:
                return build(j, keys, dims, level + 1, (*path, 0), stacked)
            parts = [
                build(j, keys, dims, level + 1, (*path, i), True)
                for i in range(levels[level].batch_size)
            ]
            return torch.stack(parts, dim=normalize_dim(dim, parts[0].dim() + 1))

        def stacked(j: int, keys: Keys, dims: tuple[Any, ...]) -> torch.Tensor:
            kept = stacks_of(j) if stacks_of is not None else None
            if kept is None or all(d is None for d in dims):
                return build(j, keys, dims, 0, (), False)
            key = (j, keys, dims, sizes)
            t = kept.get(key)
            if t is None:
                t = kept[key] = build(j, keys, dims, 0, (), False)
            return t.clone()

        out = []
        for j, (kind, dims, base, batched_at) in enumerate(self.layout):
            if kind == "tensor":  # ``stacked`` inlined (one frame fewer per argument)
                kept = stacks_of(j) if stacks_of is not None else None
                if kept is None or batched_at == "none" or not dims:
                    out.append(build(j, (), dims, 0, (), False))
                    continue
                key = (j, (), dims, sizes)
                t = kept.get(key)
                if t is None:
                    t = kept[key] = build(j, (), dims, 0, (), False)
                out.append(t.clone())
            elif kind == "value":
                out.append(base)
            else:

                def stacked_leaf(keys: Keys, v: Any, j: int = j, dims: Any = dims) -> Any:
                    return stacked(j, keys, dims[keys]) if keys in dims else v

                out.append(map_leaves(base, stacked_leaf))
        return tuple(out)


def slice_call_args(plan: Plan, slices: SliceSource, path: tuple[int, ...]) -> tuple[Any, ...]:
    """The per-slice arguments a loop passes to the Function at ``path``."""
    return PlanSlices.of(plan, slices).call_args(path)


def build_batched_args(plan: Plan, slices: SliceSource) -> tuple[Any, ...]:
    """Stack per-slice data into the batched arguments the vmapped call receives."""
    return PlanSlices.of(plan, slices).batched()


#: A Function's outputs as the flat tuple of their pytree leaves (``pytrees.leaves``).
as_tuple = output_leaves


def loop_reference(
    fn: Callable[..., Any], plan: Plan, slices: SliceSource
) -> tuple[tuple[Any, ...], bool]:
    """Call ``fn`` once per slice (nested loops for nested plans), stack at each level's out_dims.

    Returns the stacked outputs as a tuple and whether ``fn`` returned a tuple.
    This never touches the Function's vmap rule: it is the reference for it.
    """
    returned_tuple = False
    reader = PlanSlices.of(plan, slices)
    levels = plan.levels
    innermost = len(levels) - 1

    def call(path: tuple[int, ...]) -> tuple[Any, ...]:
        nonlocal returned_tuple
        out = fn(*reader.call_args(path))
        returned_tuple = isinstance(out, (tuple, list))
        detached = []
        for o in output_leaves(out):
            detached.append(o.detach() if isinstance(o, torch.Tensor) else o)
        return tuple(detached)

    call_args = reader.call_args
    is_tensor = torch.Tensor

    def run(level: int, path: tuple[int, ...]) -> tuple[Any, ...]:
        nonlocal returned_tuple
        lv = levels[level]
        if level == innermost:  # the slices themselves (``call`` inlined: no frame per slice)
            per_slice: list[tuple[Any, ...]] = []
            for i in range(lv.batch_size):
                out = fn(*call_args((*path, i)))
                if isinstance(out, is_tensor):  # one tensor (most Functions): no leaves call
                    returned_tuple = False
                    per_slice.append((out.detach(),))
                    continue
                returned_tuple = isinstance(out, (tuple, list))
                detached = []
                for o in output_leaves(out):
                    detached.append(o.detach() if isinstance(o, is_tensor) else o)
                per_slice.append(tuple(detached))
        else:
            per_slice = [run(level + 1, (*path, i)) for i in range(lv.batch_size)]
        stacked = []
        out_dims = lv.out_dims
        for k, first in enumerate(per_slice[0]):
            if not isinstance(first, is_tensor):
                stacked.append(first)
                continue
            n = first.dim() + 1
            dim = out_dims if isinstance(out_dims, int) else resolve_out_dim(out_dims, n - 1)
            parts = []
            for s in per_slice:
                parts.append(s[k])
            stacked.append(torch.stack(parts, dim=normalize_dim(dim, n)))
        return tuple(stacked)

    outs = run(0, ()) if levels else call(())
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

    def peek(self, path: tuple[int, ...]) -> tuple[Any, ...]:
        return self._slices.peek(())

    def stacks(self, index: int) -> dict[tuple[Any, ...], torch.Tensor] | None:
        return None  # its stacks repeat one slice: never to be mixed with the source's


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

    @classmethod
    def of(cls, sample: Sample, linked: tuple[tuple[int, ...], ...] = ()) -> ArgLayout:
        ranks = tuple(a.dim() if isinstance(a, torch.Tensor) else None for a in sample.args)
        trees = tuple(_rank_tree(a) if is_container(a) else None for a in sample.args)
        layout = cls(ranks, (), trees)
        has_tensor = {a[0] for a in layout.addresses()}
        linked = tuple(tuple(i for i in g if i in has_tensor) for g in linked)
        return cls(ranks, tuple(g for g in linked if g), trees, sample_sizes(sample))

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


def chunked_plans(layout: ArgLayout, batch_size: int = 3, chunk_size: int = 2) -> list[Plan]:
    """vmap with chunk_size, so the rule sees batch sizes smaller than the whole batch."""
    units = layout.units()
    if not units:
        return []
    assignments = [layout.uniform(0), layout.uniform(-1)]
    if len(units) > 1:
        for u in units:
            assignments.append({a: (0 if a in u else None) for a in layout.addresses()})
    plans, seen = [], set()
    for a in assignments:
        plan = Plan((LevelPlan(batch_size, layout.in_dims(a), 0, chunk_size),), "chunked")
        if plan.id not in seen:
            seen.add(plan.id)
            plans.append(plan)
    return plans


# --- the hazard probe ---------------------------------------------------------------------

#: At most this many distinct sample dim sizes become hazard batch sizes.
HAZARD_SIZES_MAX = 3


@dataclass(frozen=True)
class HazardPlan(Plan):
    """A plan whose batch size equals a sample dim size (the id says ``hazard=N``)."""

    hazard: int = 0

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


def hazard_plans(layout: ArgLayout, sizes: Sequence[int]) -> list[Plan]:
    """For each distinct sample size >= 2 (up to a few), one level at that batch size with every
    leaf at an interior dim, then at the last dim: a rule that finds the batch dim by its size
    (``list(x.shape).index(info.batch_size)``) then picks a sample dim instead."""
    if not layout.units():
        return []
    plans: list[Plan] = []
    seen: set[str] = set()
    for n in [s for s in sizes if s >= 2][:HAZARD_SIZES_MAX]:
        mid: dict[Address, Any] = {}
        for a in layout.addresses():
            opts = dim_choices(layout.rank(a))
            mid[a] = opts[1] if len(opts) == 3 else opts[-1]
        for assignment in (mid, layout.uniform(-1)):
            plan = HazardPlan((LevelPlan(n, layout.in_dims(assignment)),), "hazard", n)
            if plan.id not in seen:
                seen.add(plan.id)
                plans.append(plan)
    return plans
