"""A recorded Function's samples: its calls as they were made, and distinct data per slice.

The base slice of each sample is the recorded call itself, bit for bit (complex values,
integer indices and filters included). The other batch slices take, in turn, the
Function's other recorded calls whose structure agrees (the same non-tensor values, the
same tensor shapes and dtypes: they stack), and past those a copy of the call in which
only the tensors some recorded call differentiated (``requires_grad``), and the arguments
declared perturbable (``perturb-args=N``), get seeded noise of their own scale (complex
tensors in both parts; a declared integer or bool tensor is shuffled). An argument no call
differentiated stays as recorded in every slice (its batch dim stacks equal copies) and
the report says so (``notes``).

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
    "{args} as recorded in every slice (no recorded call differentiated {them} and no other "
    "recorded call has {their} shapes): a rule that mixes {their} slices would go unnoticed; "
    "declare '{target} perturb-args={positions}' if other values are valid"
)


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

    def _perturbable(self, k: int) -> set[Keys]:
        """Leaf addresses of call ``k`` that get noise in a slice of their own."""
        out: set[Keys] = set()
        for i, a in enumerate(self.calls[k].args):
            for keys, v in leaves(a):
                if not isinstance(v, torch.Tensor) or v.layout != torch.strided or v.is_quantized:
                    continue
                address = (i, *keys)
                floating = v.is_floating_point() or v.is_complex()
                if i in self.perturb_args or (address in self.differentiated and floating):
                    out.add(address)
        return out

    def _perturbed(self, k: int, seed: int) -> Sample:
        call = self.calls[k]
        chosen = self._perturbable(k)
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
