"""Small helpers the theme modules share: numpy bridges and batch-dim bookkeeping for vmap rules."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch


def to_numpy(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().numpy()


def from_numpy(a: Any, like: torch.Tensor) -> torch.Tensor:
    arr = np.asarray(a)
    if not arr.flags.c_contiguous:
        arr = arr.copy()
    return torch.as_tensor(arr, device=like.device)


def wrap_dim(dim: int, rank: int) -> int:
    """``dim`` as a non-negative index into ``rank`` dims (0 for a 0-d tensor)."""
    return dim % rank if rank else 0


def front(t: torch.Tensor, bdim: int | None, batch_size: int | None = None) -> torch.Tensor:
    """Batch dim moved to 0; an unbatched tensor is expanded when ``batch_size`` is given."""
    if bdim is None:
        return t if batch_size is None else t.expand(batch_size, *t.shape)
    return t.movedim(bdim, 0)


def logical_rank(t: torch.Tensor, bdim: int | None) -> int:
    return t.dim() - (bdim is not None)


def broadcast_front(
    tensors: Sequence[torch.Tensor], in_dims: Sequence[int | None]
) -> list[torch.Tensor]:
    """Batched tensors get their batch dim at 0 and ones padded under it up to the largest
    per-slice rank, so ordinary broadcasting lines up the per-slice dims; unbatched tensors
    are left alone (they broadcast against the trailing dims)."""
    rank = max(logical_rank(t, d) for t, d in zip(tensors, in_dims))
    out = []
    for t, d in zip(tensors, in_dims):
        if d is None:
            out.append(t)
            continue
        t = t.movedim(d, 0)
        pad = rank - (t.dim() - 1)
        out.append(t.reshape(t.shape[0], *([1] * pad), *t.shape[1:]))
    return out


def sum_to(grad: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """Undo broadcasting: sum ``grad`` down to ``shape``."""
    return grad.sum_to_size(shape) if grad.shape != shape else grad
