"""Functions and value types for the recording tests of issue 36 parts 1 and 5 and issue 34
part 7: a pass-through ``Probe`` that takes any value, option Functions (``Options`` and
its twin ``OptionsBuggy``, wrong only in its last option combination) and a filter
Function whose backward relies on a symmetric filter (``SymFilter``; ``SymFilterWrong``
drops half of its gradient)."""

from __future__ import annotations

import collections
import dataclasses
import enum

import torch
import torch.nn.functional as F


class Mode(enum.Enum):
    ZERO = "zero"
    REFLECT = "reflect"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


Pair = collections.namedtuple("Pair", ["lo", "hi"])


@dataclasses.dataclass(frozen=True)
class Config:
    width: int
    mode: Mode
    scale: float = 1.0


@dataclasses.dataclass
class MutableConfig:
    width: int


class Probe(torch.autograd.Function):
    """``2 * x``; ``value`` is any argument, kept only to be recorded."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x, value):
        return x * 2

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, grad):
        return grad * 2, None


class Options(torch.autograd.Function):
    """``f(x)`` chosen by ``kind`` ("square", "sine", "cube"), negated when ``flip``."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x, kind, flip):
        y = {"square": x**2, "sine": torch.sin(x), "cube": x**3}[kind]
        return -y if flip else y

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, kind, flip = inputs
        ctx.save_for_backward(x)
        ctx.kind, ctx.flip = kind, flip

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        d = {"square": 2 * x, "sine": torch.cos(x), "cube": 3 * x**2}[ctx.kind]
        return (-d if ctx.flip else d) * grad, None, None


class OptionsBuggy(Options):
    """Options whose backward is wrong only for ("cube", flip=True): the sign is lost."""

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        d = {"square": 2 * x, "sine": torch.cos(x), "cube": 3 * x**2}[ctx.kind]
        flip = ctx.flip and ctx.kind != "cube"
        return (-d if flip else d) * grad, None, None


def _correlate(x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    return F.conv1d(x[None, None], h[None, None], padding=h.shape[0] // 2)[0, 0]


class SymFilter(torch.autograd.Function):
    """``y = x (*) h`` (correlation, zero padding, same size) for an odd-length filter ``h``.

    The backward for ``x`` correlates the cotangent with ``h`` itself instead of the
    flipped ``h``: right because the program's filters are symmetric (as a wavelet filter
    bank's may be), wrong for any other filter."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x, h):
        return _correlate(x, h)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)

    @staticmethod
    def backward(ctx, grad):
        x, h = ctx.saved_tensors
        k = h.shape[0] // 2
        grad_h = F.conv1d(F.pad(x, (k, k))[None, None], grad[None, None])[0, 0]
        return _correlate(grad, h), grad_h


class SymFilterWrong(SymFilter):
    """SymFilter whose gradient for ``x`` is half what it should be."""

    @staticmethod
    def backward(ctx, grad):
        gx, gh = SymFilter.backward(ctx, grad)
        return gx * 0.5, gh
