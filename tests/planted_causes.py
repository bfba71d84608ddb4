"""Planted bugs whose failures have one root cause each (or two, for the last one).

* ``IgnoresInDims1``: the rotation of ``examples/rotations.py`` whose vmap rule never moves
  the points' batch dim (it ignores ``in_dims[1]``): numpy then raises inside ``forward``
  for every plan that batches the points at a dim other than 0, under every vmap check.
* ``RuleAndBackwardBugs``: ``BrokenRotatePoints`` (wrong out_dims) whose backward also
  doubles the points' gradient: two bugs, so two root causes.

Their correct twin is ``rotations.RotatePoints``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
from rotations import RotatePoints, _to_front  # noqa: E402


class IgnoresInDims1(torch.autograd.Function):
    forward = RotatePoints.forward
    setup_context = RotatePoints.setup_context
    backward = RotatePoints.backward
    jvp = RotatePoints.jvp

    @staticmethod
    def vmap(info, in_dims, R, x):
        R = _to_front(R, in_dims[0], info.batch_size)
        return IgnoresInDims1.apply(R, x), 0  # BUG: x is used as if batched at 0


class RuleAndBackwardBugs(torch.autograd.Function):
    forward = RotatePoints.forward
    setup_context = RotatePoints.setup_context
    jvp = RotatePoints.jvp

    @staticmethod
    def backward(ctx, grad):
        grad_R, grad_x = RotatePoints.backward(ctx, grad)
        return grad_R, 2 * grad_x  # BUG: twice the points' gradient

    @staticmethod
    def vmap(info, in_dims, R, x):
        R = _to_front(R, in_dims[0], info.batch_size)
        x = _to_front(x, in_dims[1], info.batch_size)
        # BUG (as BrokenRotatePoints): the batch dim is at 0 now, whatever in_dims said.
        return RuleAndBackwardBugs.apply(R, x), in_dims[1] if in_dims[1] is not None else 0


class TwiceTheGradient(torch.autograd.Function):
    """``3 x`` whose backward returns twice the gradient (one bug: vjp, vjp_of_vjp, jacrev)."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return x * 3

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, grad):
        return grad * 6  # BUG: the derivative is 3

    @staticmethod
    def jvp(ctx, tangent):
        return tangent * 3


def two_samples(seed: int):
    """Two samples (so a failure of every sample of a check is two cases)."""
    gen = torch.Generator().manual_seed(seed)
    return [(torch.randn(3, 4, generator=gen, dtype=torch.float64),) for _ in range(2)]
