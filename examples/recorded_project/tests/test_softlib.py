"""softlib's own tests: forward values, shapes and that gradients flow (through the
public functions and SoftBlock only). They pass with the planted bugs too
(``SOFTLIB_PLANTED=vmap,backward``): none of them compares a gradient with the true
derivative or batches at a dim other than 0."""

from __future__ import annotations

import softlib
import torch


def _x(*shape: int, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=gen, dtype=torch.float64)


def test_scaled_tanh_values_and_vmap() -> None:
    x = _x(5, 7)
    torch.testing.assert_close(softlib.scaled_tanh(x, 2.0), 2 * torch.tanh(x))
    batched = torch.func.vmap(lambda t: softlib.scaled_tanh(t, 2.0))(x)
    torch.testing.assert_close(batched, 2 * torch.tanh(x))


def test_soft_clamp_stays_in_range_and_has_a_gradient() -> None:
    x = _x(6, 5, seed=1).requires_grad_()
    y = softlib.soft_clamp(x, -2.0, 3.0)
    assert bool((y > -2).all() and (y < 3).all())
    y.sum().backward()
    assert x.grad is not None and bool((x.grad > 0).all())


def test_cube() -> None:
    x = _x(7, seed=2).requires_grad_()
    y = softlib.cube(x)
    torch.testing.assert_close(y, x.detach() ** 3)
    y.sum().backward()
    assert x.grad is not None and x.grad.shape == x.shape


def test_power_norm_options() -> None:
    x = _x(5, 6, seed=3).requires_grad_()
    torch.testing.assert_close(softlib.power_norm(x, 2, 1, False, "sum"), x.detach().norm(dim=1))
    y = softlib.power_norm(x, 4, 0, True, "mean")
    assert y.shape == (1, 6)
    y.sum().backward()
    assert x.grad is not None


def test_gather_rows() -> None:
    x = _x(7, 5, seed=4).requires_grad_()
    index = torch.tensor([0, 3, 3, 6])
    y = softlib.gather_rows(x, index)
    torch.testing.assert_close(y, x.detach()[index])
    y.sum().backward()
    assert x.grad is not None and float(x.grad[3].sum()) == 2 * 5


def test_smooth_abs_is_even() -> None:
    x = _x(9, seed=5).requires_grad_()
    torch.testing.assert_close(softlib.smooth_abs(x, 0.5), softlib.smooth_abs(-x, 0.5))
    softlib.smooth_abs(x, 0.5).sum().backward()
    assert x.grad is not None


def test_block_trains() -> None:
    torch.manual_seed(0)
    block = softlib.SoftBlock(6, quantized=True)
    x = _x(5, 6, seed=6)
    loss = block(x).pow(2).mean()
    loss.backward()
    assert all(p.grad is not None for p in block.parameters())
