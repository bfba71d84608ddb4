"""Per-slice data and the batched arguments stacked from it.

Arguments are built by stacking independently drawn slices, never by repeating
one slice, so a rule that mixes or drops batch elements changes the result. Each
slice is drawn from the sample's generator with its own derived seed, once per
sample, and every tensor handed out is a copy (an in-place Function never
corrupts what a later case reads).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import Any

import torch

from autograd_function_db.entry import Sample
from harness.plans.plan import LevelPlan, Plan, normalize_dim
from harness.plans.pytrees import (
    Address,
    Keys,
    clone_tensors,
    dim_at,
    get_at,
    is_container,
    leaves,
    map_leaves,
)


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
        #: Per-slice outputs of a deterministic reference call (``PlanSlices.outputs_kept``),
        #: by what was called and which levels batch each argument, then path.
        self._slice_outputs: dict[tuple[Any, ...], dict[tuple[int, ...], Any]] = {}
        #: Per-sample facts the composite checks share, by the call they describe
        #: (``autodiff_refs.sample_view``): the differentiable view and the eager protocol.
        self.views: dict[Any, Any] = {}

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

    def base_args(self, index: int) -> tuple[Any, ...]:
        """Fresh copies of the base arguments of the entry's sample ``index`` (another sample
        of the same entry: the findings reported once per entry look at earlier samples)."""
        samples = list(self._draw(sample_seed(*self._seed_parts, "slice", ())))
        return tuple(_fresh(a) for a in samples[index].args)

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
        self._mask = tuple(mask)
        self._at: dict[tuple[int, ...], tuple[Any, ...]] = (
            kept_at.setdefault(self._mask, {}) if kept_at is not None else {}
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

    def outputs_kept(self, key: Any) -> dict[tuple[int, ...], Any] | None:
        """Where the per-slice outputs of the call ``key`` names are kept for every plan of
        the sample that reads the same slices (same arguments batched at the same levels):
        a plan differs from another in where the batch dims sit, not in its slices. None
        when the arguments hold a container (the mask does not say its leaves' dims) or
        the source keeps nothing."""
        kept = getattr(self.slices, "_slice_outputs", None)
        if kept is None or not self._simple:
            return None
        try:
            return kept.setdefault((key, self._mask), {})
        except TypeError:  # an unhashable callable: nothing is kept for it
            return None

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
