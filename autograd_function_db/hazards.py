"""Shape hazards: a sample dimension equal to a batch size hides a misplaced batch dim.

If a sample tensor has a dimension of size 2 and the batch size is 2, a rule that
puts the batch on the wrong axis can still produce a tensor of the right shape
(or broadcast silently). Samples whose dimensions never equal a batch size turn
every such mistake into a loud shape error.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch

#: Batch sizes the harness uses by default: 2 for one level, 2 and 3 for nested
#: levels, 3 split into chunks of 2 and 1 for chunked vmap.
DEFAULT_HAZARD_SIZES: tuple[int, ...] = (2, 3)


@dataclass(frozen=True)
class Hazard:
    arg: int
    dim: int
    size: int

    def describe(self) -> str:
        return f"argument {self.arg} has size {self.size} at dim {self.dim}, equal to a batch size"


class HazardousSampleError(ValueError):
    """A registry sample has a dimension equal to a batch size in use."""


def _inside(a: object) -> Iterable[torch.Tensor]:
    """The tensors of one argument: itself, or those inside a tuple, list or dict."""
    if isinstance(a, torch.Tensor):
        yield a
    elif type(a) in (tuple, list):
        for v in a:  # type: ignore[attr-defined]
            yield from _inside(v)
    elif type(a) is dict:
        for v in a.values():  # type: ignore[attr-defined]
            yield from _inside(v)


def _tensors(args: tuple) -> Iterable[tuple[int, torch.Tensor]]:
    for i, a in enumerate(args):
        for t in _inside(a):
            yield i, t


def find_hazards(args: tuple, batch_sizes: Iterable[int]) -> list[Hazard]:
    sizes = set(batch_sizes)
    return [Hazard(i, d, s) for i, t in _tensors(args) for d, s in enumerate(t.shape) if s in sizes]


def sample_dim_sizes(args: tuple) -> set[int]:
    return {s for _, t in _tensors(args) for s in t.shape}


def safe_batch_sizes(used: set[int], count: int, start: int = 2) -> tuple[int, ...]:
    """The ``count`` smallest sizes >= ``start`` that no sample dimension uses."""
    out: list[int] = []
    n = start
    while len(out) < count:
        if n not in used:
            out.append(n)
        n += 1
    return tuple(out)
