"""A small library whose Functions start thread pools, as numba- or TorchScript-using ones do.

``ForkedSin``: its forward computes ``2 sin(x)`` in a TorchScript function that runs the work
through ``torch.jit.fork`` (torch's inter-op pool starts on the first call; a process forked
after that deadlocks in the interpreter on its next ``torch.jit.fork``). ``PooledCube``: its
forward first waits for the library's worker thread to flush its cache (a thread pool the
module starts on first use; a forked child has the queue but not the thread, so it waits
forever). ``HAZLIB_PLANTED=1``: each backward drops a factor (a wrong gradient to catch).
"""

from __future__ import annotations

import os
import queue
import threading

import torch

PLANTED = os.environ.get("HAZLIB_PLANTED") == "1"


@torch.jit.script
def _twice_sin(x: torch.Tensor) -> torch.Tensor:
    return 2.0 * torch.sin(x)


@torch.jit.script
def _forked_twice_sin(x: torch.Tensor) -> torch.Tensor:
    future = torch.jit.fork(_twice_sin, x)
    return torch.jit.wait(future)


class ForkedSin(torch.autograd.Function):
    @staticmethod
    def forward(x):
        return _forked_twice_sin(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        factor = 1.0 if PLANTED else 2.0
        return grad * factor * torch.cos(x)


_JOBS: queue.Queue = queue.Queue()
_STARTED: list[threading.Thread] = []


def _serve() -> None:
    while True:
        done = _JOBS.get()
        done.set()


def _flush_cache() -> None:
    """Ask the library's worker thread to flush (started on first use) and wait for it."""
    if not _STARTED:
        worker = threading.Thread(target=_serve, name="hazlib-cache", daemon=True)
        worker.start()
        _STARTED.append(worker)
    done = threading.Event()
    _JOBS.put(done)
    done.wait()


class PooledCube(torch.autograd.Function):
    @staticmethod
    def forward(x):
        _flush_cache()
        return x**3

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        factor = 2.0 if PLANTED else 3.0
        return grad * factor * x**2
