"""Functions of real-world classes that the suite once misjudged, each with a planted wrong twin.

* ``NormWithStats``: a normalisation that also returns its statistics, ``(y, {"mean", "var"})``
  (pytree outputs); ``NormWithStatsWrongVar`` batches the variance over the wrong dim.
* ``PassThrough``: forward returns its input as-is while jvp returns a new tensor (accepted by
  torch.func, refused by eager forward-mode AD).
* ``AllNaN``: forward, backward and jvp all give NaN (every comparison is vacuous).
* Helpers that raise inside the suite's own code are built in the tests themselves.
"""

from __future__ import annotations

from typing import Any

import torch


def _front(x: torch.Tensor, d: int | None, size: int) -> torch.Tensor:
    return x.unsqueeze(0).expand(size, *x.shape) if d is None else x.movedim(d, 0)


class NormWithStats(torch.autograd.Function):
    """y = x - mean(x) over the last dim, also returning {"mean": ..., "var": ...}.

    The statistics sit inside a dict, so autograd does not track them (only top-level
    tensors of a Function's outputs are differentiable): they are non-differentiable outputs.
    """

    @staticmethod
    def forward(x: torch.Tensor) -> Any:
        mean = x.mean(-1, keepdim=True)
        var = x.var(-1, keepdim=True)
        return x - mean, {"mean": mean, "var": var}

    @staticmethod
    def setup_context(ctx: Any, inputs: Any, output: Any) -> None:
        pass

    @staticmethod
    def backward(ctx: Any, gy: torch.Tensor, gstats: Any) -> torch.Tensor:
        return gy - gy.mean(-1, keepdim=True)

    @staticmethod
    def jvp(ctx: Any, t: torch.Tensor) -> Any:
        return t - t.mean(-1, keepdim=True), None

    @staticmethod
    def vmap(info: Any, in_dims: Any, x: torch.Tensor) -> Any:
        y, stats = NormWithStats.apply(_front(x, in_dims[0], info.batch_size))
        return (y, stats), (0, {"mean": 0, "var": 0})


class NormWithStatsWrongVar(NormWithStats):
    """Planted bug: under vmap the variance is taken over the batch dim."""

    @staticmethod
    def vmap(info: Any, in_dims: Any, x: torch.Tensor) -> Any:
        x = _front(x, in_dims[0], info.batch_size)
        y, stats = NormWithStats.apply(x)
        stats = {"mean": stats["mean"], "var": x.var(0, keepdim=True).mean(-1, keepdim=True)}
        stats["var"] = stats["var"].expand_as(stats["mean"]).contiguous()
        return (y, stats), 0


def norm_samples(seed: int) -> list[tuple[torch.Tensor]]:
    gen = torch.Generator().manual_seed(seed)
    return [(torch.randn(5, 7, generator=gen, dtype=torch.float64),)]


class PassThrough(torch.autograd.Function):
    """forward returns x itself (a no-op on values); jvp returns a fresh tensor.

    torch.func.jvp accepts it; eager forward-mode AD refuses it ("A custom Function's forward
    is returning a view (or an input as-is) but the jvp is not returning a view").
    """

    @staticmethod
    def forward(x: torch.Tensor) -> torch.Tensor:
        return x

    @staticmethod
    def setup_context(ctx: Any, inputs: Any, output: Any) -> None:
        pass

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        return g

    @staticmethod
    def jvp(ctx: Any, t: torch.Tensor) -> torch.Tensor:
        return t.clone()

    @staticmethod
    def vmap(info: Any, in_dims: Any, x: torch.Tensor) -> Any:
        return PassThrough.apply(x), in_dims[0]


class AllNaN(torch.autograd.Function):
    """Every output, gradient and tangent is NaN: comparisons with NaN references are vacuous."""

    @staticmethod
    def forward(x: torch.Tensor) -> torch.Tensor:
        return torch.full_like(x, float("nan"))

    @staticmethod
    def setup_context(ctx: Any, inputs: Any, output: Any) -> None:
        pass

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        return torch.full_like(g, float("nan"))

    @staticmethod
    def jvp(ctx: Any, t: torch.Tensor) -> torch.Tensor:
        return torch.full_like(t, float("nan"))

    @staticmethod
    def vmap(info: Any, in_dims: Any, x: torch.Tensor) -> Any:
        return AllNaN.apply(x), in_dims[0]


def plain_samples(seed: int) -> list[tuple[torch.Tensor]]:
    gen = torch.Generator().manual_seed(seed)
    return [(torch.randn(5, 7, generator=gen, dtype=torch.float64),)]


class NaNBackward(torch.autograd.Function):
    """Finite forward (2x) whose backward gives NaN: a real failure, not a vacuous sample."""

    @staticmethod
    def forward(x: torch.Tensor) -> torch.Tensor:
        return 2 * x

    @staticmethod
    def setup_context(ctx: Any, inputs: Any, output: Any) -> None:
        pass

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        return torch.full_like(g, float("nan"))

    @staticmethod
    def jvp(ctx: Any, t: torch.Tensor) -> torch.Tensor:
        return 2 * t

    @staticmethod
    def vmap(info: Any, in_dims: Any, x: torch.Tensor) -> Any:
        return NaNBackward.apply(x), in_dims[0]


class Double(torch.autograd.Function):
    """2x with every rule: correct at any size (for the memory-budget fixture)."""

    @staticmethod
    def forward(x: torch.Tensor) -> torch.Tensor:
        return 2 * x

    @staticmethod
    def setup_context(ctx: Any, inputs: Any, output: Any) -> None:
        pass

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        return 2 * g

    @staticmethod
    def jvp(ctx: Any, t: torch.Tensor) -> torch.Tensor:
        return 2 * t

    @staticmethod
    def vmap(info: Any, in_dims: Any, x: torch.Tensor) -> Any:
        return Double.apply(x), in_dims[0]


def huge_samples(seed: int) -> list[tuple[torch.Tensor]]:
    """One 1e7-element sample: its full Jacobian would need 800 TB."""
    gen = torch.Generator().manual_seed(seed)
    return [(torch.randn(10_000_000, generator=gen, dtype=torch.float32),)]


class Float32Only(Double):
    """2x that refuses float64 (a kernel written for float32 only)."""

    @staticmethod
    def forward(x: torch.Tensor) -> torch.Tensor:
        if x.dtype != torch.float32:
            raise TypeError(f"Float32Only supports float32 only, got {x.dtype}")
        return 2 * x


class Float32OnlyOnGrid(Double):
    """2x that refuses float64, and at float32 refuses values off a grid of 1/8 (where
    finite differences evaluate it): it fails at its own dtype too."""

    @staticmethod
    def forward(x: torch.Tensor) -> torch.Tensor:
        if x.dtype != torch.float32 or bool(((x * 8).frac() != 0).any()):
            raise TypeError(f"Float32OnlyOnGrid refuses {x.dtype} values off its grid")
        return 2 * x


def grid_samples(seed: int) -> list[tuple[torch.Tensor]]:
    return [(torch.arange(-6, 6, dtype=torch.float32).reshape(3, 4) / 8,)]


class NormWithStatsWrongJvp(NormWithStats):
    """Planted bug: the jvp forgets to subtract the mean of the tangent."""

    @staticmethod
    def jvp(ctx: Any, t: torch.Tensor) -> Any:
        return t.clone(), None
