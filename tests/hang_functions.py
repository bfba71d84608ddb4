"""Planted Functions for "a hang costs one timeout" (issue 31 part 1): the 2x Function of
``hostile_functions.Double`` with one staticmethod that never returns, and a tracer that
records which staticmethods each check calls.
"""

from __future__ import annotations

import threading

import torch

from tests.hostile_functions import Double


def _ok(x, in_dims):
    return x * 2, in_dims[0]


def samples(seed: int):
    """Two samples: a hang costs one timeout on each."""
    gen = torch.Generator().manual_seed(seed)
    return [(torch.randn(4, 5, generator=gen),), (torch.randn(3, 7, generator=gen),)]


class BackwardHangs(Double):
    """A backward that waits forever (on an event no one sets)."""

    @staticmethod
    def backward(ctx, grad):
        threading.Event().wait()
        return grad * 2

    @staticmethod
    def vmap(info, in_dims, x):
        return _ok(x, in_dims)


class BackwardRecursesOnEngineThreads(Double):
    """A backward that re-enters torch.autograd.grad without end: past 60 levels torch's
    autograd engine runs the recursion on its own threads while the case's thread waits in
    C++ (the real Function of issue 31)."""

    @staticmethod
    def backward(ctx, grad):
        with torch.enable_grad():
            y = torch.ones(1, requires_grad=True)
            torch.autograd.grad(BackwardRecursesOnEngineThreads.apply(y).sum(), y)
        return grad * 2

    @staticmethod
    def vmap(info, in_dims, x):
        return _ok(x, in_dims)


class VmapHangs(Double):
    """Its vmap staticmethod waits forever; forward, backward and jvp are right."""

    @staticmethod
    def vmap(info, in_dims, x):
        threading.Event().wait()
        return _ok(x, in_dims)


class Correct(Double):
    """The twin: every staticmethod returns."""

    @staticmethod
    def vmap(info, in_dims, x):
        return _ok(x, in_dims)


#: The staticmethods ``Traced`` saw called, in the order of the calls.
CALLS: list[str] = []


class Traced(torch.autograd.Function):
    """x -> 2 * x recording each staticmethod call in ``CALLS``; backward and jvp call the
    Function again (as a twice-differentiable backward does), so their own calls count."""

    @staticmethod
    def forward(x):
        CALLS.append("forward")
        return x * 2

    @staticmethod
    def setup_context(ctx, inputs, output):
        CALLS.append("setup_context")

    @staticmethod
    def backward(ctx, grad):
        CALLS.append("backward")
        return Traced.apply(grad)

    @staticmethod
    def jvp(ctx, t):
        CALLS.append("jvp")
        return Traced.apply(t)

    @staticmethod
    def vmap(info, in_dims, x):
        CALLS.append("vmap")
        return _ok(x, in_dims)


class LegacyTraced(torch.autograd.Function):
    """``Traced`` in the legacy style (``forward(ctx, x)``, no setup_context): torch.func
    cannot differentiate it, so the eager checks run it."""

    @staticmethod
    def forward(ctx, x):
        CALLS.append("forward")
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        CALLS.append("backward")
        return LegacyTraced.apply(grad)

    @staticmethod
    def jvp(ctx, t):
        CALLS.append("jvp")
        return t * 2
