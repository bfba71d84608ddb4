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
