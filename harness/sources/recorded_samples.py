"""A recorded Function's samples: its calls as they were made, and distinct data per slice.

The base slice of each sample is the recorded call itself, bit for bit (complex values,
integer indices and filters included): the only slice the finite-difference-referenced
checks read, so their references see every argument as the program passed it. The other
batch slices (read by the checks whose reference is a loop over slices: vmap, nested,
chunked, grad_of_vmap and the vmap compositions) take, in turn, the Function's other
recorded calls whose structure agrees (the same non-tensor values, the same tensor shapes
and dtypes: they stack), and past those a copy of the call in which **every** argument gets
distinct valid data: seeded noise of its own scale on floating tensors (finite elements
only; complex in both parts), a permutation of integer and bool tensors (indices stay in
range). The Function's forward decides validity: an argument it refuses perturbed (it raises,
or its finite outputs turn non-finite) stays as recorded in every slice (unless declared
``perturb-args=N``), and the report says which (``notes``). Before, arguments no recorded
call differentiated stayed as recorded in every slice, which hid a vmap rule that drops the
batch of an index argument.

Which slice a seed asks for: the run tells the samples its seed parts (``slice_seeds``,
called by ``EntryData`` and by a reproducer's loader), from which the seeds of the base
slice and of the first slices at each level are known; an unknown seed (a caller that did
not say) is taken as another slice, seed 0 as the base.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import torch

from autograd_function_db.entry import Sample
from harness.plans.pytrees import Keys, leaves, map_leaves
from harness.plans.slices import derive_seed, sample_seed
from harness.sources.user_samples import cast_sample, finite_noise

#: Slices whose seed is known, per level: indices below this, up to this many levels.
_WIDTH, _LEVELS = 8, 3
#: What the report says of arguments that keep their recorded value in every slice.
NO_DISTINCT_SLICES = (
    "{args} as recorded in every slice (no other recorded call has {their} shapes and the "
    "Function's forward refused {them} with noise or shuffled): a rule that mixes {their} "
    "slices would go unnoticed; declare '{target} perturb-args={positions}' if other values "
    "are valid"
)
#: The seeds of the trial perturbations that ask the forward whether an argument may vary
#: (each must be accepted: one shuffle may happen to keep an order the forward needs).
_TRIAL_SEEDS = (1, 2, 3, 4, 5)


def _slice_key(path: tuple[int, ...]) -> tuple[int, ...]:
    key = tuple(path)
    while key and key[-1] == 0:
        key = key[:-1]
    return key


def _ordinal(key: tuple[int, ...]) -> int:
    """1 for the first slice of the innermost level, then on: (1,)=1, (2,)=2, (0, 1)=8."""
    return sum(c * _WIDTH**j for j, c in enumerate(key))


def _structure(args: tuple[Any, ...]) -> str:
    parts = []
    for keys, v in leaves(args):
        if isinstance(v, torch.Tensor):
            parts.append(f"{keys}:T{tuple(v.shape)}{v.dtype}{v.layout}")
        else:
            parts.append(f"{keys}:{type(v).__qualname__}:{v!r}")
    return "|".join(parts)


def _copy(v: Any) -> Any:
    return v.detach().clone() if isinstance(v, torch.Tensor) else v


def _same(a: Any, b: Any) -> bool:
    """Every tensor leaf of ``a`` equal to ``b``'s."""
    return all(
        not isinstance(v, torch.Tensor) or torch.equal(v, w)
        for (_, v), (_, w) in zip(leaves(a), leaves(b))
    )


def _finite(out: Any) -> bool:
    """Every floating leaf of a forward's outputs is finite."""
    for _, v in leaves(out if isinstance(out, (tuple, list)) else (out,)):
        floating = isinstance(v, torch.Tensor) and (v.is_floating_point() or v.is_complex())
        if floating and v.numel() and not bool(torch.isfinite(v).all()):
            return False
    return True


def _shuffled(a: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    flat = a.detach().flatten()
    return flat[torch.randperm(flat.numel(), generator=gen)].reshape(a.shape)


class RecordedSamples:
    """``fn(seed, dtype, device)`` of a recorded Function's calls (see the module's doc).

    ``calls``: the calls' positional arguments, detached; ``differentiated``: the leaf
    addresses ``(argument, *keys)`` some recorded call had ``requires_grad`` on;
    ``perturb_args``: the argument positions declared perturbable.
    """

    recorded_samples = True
    user_seeded = False
    own_dtypes = True
    described = "the recorded calls"

    def __init__(
        self,
        calls: Sequence[Sample],
        differentiated: set[tuple[Any, ...]],
        perturb_args: Sequence[int] = (),
        target: str = "",
    ) -> None:
        self.calls = list(calls)
        self.target = target
        self.perturb_args = frozenset(perturb_args)
        self.differentiated = set(differentiated)
        self._keys: dict[int, tuple[int, ...]] = {}
        structures = [_structure(c.args) for c in self.calls]
        #: For each call, the other calls that stack with it (by structure), in order.
        self.donors = [
            [j for j, s in enumerate(structures) if j != k and s == structures[k]]
            for k in range(len(self.calls))
        ]
        self.diversity = self
        #: The Function's forward (``accept_with``): it decides which arguments may vary.
        self.call: Any = None
        self._refused: dict[int, frozenset[int]] = {}

    def accept_with(self, call: Any) -> None:
        """Let ``call`` (the entry's forward) decide which perturbed arguments are valid."""
        self.call = call
        self._refused.clear()

    # --- which slice -------------------------------------------------------------------

    def slice_seeds(self, seed_parts: tuple[object, ...]) -> None:
        """Learn the seeds of this run's slices (``sample_seed(*seed_parts, "slice", key)``)."""
        for n in range(1, _LEVELS + 1):
            for path in itertools.product(range(_WIDTH), repeat=n):
                key = _slice_key(path)
                self._keys.setdefault(sample_seed(*seed_parts, "slice", key), key)
        self._keys.setdefault(sample_seed(*seed_parts, "slice", ()), ())

    def _ordinal_of(self, seed: int) -> int:
        key = self._keys.get(seed)
        if key is not None:
            return _ordinal(key)
        return 0 if seed == 0 else _WIDTH**_LEVELS + seed % 997

    # --- the samples -------------------------------------------------------------------

    def _varies(self, k: int, only: int | None = None) -> set[Keys]:
        """Leaf addresses of call ``k`` a perturbed slice may change (argument ``only``)."""
        out: set[Keys] = set()
        for i, a in enumerate(self.calls[k].args):
            if only is not None and i != only:
                continue
            for keys, v in leaves(a):
                if not isinstance(v, torch.Tensor) or v.layout != torch.strided or v.is_quantized:
                    continue
                if v.is_floating_point() or v.is_complex() or v.numel() > 1:
                    out.add((i, *keys))
        return out

    def refused(self, k: int) -> frozenset[int]:
        """Arguments of call ``k`` the forward refuses perturbed, each alone (kept as recorded)."""
        if k not in self._refused:
            self._refused[k] = frozenset(self._trial(k))
        return self._refused[k]

    def _trial(self, k: int) -> set[int]:
        call = self.calls[k]
        if self.call is None:
            return set()
        base = self._forward(call.args)
        if base is None:  # the call itself raises here: nothing to compare with
            return set()
        out = set()
        for i in range(len(call.args)):
            chosen = self._varies(k, only=i)
            if not chosen or i in self.perturb_args:
                continue
            for seed in _TRIAL_SEEDS:
                trial = self._perturbed_leaves(k, chosen, seed)
                if _same(trial.args[i], call.args[i]):
                    continue  # a shuffle that changed nothing says nothing
                got = self._forward(trial.args)
                if got is None or (_finite(base) and not _finite(got)):
                    out.add(i)
                    break
        return out

    def _forward(self, args: tuple[Any, ...]) -> Any:
        from harness.plans.slices import seed_cpu_rng

        copies = tuple(map_leaves(a, lambda _k, v: _copy(v)) for a in args)
        try:
            with torch.no_grad(), torch.random.fork_rng(devices=[]):
                seed_cpu_rng(0)
                return self.call(*copies)
        except Exception:  # noqa: BLE001 - the Function refused these values
            return None

    def _perturbable(self, k: int) -> set[Keys]:
        """Leaf addresses of call ``k`` that get distinct data in a slice of their own."""
        refused = self.refused(k)
        return {a for a in self._varies(k) if a[0] not in refused}

    def _perturbed(self, k: int, seed: int) -> Sample:
        return self._perturbed_leaves(k, self._perturbable(k), seed)

    def _perturbed_leaves(self, k: int, chosen: set[Keys], seed: int) -> Sample:
        call = self.calls[k]
        gen = torch.Generator().manual_seed(derive_seed("perturb", seed) % 2**63)

        def one(i: int, keys: Keys, v: Any) -> Any:
            if (i, *keys) not in chosen:
                return v
            if v.is_floating_point() or v.is_complex():
                return finite_noise(v, gen)
            return _shuffled(v, gen) if v.numel() > 1 else v

        def per_arg(i: int, a: Any) -> Any:
            return map_leaves(a, lambda keys, v: one(i, keys, v))

        return Sample(tuple(per_arg(i, a) for i, a in enumerate(call.args)), call.name)

    def __call__(self, seed: int, dtype: torch.dtype | None, device: str) -> list[Sample]:
        ordinal = self._ordinal_of(seed)
        out = []
        for k, call in enumerate(self.calls):
            if ordinal == 0:
                out.append(call)
            elif ordinal <= len(self.donors[k]):
                out.append(Sample(self.calls[self.donors[k][ordinal - 1]].args, call.name))
            else:
                out.append(self._perturbed(k, seed))
        return [cast_sample(s, dtype, device) for s in out]

    # --- what the report says ----------------------------------------------------------

    def fixed_args(self) -> list[int]:
        """Tensor arguments that are the same in every slice of some call."""
        out: set[int] = set()
        for k, call in enumerate(self.calls):
            if self.donors[k]:
                continue
            varied = {address[0] for address in self._perturbable(k)}
            for i, a in enumerate(call.args):
                if i not in varied and any(isinstance(v, torch.Tensor) for _, v in leaves(a)):
                    out.add(i)
        return sorted(out)

    def notes(self, names: Sequence[str] = ()) -> list[str]:
        fixed = self.fixed_args()
        if not fixed:
            return []
        positions = ",".join(map(str, fixed))
        one = len(fixed) == 1
        return [
            NO_DISTINCT_SLICES.format(
                args=f"argument {positions} is"
                if one
                else f"arguments {', '.join(map(str, fixed))} are",
                them="it" if one else "them",
                their="its" if one else "their",
                target=self.target or "TARGET",
                positions=positions,
            )
        ]


def differentiated_leaves(calls: Sequence[tuple[Any, ...]]) -> set[tuple[Any, ...]]:
    """Leaf addresses ``(argument, *keys)`` that had ``requires_grad`` in some call."""
    out: set[tuple[Any, ...]] = set()
    for args in calls:
        for i, a in enumerate(args):
            for keys, v in leaves(a):
                if isinstance(v, torch.Tensor) and v.requires_grad:
                    out.add((i, *keys))
    return out
