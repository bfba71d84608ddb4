"""Memory layouts of batched arguments: plans whose batched tensors are non-contiguous.

PyTorch's own vmap tests hand the batched function transposed and expanded copies, and a
vmap rule that calls ``.view``, ``.numpy()`` on a raw buffer or assumes unit strides works
on the suite's stacked (contiguous) batches and fails on theirs. A ``NonContiguousPlan``
batches exactly as the plan it copies; every batched tensor leaf is then handed over as a
non-contiguous tensor with the same values (stride 2 in its last dim, as
``torch.testing``'s ``noncontiguous_like`` makes them). Unbatched arguments are left as
they are. Its id is the plain plan's id followed by ``,noncontig``, so the plain plans'
ids never change.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from harness.plans.plan import Plan
from harness.plans.pytrees import dim_at, is_container, map_leaves

#: What a non-contiguous plan's id ends with.
NONCONTIG_MARK = ",noncontig"


@dataclass(frozen=True)
class NonContiguousPlan(Plan):
    """A plan whose batched tensor arguments are handed over non-contiguous (same values)."""

    def _make_id(self) -> str:
        return self._levels_id() + NONCONTIG_MARK

    def to_dict(self) -> dict[str, Any]:
        d = super().to_dict()
        d["noncontiguous"] = True
        return d

    @classmethod
    def of(cls, plan: Plan) -> NonContiguousPlan:
        return cls(plan.levels, plan.strategy)


def noncontiguous_like(t: torch.Tensor) -> torch.Tensor:
    """The same values, not contiguous: every element two apart in the last dim."""
    if t.dim() == 0 or t.numel() <= 1:
        return t
    return torch.stack([t, torch.zeros_like(t)], dim=-1).select(-1, 0)


def _batched_somewhere(plan: Plan, j: int, keys: tuple[Any, ...]) -> bool:
    return any(dim_at(lv.in_dims[j], keys) is not None for lv in plan.levels)


def with_layout(plan: Plan | None, args: Sequence[Any]) -> tuple[Any, ...]:
    """``args`` as the plan hands them to the vmapped call: for a ``NonContiguousPlan`` every
    tensor leaf batched at some level made non-contiguous, else ``args`` themselves."""
    if not isinstance(plan, NonContiguousPlan):
        return tuple(args)
    out: list[Any] = []
    n = len(plan.levels[0].in_dims)
    for j, a in enumerate(args):
        if j >= n:
            out.append(a)
        elif isinstance(a, torch.Tensor):
            out.append(noncontiguous_like(a) if _batched_somewhere(plan, j, ()) else a)
        elif is_container(a):

            def leaf(keys: tuple[Any, ...], v: Any, j: int = j) -> Any:
                if isinstance(v, torch.Tensor) and _batched_somewhere(plan, j, keys):
                    return noncontiguous_like(v)
                return v

            out.append(map_leaves(a, leaf))
        else:
            out.append(a)
    return tuple(out)
