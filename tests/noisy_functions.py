"""A correct numpy-backed Function whose float32 rounding is far above the dtype's tolerance,
and its planted wrong twins (issue 31, part 2).

``IllSolve`` solves ``a x = b`` for an ill-conditioned ``a`` (condition about 300). One
matrix goes through ``np.linalg.solve``; a batch of them (what its vmap rule hands over)
through ``np.linalg.inv(a) @ b``, as libraries that batch with an explicit inverse do. Both
are right; at float32 their gradients differ by a few 1e-5 relative (2.9e-5 seen), past
the dtype's rtol 1.3e-5. Backward and jvp are torch ops.
"""

from __future__ import annotations

import numpy as np
import torch

from autograd_function_db.entry import Sample

#: log10 of the samples' condition number.
CONDITION_DIGITS = 2.5


def _front(t: torch.Tensor, bdim: int | None, size: int) -> torch.Tensor:
    return t.expand(size, *t.shape) if bdim is None else t.movedim(bdim, 0)


class IllSolve(torch.autograd.Function):
    """x = solve(a, b); a batch of matrices is solved through its inverse."""

    @staticmethod
    def forward(a, b):
        an, bn = a.detach().numpy(), b.detach().numpy()[..., None]
        x = np.linalg.solve(an, bn) if an.ndim == 2 else np.linalg.inv(an) @ bn
        return torch.as_tensor(x[..., 0])

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0], output)
        ctx.save_for_forward(inputs[0], output)

    @staticmethod
    def backward(ctx, g):
        a, x = ctx.saved_tensors
        gb = torch.linalg.solve(a.mT, g.unsqueeze(-1)).squeeze(-1)
        return -gb.unsqueeze(-1) * x.unsqueeze(-2), gb

    @staticmethod
    def jvp(ctx, a_t, b_t):
        a, x = ctx.saved_tensors
        rhs = b_t - (a_t @ x.unsqueeze(-1)).squeeze(-1)
        return torch.linalg.solve(a, rhs.unsqueeze(-1)).squeeze(-1)

    @staticmethod
    def vmap(info, in_dims, a, b):
        size = info.batch_size
        return IllSolve.apply(_front(a, in_dims[0], size), _front(b, in_dims[1], size)), 0


class TransposedSolve(IllSolve):
    """Planted: the rule solves with the transposed matrices."""

    @staticmethod
    def vmap(info, in_dims, a, b):
        size = info.batch_size
        a = _front(a, in_dims[0], size).mT.contiguous()
        return TransposedSolve.apply(a, _front(b, in_dims[1], size)), 0


class NearlySolve(IllSolve):
    """Planted: the rule's result is off by 1% (far above the noise, far below O(1))."""

    @staticmethod
    def vmap(info, in_dims, a, b):
        size = info.batch_size
        x = NearlySolve.apply(_front(a, in_dims[0], size), _front(b, in_dims[1], size))
        return x * 1.01, 0


def samples(seed: int, dtype: torch.dtype, device: str) -> list[Sample]:
    """Non-symmetric matrices with singular values from 1 down to 10**-CONDITION_DIGITS."""
    g = np.random.default_rng(seed)
    out = []
    for n in (4, 5):
        q1, _ = np.linalg.qr(g.standard_normal((n, n)))
        q2, _ = np.linalg.qr(g.standard_normal((n, n)))
        a = (q1 * np.logspace(0, -CONDITION_DIGITS, n)) @ q2.T
        b = g.standard_normal(n)
        args = (
            torch.tensor(a, dtype=dtype, device=device),
            torch.tensor(b, dtype=dtype, device=device),
        )
        out.append(Sample(args, f"cond-{n}"))
    return out
