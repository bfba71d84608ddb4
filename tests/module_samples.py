"""A Function whose samples are a module-level ``samples`` beside the class (not an attribute
of it): ``afdb check tests/module_samples.py:Triple`` must find them (issue 30, part 3)."""

from __future__ import annotations

from typing import Any

import torch


class Triple(torch.autograd.Function):
    """3x, with a generated vmap rule."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x: torch.Tensor) -> torch.Tensor:
        return 3 * x

    @staticmethod
    def setup_context(ctx: Any, inputs: Any, output: Any) -> None:
        pass

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        return 3 * g

    @staticmethod
    def jvp(ctx: Any, t: torch.Tensor) -> torch.Tensor:
        return 3 * t


def samples(seed: int) -> list[tuple[torch.Tensor]]:
    gen = torch.Generator().manual_seed(seed)
    return [(torch.randn(5, generator=gen, dtype=torch.float64),)]


class Shift(torch.autograd.Function):
    """x + k for integer tensors: nothing to differentiate (every autodiff check unsupported)."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x: torch.Tensor) -> torch.Tensor:
        return x + 1

    @staticmethod
    def setup_context(ctx: Any, inputs: Any, output: Any) -> None:
        pass

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        return g

    @staticmethod
    def jvp(ctx: Any, t: torch.Tensor) -> torch.Tensor:
        return t


def integer_samples(seed: int) -> list[tuple[torch.Tensor]]:
    gen = torch.Generator().manual_seed(seed)
    return [(torch.randint(0, 9, (5,), generator=gen),)]
