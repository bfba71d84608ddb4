"""softlib's Functions that take what cannot be data: a function, a module, a tensor
subclass, a class made per call, and a Function called only inside another.

* ``EulerStep``: ``y + h * fn(y)`` for a vector field ``fn`` (a lambda or ``decay``);
  its backward differentiates ``fn`` with ``torch.func.vjp``.
* ``LinearTanh``: ``tanh(layer(x))`` for an ``nn.Module`` ``layer``.
* ``Halve``: ``x / 2`` of a tensor subclass (``torch.testing``'s wrapper ``TwoTensor``).
* ``elementwise(value_and_derivative)``: a factory; each call makes a new class
  ``Wrapper`` around the function it wraps (``soft_sin`` and ``soft_plus`` use it).
* ``Outer``: ``2 x^3`` whose forward calls ``Inner`` (``x^3``); nothing else calls
  ``Inner``. ``Outer``'s backward is its own, so ``Inner``'s is never used by the tests.

``SOFTLIB_PLANTED`` (comma-separated) plants a bug in each that softlib's tests miss:
``lambda`` (EulerStep's backward drops ``h``), ``module`` (LinearTanh's backward drops
the ``1 - tanh^2`` factor), ``subclass`` (Halve's backward quarters), ``factory``
(soft_plus's derivative is half of it), ``nested`` (Inner's backward is ``3 x``).
"""

from __future__ import annotations

import os

import torch

PLANTED = frozenset(p.strip() for p in os.environ.get("SOFTLIB_PLANTED", "").split(",") if p)


def decay(y: torch.Tensor) -> torch.Tensor:
    """A module-level vector field (recorded as a reference, checkable anywhere)."""
    return -0.5 * y


class EulerStep(torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(y, h, fn):
        return y + h * fn(y)

    @staticmethod
    def setup_context(ctx, inputs, output):
        y, h, fn = inputs
        ctx.save_for_backward(y)
        ctx.h, ctx.fn = h, fn

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        _, vjp = torch.func.vjp(ctx.fn, y)
        (gy,) = vjp(grad)
        h = 1.0 if "lambda" in PLANTED else ctx.h
        return grad + h * gy, None, None


class LinearTanh(torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(x, layer):
        return torch.tanh(torch.nn.functional.linear(x, layer.weight, layer.bias))

    @staticmethod
    def setup_context(ctx, inputs, output):
        _, layer = inputs
        ctx.save_for_backward(output)
        ctx.weight = layer.weight.detach()

    @staticmethod
    def backward(ctx, grad):
        (out,) = ctx.saved_tensors
        g = grad if "module" in PLANTED else grad * (1 - out**2)
        return g @ ctx.weight, None


class Halve(torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return x / 2

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, grad):
        return grad / (4 if "subclass" in PLANTED else 2)


def elementwise(value_and_derivative):
    """A Function class for ``f`` given ``(f(x), f'(x))``: a new class every call."""

    class Wrapper(torch.autograd.Function):
        generate_vmap_rule = True

        @staticmethod
        def forward(x):
            return value_and_derivative(x)[0]

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(inputs[0])

        @staticmethod
        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            return grad * value_and_derivative(x)[1]

    return Wrapper


def sin_and_cos(x):
    return torch.sin(x), torch.cos(x)


def softplus_and_sigmoid(x):
    d = torch.sigmoid(x)
    return torch.nn.functional.softplus(x), d / 2 if "factory" in PLANTED else d


class Inner(torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return x**3

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * 3 * (x if "nested" in PLANTED else x**2)


class Outer(torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return 2 * Inner.apply(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * 6 * x**2


def euler_step(y: torch.Tensor, h: float, fn) -> torch.Tensor:
    return EulerStep.apply(y, h, fn)


def linear_tanh(x: torch.Tensor, layer: torch.nn.Module) -> torch.Tensor:
    return LinearTanh.apply(x, layer)


def halve(x: torch.Tensor) -> torch.Tensor:
    return Halve.apply(x)


def soft_sin(x: torch.Tensor) -> torch.Tensor:
    return elementwise(sin_and_cos).apply(x)


def soft_plus(x: torch.Tensor) -> torch.Tensor:
    return elementwise(softplus_and_sigmoid).apply(x)


def twice_cube(x: torch.Tensor) -> torch.Tensor:
    return Outer.apply(x)
