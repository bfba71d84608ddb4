"""softlib.data_kinds' own tests: values, shapes and that gradients flow. They pass with
the planted bugs too (``SOFTLIB_PLANTED=complex,ellipsis,enum``): none compares a gradient
with the true derivative."""

from __future__ import annotations

import torch
from softlib.data_kinds import Reduction, complex_gain, reduce, take_last


def _z(*shape: int, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    re = torch.randn(*shape, generator=gen, dtype=torch.float64)
    return torch.complex(re, torch.randn(*shape, generator=gen, dtype=torch.float64))


def test_complex_gain() -> None:
    z = _z(4, 5).requires_grad_()
    gain = _z(5, seed=1)
    y = complex_gain(z, gain)
    torch.testing.assert_close(y, z.detach() * gain)
    y.abs().sum().backward()
    assert z.grad is not None and z.grad.shape == z.shape


def test_take_last() -> None:
    x = torch.randn(3, 4, 6, dtype=torch.float64, requires_grad=True)
    y = take_last(x, 2)
    torch.testing.assert_close(y, x.detach()[..., :2])
    y.sum().backward()
    assert x.grad is not None and float(x.grad[..., 2:].abs().sum()) == 0.0


def test_reduce_options() -> None:
    x = torch.randn(4, 6, dtype=torch.float64, requires_grad=True)
    torch.testing.assert_close(reduce(x, Reduction.SUM), x.detach().sum(-1))
    y = reduce(x, Reduction.MEAN)
    torch.testing.assert_close(y, x.detach().mean(-1))
    y.sum().backward()
    assert x.grad is not None and bool((x.grad > 0).all())
