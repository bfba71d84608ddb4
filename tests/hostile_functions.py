"""Deliberately hostile autograd.Functions: each misbehaves in one way the harness must survive.

Every one is otherwise a correct identity-like Function (x -> 2x) with a vmap
staticmethod, so a case that reaches the misbehaviour is the only one that
does not pass.
"""

from __future__ import annotations

import ctypes
import os
import signal
import time

import torch


class Double(torch.autograd.Function):
    """x -> 2 * x; subclasses override ``hostile`` (called from forward or the vmap rule)."""

    @staticmethod
    def forward(x):
        return x * 2

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, grad):
        return grad * 2

    @staticmethod
    def jvp(ctx, t):
        return t * 2


def samples(seed: int):
    gen = torch.Generator().manual_seed(seed)
    return [(torch.randn(4, 5, generator=gen),)]


class Raising(Double):
    @staticmethod
    def vmap(info, in_dims, x):
        raise ValueError("the rule is not implemented for this layout")


class Hanging(Double):
    """A Python-level hang (SIGALRM interrupts it)."""

    @staticmethod
    def vmap(info, in_dims, x):
        while True:
            time.sleep(0.01)


class LeavesTransformLevel(Double):
    """Leaves a torch.func grad level on the stack, once (the first forward call)."""

    leaked = False

    @staticmethod
    def forward(x):
        if not LeavesTransformLevel.leaked:
            LeavesTransformLevel.leaked = True
            torch._C._functorch._grad_increment_nesting()
        return x * 2

    @staticmethod
    def vmap(info, in_dims, x):
        return LeavesTransformLevel.apply(x), in_dims[0]


class LeavesGradDisabled(Double):
    @staticmethod
    def vmap(info, in_dims, x):
        torch.set_grad_enabled(False)
        return x * 2, in_dims[0]


class LeavesDefaultDtype(Double):
    @staticmethod
    def vmap(info, in_dims, x):
        torch.set_default_dtype(torch.float64)
        return x * 2, in_dims[0]


class Chatty(Double):
    """Prints three megabytes, from Python and from C, and returns a wrong result."""

    @staticmethod
    def vmap(info, in_dims, x):
        print("py" * 1_000_000)
        os.write(1, b"fd" * 500_000)
        return x * 3, in_dims[0]


class Exiting(Double):
    @staticmethod
    def vmap(info, in_dims, x):
        raise SystemExit(3)


class Killer(Double):
    """Kills its process on some plans, hangs in 'native code' on one, passes on the rest.

    With ``--batch-size 6 --checks vmap,vmap_chunked``: in_dims (1,) -> os._exit,
    in_dims (2,) -> segfault, the chunked plan at in_dims (0,) -> a hang with SIGALRM
    blocked (only the watchdog can end it); every other case passes.
    """

    @staticmethod
    def vmap(info, in_dims, x):
        if info.batch_size == 6 and in_dims == (1,):
            os._exit(3)
        if info.batch_size == 6 and in_dims == (2,):
            ctypes.string_at(0)  # SIGSEGV
        if info.batch_size == 1 and in_dims == (0,):
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
            time.sleep(120)
        return x * 2, in_dims[0]
