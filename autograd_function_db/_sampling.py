"""Seeded tensor makers shared by the sample generators.

Every generator derives all its data from ``seed`` through one torch.Generator,
so different seeds give different data of the same structure.
"""

from __future__ import annotations

import torch


class Maker:
    """Draws tensors from one seeded generator, then moves them to dtype/device."""

    def __init__(self, seed: int, dtype: torch.dtype, device: str) -> None:
        self.gen = torch.Generator().manual_seed(int(seed) & 0x7FFF_FFFF_FFFF_FFFF)
        self.dtype = dtype
        self.device = device

    def randn(self, *shape: int) -> torch.Tensor:
        real = self.dtype.to_real() if self.dtype.is_complex else self.dtype
        t = torch.randn(shape, generator=self.gen, dtype=torch.float64)
        if self.dtype.is_complex:
            t = torch.complex(t, torch.randn(shape, generator=self.gen, dtype=torch.float64))
            return t.to(self.dtype).to(self.device)
        return t.to(real).to(self.device)

    def positive(self, *shape: int, low: float = 0.5, high: float = 2.0) -> torch.Tensor:
        t = torch.rand(shape, generator=self.gen, dtype=torch.float64) * (high - low) + low
        return t.to(self.dtype).to(self.device)

    def spread(self, *shape: int) -> torch.Tensor:
        """Values with distinct, well-separated entries (no ties: safe to sort or max)."""
        n = 1
        for s in shape:
            n *= s
        perm = torch.randperm(n, generator=self.gen).to(torch.float64)
        jitter = torch.rand(n, generator=self.gen, dtype=torch.float64) * 0.2
        return ((perm + jitter) / max(n, 1)).reshape(shape).to(self.dtype).to(self.device)

    def permutation_along(self, shape: tuple[int, ...], dim: int) -> torch.Tensor:
        """An int64 index tensor of ``shape`` that permutes each line along ``dim``."""
        keys = torch.rand(shape, generator=self.gen, dtype=torch.float64)
        return keys.argsort(dim=dim).to(self.device)

    def integers(self, low: int, high: int, *shape: int) -> torch.Tensor:
        return torch.randint(low, high, shape, generator=self.gen).to(self.device)

    def integer(self, low: int, high: int) -> int:
        return int(torch.randint(low, high, (), generator=self.gen))
