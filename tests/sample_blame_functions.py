"""A Function whose own bug shows on one sample of five, beside its correct twin (issue 34,
part 8): the samples probe must not call that "samples that do not fit".

``SoftClip`` is ``clamp(x, -1, 1)`` with a mask-based backward. Its mutant takes a shortcut
for small inputs (returns the input itself) and saves its output for backward: torch
refuses that ("An input that has been returned as-is as output is being saved for
backward") on the one sample of five that is small.
"""

from __future__ import annotations

import torch


class SoftClip(torch.autograd.Function):
    """clamp(x, -1, 1); backward passes the gradient where |x| < 1."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return x.clamp(-1.0, 1.0)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(output)

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return g * (y.abs() < 1.0)


class SoftClipReturnsInput(SoftClip):
    """The mutant: returns ``x`` itself for an input of fewer than 16 elements."""

    @staticmethod
    def forward(x):
        if x.numel() < 16:
            return x
        return x.clamp(-1.0, 1.0)


class SoftClipNeedsTwo(SoftClip):
    """Takes two arguments where the samples give one (every call fails binding)."""

    @staticmethod
    def forward(x, y):
        return x.clamp(-1.0, 1.0) + 0 * y


def _away_from_one(gen: torch.Generator, rows: int) -> torch.Tensor:
    """Values in +-[0.1, 2.3], none within 0.1 of the kinks at +-1."""
    mag = 0.1 + 2.2 * torch.rand(rows, 5, generator=gen, dtype=torch.float64)
    mag = torch.where((mag - 1.0).abs() < 0.1, mag + 0.3, mag)
    sign = torch.where(torch.rand(rows, 5, generator=gen, dtype=torch.float64) < 0.5, -1.0, 1.0)
    return mag * sign


def five_samples(seed: int) -> list[tuple[torch.Tensor]]:
    """Five samples of 4 x 5 but sample 3, of 2 x 5 (the mutant's shortcut)."""
    gen = torch.Generator().manual_seed(seed)
    return [(_away_from_one(gen, 2 if k == 3 else 4),) for k in range(5)]


def one_list_among_tensors(seed: int) -> list[tuple[object]]:
    """Four right samples and one that passes a list where a tensor belongs."""
    right = five_samples(seed)[:4]
    return [*right, ([0.5, 0.2, 0.1],)]
