"""Planted Functions for the blame and time-limit tests: each is the 2x Function of
``hostile_functions.Double`` and misbehaves in one way (hangs where the timer cannot
reach it, cancels the timer, leaves a transform level on the stack every call).
"""

from __future__ import annotations

import functools
import signal
import time

import torch

from tests.hostile_functions import Double, samples
from tests.hostile_state import Correct

__all__ = ["Correct", "samples"]


def _ok(x, in_dims):
    return x * 2, in_dims[0]


class ReentrantBackward(Double):
    """A backward that re-enters torch.autograd.grad without end: past 60 levels torch's
    engine hands the recursion to its own threads, and the main thread waits in C++."""

    @staticmethod
    def backward(ctx, grad):
        with torch.enable_grad():
            y = torch.ones(1, requires_grad=True)
            torch.autograd.grad(ReentrantBackward.apply(y).sum(), y)
        return grad * 2

    @staticmethod
    def vmap(info, in_dims, x):
        return _ok(x, in_dims)


class CancelsTimer(Double):
    """Its rule cancels the interval timer (as code that uses signal.alarm does), then hangs."""

    @staticmethod
    def vmap(info, in_dims, x):
        signal.setitimer(signal.ITIMER_REAL, 0)
        while True:
            time.sleep(0.01)


class CancelsAlarm(Double):
    """The same with ``signal.alarm(0)``, in a busy loop (no blocking call to interrupt)."""

    @staticmethod
    def vmap(info, in_dims, x):
        signal.alarm(0)
        while True:
            pass


class SwallowsTimeout(Double):
    """Its rule hangs, catches whatever ends the hang (the timeout too) and returns a
    correct result: the case still ran past its limit."""

    @staticmethod
    def vmap(info, in_dims, x):
        try:
            while True:
                time.sleep(0.01)
        except BaseException:
            pass
        return _ok(x, in_dims)


class HangsInFloat64(Double):
    """Correct in float32; hangs in float64, which only the finite-difference reference
    runs (inside the suite's wrapper that names the reference)."""

    @staticmethod
    def forward(x):
        while x.dtype == torch.float64:
            time.sleep(0.01)
        return x * 2

    @staticmethod
    def vmap(info, in_dims, x):
        return _ok(x, in_dims)


class LeavesLevelEveryCall(Double):
    """Every forward leaves a torch.func grad level on the stack; the suite's code that
    runs after it then fails on the level it left."""

    @staticmethod
    def forward(x):
        torch._C._functorch._grad_increment_nesting()
        return x * 2

    @staticmethod
    def vmap(info, in_dims, x):
        return LeavesLevelEveryCall.apply(x), in_dims[0]


class Hangs(Double):
    """A Python-level hang in every rule call (the timer ends each)."""

    @staticmethod
    def vmap(info, in_dims, x):
        while True:
            time.sleep(0.01)


def _hang_rule(info, in_dims, x):
    while True:
        time.sleep(0.01)


class HangsOutsideItsOwnCode(Double):
    """A Python-level hang in every rule call, in a rule that is not the Function's own
    code (a ``functools.partial``): the watchdog cannot tell which staticmethod hung, so
    only "two timeouts in a check" stops the check."""

    vmap = staticmethod(functools.partial(_hang_rule))


class BlocksAlarm(Double):
    """Its rule blocks SIGALRM (the signal of the case's time limit) and returns correctly."""

    @staticmethod
    def vmap(info, in_dims, x):
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
        return _ok(x, in_dims)


class BlocksAlarmAndSleeps(Double):
    """Blocks SIGALRM and sleeps in C: nothing in the process can end it (a worker's
    watchdog kills the worker)."""

    @staticmethod
    def vmap(info, in_dims, x):
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
        time.sleep(60)
        return _ok(x, in_dims)


def empty_samples(seed: int):
    """Samples whose tensors have no elements: every comparison of them would pass."""
    return [(torch.randn(0, 5),)]


def mixed_empty_samples(seed: int):
    """One ordinary sample and one without elements."""
    gen = torch.Generator().manual_seed(seed)
    return [(torch.randn(4, 5, generator=gen),), (torch.randn(4, 0),)]


def endless_samples():
    """A samples callable that yields forever."""
    gen = torch.Generator().manual_seed(0)
    while True:
        yield (torch.randn(3, 2, generator=gen),)


def many_samples(seed: int):
    gen = torch.Generator().manual_seed(seed)
    return [(torch.randn(3, 2, generator=gen),) for _ in range(100)]


def long_samples(seed: int):
    """A sample with a dimension of 12,000: the hazard probe would batch it 12,000 times."""
    gen = torch.Generator().manual_seed(seed)
    return [(torch.randn(12000, generator=gen),)]


class EmptyOutput(torch.autograd.Function):
    """x -> 2 * x[:0]: correct, and its outputs have no elements on any sample."""

    @staticmethod
    def forward(x):
        return x[:0] * 2

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.shape = inputs[0].shape

    @staticmethod
    def backward(ctx, grad):
        return grad.new_zeros(ctx.shape)

    @staticmethod
    def jvp(ctx, t):
        return t[:0] * 2

    @staticmethod
    def vmap(info, in_dims, x):
        return x.movedim(in_dims[0], 0)[:, :0] * 2, 0
