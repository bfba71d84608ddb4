"""softlib: a small library whose public functions and module use autograd.Functions.

The project's tests call only these public names; ``softlib.functions`` holds the
Function classes (see its docstring for the planted bugs).
"""

from __future__ import annotations

import torch

from softlib.functions import (
    GatherRows,
    LegacyCube,
    PowerNorm,
    RoundSTE,
    ScaledTanh,
    SmoothAbs,
    SoftClamp,
)

__all__ = [
    "SoftBlock",
    "cube",
    "gather_rows",
    "power_norm",
    "quantize",
    "scaled_tanh",
    "smooth_abs",
    "soft_clamp",
]


def scaled_tanh(x: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
    return ScaledTanh.apply(x, scale)


def soft_clamp(x: torch.Tensor, lo: float = -1.0, hi: float = 1.0) -> torch.Tensor:
    return SoftClamp.apply(x, lo, hi)


def cube(x: torch.Tensor) -> torch.Tensor:
    return LegacyCube.apply(x)


def power_norm(
    x: torch.Tensor, p: int = 2, dim: int = -1, keepdim: bool = False, reduction: str = "sum"
) -> torch.Tensor:
    return PowerNorm.apply(x, p, dim, keepdim, reduction)


def gather_rows(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    return GatherRows.apply(x, index)


def smooth_abs(x: torch.Tensor, width: float = 0.5) -> torch.Tensor:
    return SmoothAbs.apply(x, width)


def quantize(x: torch.Tensor) -> torch.Tensor:
    return RoundSTE.apply(x)


class SoftBlock(torch.nn.Module):
    """A linear map, then softlib's activations; a quantized output on request."""

    def __init__(self, features: int, *, quantized: bool = False) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(features, features, dtype=torch.float64)
        self.quantized = quantized

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = scaled_tanh(self.linear(x), 2.0)
        h = soft_clamp(h, -1.5, 0.5) + smooth_abs(h)
        return quantize(h * 4) / 4 if self.quantized else h
