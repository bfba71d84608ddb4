"""A tiny rotation library: a numpy-backed autograd.Function with a vmap staticmethod.

``RotatePoints.apply(R, x)`` rotates points ``x`` (n, 3) by a rotation matrix
``R`` (3, 3): ``x @ R.T``, computed in numpy (opaque to torch, so the vmap
staticmethod is what makes it batchable). ``BrokenRotatePoints`` has the
classic bug: its vmap rule moves the points' batch dim to the front but
returns the original ``in_dims`` as out_dims, so any plan that batches the
points at a dim other than 0 gets a silently wrong result.

Check them with::

    afdb check examples/rotations.py:RotatePoints --samples examples/rotations.py:rotation_samples
    afdb check examples/rotations.py:BrokenRotatePoints --samples examples/rotations.py:rotation_samples
"""

from __future__ import annotations

import numpy as np
import torch


def _rotate(R: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """numpy: x @ R^T over any leading batch dims (R (..., 3, 3), x (..., n, 3))."""
    out = np.einsum("...ij,...nj->...ni", R.detach().cpu().numpy(), x.detach().cpu().numpy())
    return torch.as_tensor(out, device=x.device)


def _to_front(t: torch.Tensor, bdim: int | None, size: int) -> torch.Tensor:
    return t.expand(size, *t.shape) if bdim is None else t.movedim(bdim, 0)


class RotatePoints(torch.autograd.Function):
    @staticmethod
    def forward(R, x):
        return _rotate(R, x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        R, x = inputs
        ctx.save_for_backward(R, x)
        ctx.save_for_forward(R, x)

    @staticmethod
    def backward(ctx, grad):
        R, x = ctx.saved_tensors
        grad_R = torch.einsum("...ni,...nj->...ij", grad, x)
        grad_x = grad @ R
        return grad_R, grad_x

    @staticmethod
    def jvp(ctx, R_t, x_t):
        R, x = ctx.saved_tensors
        return x_t @ R.transpose(-1, -2) + x @ R_t.transpose(-1, -2)

    @staticmethod
    def vmap(info, in_dims, R, x):
        R = _to_front(R, in_dims[0], info.batch_size)
        x = _to_front(x, in_dims[1], info.batch_size)
        return RotatePoints.apply(R, x), 0


class BrokenRotatePoints(torch.autograd.Function):
    """Same as RotatePoints, but the vmap rule reports the wrong out_dims."""

    forward = RotatePoints.forward
    setup_context = RotatePoints.setup_context
    backward = RotatePoints.backward
    jvp = RotatePoints.jvp

    @staticmethod
    def vmap(info, in_dims, R, x):
        R = _to_front(R, in_dims[0], info.batch_size)
        x = _to_front(x, in_dims[1], info.batch_size)
        # BUG: the batch dim is at 0 now, whatever in_dims said.
        return BrokenRotatePoints.apply(R, x), in_dims[1] if in_dims[1] is not None else 0


def random_rotation(gen: torch.Generator) -> torch.Tensor:
    q, r = torch.linalg.qr(torch.randn(3, 3, generator=gen, dtype=torch.float64))
    q = q * torch.sign(torch.diagonal(r))
    if torch.det(q) < 0:
        q[:, 0] = -q[:, 0]
    return q


def rotation_samples(seed: int):
    """A rotation and a pair of points (shapes (3, 3) and (2, 3)); distinct data per seed."""
    gen = torch.Generator().manual_seed(seed)
    return [
        (random_rotation(gen), torch.randn(2, 3, generator=gen, dtype=torch.float64)),
    ]
