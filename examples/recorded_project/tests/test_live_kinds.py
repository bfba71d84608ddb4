"""softlib.live_kinds' own tests: forward values and that gradients flow. They pass with
the planted bugs too (``SOFTLIB_PLANTED=lambda,module,subclass,factory,nested``): none
compares a gradient with the true derivative."""

from __future__ import annotations

import torch
from softlib import live_kinds as lk
from torch.testing._internal.two_tensor import TwoTensor


def _x(*shape: int, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=gen, dtype=torch.float64)


def test_euler_step_with_a_lambda() -> None:
    y = _x(4, 3).requires_grad_()
    out = lk.euler_step(y, 0.1, lambda v: -0.5 * v)
    torch.testing.assert_close(out, y.detach() * 0.95)
    out.sum().backward()
    assert y.grad is not None and bool((y.grad > 0).all())


def test_euler_step_with_a_module_level_function() -> None:
    y = _x(5, seed=1).requires_grad_()
    out = lk.euler_step(y, 0.2, lk.decay)
    torch.testing.assert_close(out, y.detach() * 0.9)


def test_linear_tanh_with_a_module() -> None:
    layer = torch.nn.Linear(3, 2, dtype=torch.float64)
    x = _x(4, 3, seed=2).requires_grad_()
    out = lk.linear_tanh(x, layer)
    assert out.shape == (4, 2) and bool((out.abs() < 1).all())
    out.sum().backward()
    assert x.grad is not None
    # in float32, as models are: the float64 references cast the module too
    out32 = lk.linear_tanh(x.detach().float(), layer.float())
    assert out32.dtype == torch.float32


def test_halve_a_two_tensor() -> None:
    a, b = _x(3, 4, seed=3), _x(3, 4, seed=4)
    out = lk.halve(TwoTensor(a, b))
    torch.testing.assert_close(out.a, a / 2)


def test_factory_made_functions() -> None:
    x = _x(6, seed=5).requires_grad_()
    torch.testing.assert_close(lk.soft_sin(x), torch.sin(x.detach()))
    torch.testing.assert_close(lk.soft_sin(x * 2), torch.sin(2 * x.detach()))
    y = lk.soft_plus(x)
    torch.testing.assert_close(y, torch.nn.functional.softplus(x.detach()))
    y.sum().backward()
    assert x.grad is not None and bool((x.grad > 0).all())


def test_twice_cube() -> None:
    x = _x(5, seed=6).requires_grad_()
    out = lk.twice_cube(x)
    torch.testing.assert_close(out, 2 * x.detach() ** 3)
    out.sum().backward()
    torch.testing.assert_close(x.grad, 6 * x.detach() ** 2)
