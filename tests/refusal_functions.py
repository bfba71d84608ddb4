"""Correct Functions whose backward torch refuses to batch or to differentiate again (issue 34,
part 3), each beside a twin that claims the transform or computes a wrong answer.

The legacy ones (``forward(ctx, ...)``) are written as real libraries write them: a backward
that gathers with ``out=``, accumulates with an in-place ``scatter_add_``/``index_add_`` or
writes into a preallocated buffer. Eager backward is right; torch refuses vmap of it
(``vmap_of_autograd_grad``) and double backward of it (``eager_vjp_of_vjp``).
"""

from __future__ import annotations

import torch
from torch import Tensor


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def one_sample(seed: int) -> list[tuple[Tensor]]:
    return [(torch.randn(4, 5, generator=_gen(seed), dtype=torch.float64),)]


def gather_samples(seed: int) -> list[tuple[Tensor, Tensor]]:
    g = _gen(seed)
    x = torch.randn(4, 5, generator=g, dtype=torch.float64)
    return [(x, torch.randint(0, 5, (4, 3), generator=g))]


# --- sin(x), its backward multiplies with out= -----------------------------------------------


class LegacySinOut(torch.autograd.Function):
    """sin(x); backward ``torch.mul(g, cos(x), out=buf)``."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.sin()

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        buf = torch.empty_like(g)
        torch.mul(g, x.cos(), out=buf)
        return buf


class LegacySinOutWrong(LegacySinOut):
    """The same refusals, and a wrong first derivative (cos(x) + 0.1): still fails."""

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        buf = torch.empty_like(g)
        torch.mul(g, x.cos() + 0.1, out=buf)
        return buf


class SinOutGenerated(torch.autograd.Function):
    """The same backward in a Function that claims vmap (generate_vmap_rule): its
    ``vmap_of_autograd_grad`` stays ``error``."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return x.sin()

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        buf = torch.empty_like(g)
        torch.mul(g, x.cos(), out=buf)
        return buf


# --- gather forward, backward gathers or scatters in place ------------------------------------


class LegacyGather(torch.autograd.Function):
    """``x.gather(1, idx)``; backward ``scatter_add_`` into a zero tensor (in place)."""

    @staticmethod
    def forward(ctx, x, idx):
        ctx.save_for_backward(idx)
        ctx.shape = x.shape
        return x.gather(1, idx)

    @staticmethod
    def backward(ctx, g):
        (idx,) = ctx.saved_tensors
        gx = torch.zeros(ctx.shape, dtype=g.dtype)
        gx.scatter_add_(1, idx, g)
        return gx, None


class LegacyGatherOut(torch.autograd.Function):
    """2x; its backward reads grad_output through ``torch.gather(..., out=buf)`` (an identity
    permutation), as a library that reuses buffers does."""

    @staticmethod
    def forward(ctx, x):
        return 2 * x

    @staticmethod
    def backward(ctx, g):
        idx = torch.arange(g.shape[-1]).expand(g.shape).contiguous()
        buf = torch.empty_like(g)
        torch.gather(g, g.dim() - 1, idx, out=buf)
        return 2 * buf


class LegacyAccumulate(torch.autograd.Function):
    """3x; backward accumulates into a preallocated zero buffer in place (``buf.add_(g)``):
    under vmap a batched grad_output does not fit the unbatched buffer."""

    @staticmethod
    def forward(ctx, x):
        return 3 * x

    @staticmethod
    def backward(ctx, g):
        buf = torch.zeros(g.shape, dtype=g.dtype)
        buf.add_(g)
        return 3 * buf


class LegacyRaisesUnderVmap(torch.autograd.Function):
    """2x; backward raises its own ValueError when grad_output is batched (not torch's
    refusal): under vmap, which a legacy Function never claims, still ``unsupported``."""

    @staticmethod
    def forward(ctx, x):
        return 2 * x

    @staticmethod
    def backward(ctx, g):
        if torch._C._functorch.is_batchedtensor(g):
            raise ValueError("this backward does not take batched gradients")
        return 2 * g


class LegacyCheckpoint(torch.autograd.Function):
    """sin(x), checkpointed: backward recomputes the forward under enable_grad and calls
    torch.autograd.grad (torch_struct's CheckpointSemiring does so); torch.func refuses
    requires_grad_() inside vmap."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.sin()

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        with torch.enable_grad():
            xx = x.detach().requires_grad_(True)
            (gx,) = torch.autograd.grad(xx.sin(), xx, g)
        return gx
