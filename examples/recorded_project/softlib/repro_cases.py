"""softlib Functions whose bugs a reproducer must reach beyond the case's main call.

* ``SynthPair``: ``low * cos(angle) + high * sin(angle)``, like a synthesis filter bank. Planted
  ``subcheck``: its backward computes the gradient of ``high`` only when ``low`` needs one
  too, so torch.func.vjp of both inputs is right and the gradient of ``high`` alone is
  missing (the case's "input 1 alone" sub-check).
* ``BigBlend``: ``x * sigmoid(w)`` on inputs far too large for a whole Jacobian
  (90,000 elements each: 130 GB in float64). Planted ``large``: the gradient of ``w``
  drops the factor ``1 - sigmoid(w)``.
* ``make_scaled_sin(alpha)``: a factory whose class ``ScaledSin`` (``alpha * sin(x)``) is
  made inside a function. Planted ``factory``: its backward drops ``alpha``.

``SOFTLIB_PLANTED`` (comma-separated) plants them; the tests in ``repro_tests`` pass either
way.
"""

from __future__ import annotations

import math
import os

import torch

PLANTED = frozenset(p.strip() for p in os.environ.get("SOFTLIB_PLANTED", "").split(",") if p)


class SynthPair(torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(low, high, angle):
        return low * math.cos(angle) + high * math.sin(angle)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.angle = inputs[2]

    @staticmethod
    def backward(ctx, grad):
        dlow = dhigh = None
        if ctx.needs_input_grad[0]:
            dlow = grad * math.cos(ctx.angle)
            if "subcheck" in PLANTED:
                dhigh = grad * math.sin(ctx.angle)
        if ctx.needs_input_grad[1] and "subcheck" not in PLANTED:
            dhigh = grad * math.sin(ctx.angle)
        return dlow, dhigh, None


class BigBlend(torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(x, w):
        return x * torch.sigmoid(w)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)

    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        s = torch.sigmoid(w)
        ds = s if "large" in PLANTED else s * (1 - s)
        return grad * s, grad * x * ds


def make_scaled_sin(alpha):
    """A Function class for ``alpha * sin(x)``, made anew by each call."""

    class ScaledSin(torch.autograd.Function):
        generate_vmap_rule = True

        @staticmethod
        def forward(x):
            return alpha * torch.sin(x)

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(inputs[0])

        @staticmethod
        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            factor = 1.0 if "factory" in PLANTED else alpha
            return grad * factor * torch.cos(x)

    return ScaledSin


ScaledSin2 = make_scaled_sin(2.0)


def synth(low, high, angle=0.7):
    return SynthPair.apply(low, high, angle)


def blend(x, w):
    return BigBlend.apply(x, w)


def scaled_sin(x):
    return ScaledSin2.apply(x)
