"""A slow, otherwise correct Function (x -> 2x) for interrupting runs half way.

Every call of its vmap rule appends a line to the file named by ``AFDB_TEST_TRACE``
(so a test knows cases are running) and sleeps a little.
"""

from __future__ import annotations

import os
import time

import torch


class Sleepy(torch.autograd.Function):
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
    def vmap(info, in_dims, x):
        trace = os.environ.get("AFDB_TEST_TRACE")
        if trace:
            with open(trace, "a") as f:
                f.write(f"{os.getpid()}\n")
        time.sleep(0.2)
        return x * 2, in_dims[0]


def samples(seed: int):
    gen = torch.Generator().manual_seed(seed)
    return [(torch.randn(4, 5, generator=gen),)]
