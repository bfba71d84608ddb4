"""Functions whose recorded points sit within one finite-difference step of a kink (issue 34
parts 1 and 2), each correct, next to a smooth wrong twin (its derivative off by 1e-4
relative, or 1% where the reference runs at float32)."""

from __future__ import annotations

import torch

LAMBDA = 0.5
#: Off by this factor: the smooth wrong twins.
OFF = 1.0 + 1e-4


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def threshold_samples(seed: int) -> list[tuple[torch.Tensor]]:
    """A 7 x 9 float64 input (63 elements) away from +-LAMBDA, except element (6, 0) which
    sits 2e-4 above the threshold: within the step 1e-3 of the finite differences."""
    g = _gen(seed)
    x = 0.7 + torch.rand(7, 9, generator=g, dtype=torch.float64)
    sign = torch.where(torch.rand(7, 9, generator=g, dtype=torch.float64) < 0.5, -1.0, 1.0)
    x = x * sign
    x[6, 0] = LAMBDA + 2e-4
    return [(x,)]


class SoftThreshold(torch.autograd.Function):
    """sign(x) max(|x| - LAMBDA, 0): correct, its derivative a step at +-LAMBDA."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return torch.sign(x) * torch.clamp(x.abs() - LAMBDA, min=0.0)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])
        ctx.save_for_forward(inputs[0])

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * (x.abs() > LAMBDA).to(x.dtype)

    @staticmethod
    def jvp(ctx, t):
        (x,) = ctx.saved_tensors
        return t * (x.abs() > LAMBDA).to(x.dtype)


class SoftThresholdOff(SoftThreshold):
    """Twin: backward and jvp off by OFF everywhere (smooth, small)."""

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * (x.abs() > LAMBDA).to(x.dtype) * OFF

    @staticmethod
    def jvp(ctx, t):
        (x,) = ctx.saved_tensors
        return t * (x.abs() > LAMBDA).to(x.dtype) * OFF


def cube_samples(seed: int) -> list[tuple[torch.Tensor]]:
    """Values of scale 1, one element 2e-4 from 0 (the kink of |x|^3's second derivative)."""
    g = _gen(seed)
    x = torch.randn(5, 6, generator=g, dtype=torch.float64)
    x[2, 3] = 2e-4
    return [(x,)]


class CubeNorm(torch.autograd.Function):
    """|x|^3 (softlib's PowerNorm at p = 3): correct, twice differentiable, its second
    derivative 6|x| has a kink at 0."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return x.abs() ** 3

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])
        ctx.save_for_forward(inputs[0])

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * 3 * x * x.abs()

    @staticmethod
    def jvp(ctx, t):
        (x,) = ctx.saved_tensors
        return t * 3 * x * x.abs()


class CubeNormOff(CubeNorm):
    """Twin: backward off by OFF (its double backward too)."""

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * 3 * x * x.abs() * OFF


# --- a legacy grid interpolation (eager checks, random directions) ----------------------------

GRID = torch.linspace(-2.0, 2.0, 9, dtype=torch.float64)


def grid_samples(seed: int) -> list[tuple[torch.Tensor]]:
    """200 points (past the 160 Jacobian columns: random directions), three of them within a
    step of a grid node."""
    g = _gen(seed)
    x = -1.9 + 3.8 * torch.rand(200, generator=g, dtype=torch.float64)
    x[7] = 0.5 + 3e-4
    x[50] = -1.0 - 2e-4
    x[120] = 1.5 + 1e-4
    return [(x,)]


def _cells(x):
    step = float(GRID[1] - GRID[0])
    k = torch.clamp(((x - float(GRID[0])) / step).floor(), 0, len(GRID) - 2).long()
    return k, (x - GRID[k]) / step, step


def _values():
    return torch.sin(2 * GRID) + GRID**2


class GridInterp(torch.autograd.Function):
    """Piecewise-linear interpolation on GRID, legacy style (eager checks only): correct, its
    derivative jumps at every node."""

    @staticmethod
    def forward(ctx, x):
        k, frac, step = _cells(x)
        v = _values().to(x.dtype)
        ctx.save_for_backward(x)
        return v[k] * (1 - frac) + v[k + 1] * frac

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        k, _, step = _cells(x)
        v = _values().to(x.dtype)
        return grad * (v[k + 1] - v[k]) / step


class GridInterpOff(torch.autograd.Function):
    """Twin: the slope off by OFF."""

    @staticmethod
    def forward(ctx, x):
        return GridInterp.forward(ctx, x)

    @staticmethod
    def backward(ctx, grad):
        return GridInterp.backward(ctx, grad) * OFF


# --- complex -----------------------------------------------------------------------------------


def complex_samples(seed: int) -> list[tuple[torch.Tensor]]:
    g = _gen(seed)
    re = 0.7 + torch.rand(4, 5, generator=g, dtype=torch.float64)
    im = torch.randn(4, 5, generator=g, dtype=torch.float64)
    re[1, 2] = LAMBDA + 2e-4
    return [(torch.complex(re, im),)]


class ComplexShrink(torch.autograd.Function):
    """Soft-threshold of the real part, the imaginary part as is: correct (an R-linear map
    of dz on each side of the threshold)."""

    generate_vmap_rule = True

    @staticmethod
    def forward(z):
        re = torch.clamp(z.real - LAMBDA, min=0.0)
        return torch.complex(re, z.imag)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])
        ctx.save_for_forward(inputs[0])

    @staticmethod
    def backward(ctx, grad):
        (z,) = ctx.saved_tensors
        mask = (z.real > LAMBDA).to(z.real.dtype)
        return torch.complex(grad.real * mask, grad.imag)

    @staticmethod
    def jvp(ctx, t):
        (z,) = ctx.saved_tensors
        mask = (z.real > LAMBDA).to(z.real.dtype)
        return torch.complex(t.real * mask, t.imag)


class ComplexShrinkOff(ComplexShrink):
    @staticmethod
    def backward(ctx, grad):
        (z,) = ctx.saved_tensors
        mask = (z.real > LAMBDA).to(z.real.dtype)
        return torch.complex(grad.real * mask * OFF, grad.imag * OFF)

    @staticmethod
    def jvp(ctx, t):
        (z,) = ctx.saved_tensors
        mask = (z.real > LAMBDA).to(z.real.dtype)
        return torch.complex(t.real * mask * OFF, t.imag * OFF)


# --- part 2: a Function that runs at float32 only -----------------------------------------------


def attention_samples(seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = _gen(seed)
    q = torch.randn(5, 4, generator=g)
    k = torch.randn(5, 4, generator=g)
    return [(q, k)]


def _masked_scores(q, k):
    n = q.shape[0]
    causal = torch.ones(n, n, dtype=torch.bool).triu(1)
    # a float32 bias filled with the input dtype's lowest value: fine at float32, raises at
    # float64 ("value cannot be converted to type float without overflow")
    bias = torch.zeros(n, n, dtype=torch.float32).masked_fill(causal, torch.finfo(q.dtype).min)
    return q @ k.T + bias.to(q.dtype)


class CausalAttention(torch.autograd.Function):
    """softmax(q k^T + causal bias) summed over keys weighted by q: correct at float32."""

    generate_vmap_rule = True

    @staticmethod
    def forward(q, k):
        return torch.softmax(_masked_scores(q, k), dim=-1)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0], inputs[1], output)

    @staticmethod
    def backward(ctx, grad):
        q, k, p = ctx.saved_tensors
        ds = p * (grad - (grad * p).sum(-1, keepdim=True))
        return ds @ k, ds.T @ q


class CausalAttentionOff(CausalAttention):
    """Twin: the gradient of q off by 1%."""

    @staticmethod
    def backward(ctx, grad):
        q, k, p = ctx.saved_tensors
        ds = p * (grad - (grad * p).sum(-1, keepdim=True))
        return ds @ k * 1.01, ds.T @ q


# --- float32 custom mode: a surrogate gradient (snntorch's Sigmoid, modern form) -----------------


def spike_samples(seed: int) -> list[tuple[torch.Tensor, float]]:
    g = _gen(seed)
    return [(torch.randn(3, 4, generator=g) * s, 25.0) for s in (0.1, 0.5, 1.0)]


class SigmoidSpike(torch.autograd.Function):
    """Heaviside forward returning float32 whatever the input's dtype (as snntorch's
    ``(input_ > 0).float()``), the sigmoid's derivative as its gradient: declared custom."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x, slope):
        return (x > 0).float()

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])
        ctx.slope = inputs[1]

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        e = torch.exp(-ctx.slope * x)
        return grad * ctx.slope * e / (e + 1) ** 2, None


class SigmoidSpikeDetached(SigmoidSpike):
    """Twin: backward detaches what it saved (its second order is lost)."""

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        e = torch.exp(-ctx.slope * x.detach())
        return grad * ctx.slope * e / (e + 1) ** 2, None
