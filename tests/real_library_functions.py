"""Functions of the classes real libraries ship, each next to a planted wrong twin.

These are user Functions (checked through ``harness.check``), modelled on what
rotation-fitting, Lie-group, quantization, spiking, float64-only numerical,
normalisation and dropout code does. Each correct one must pass every check it
claims; each twin has one realistic mistake the suite must name. Samples are
seeded callables in the user's own dtype.
"""

from __future__ import annotations

import torch

# --- samples ---------------------------------------------------------------------------------


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def quaternion_samples(seed: int) -> list[tuple[torch.Tensor]]:
    """Unnormalised quaternions, rows of (5, 4), norms around 2."""
    g = _gen(seed)
    q = torch.randn(5, 4, generator=g, dtype=torch.float64)
    return [(2 * q / q.norm(dim=-1, keepdim=True) + 0.3 * q,)]


def axis_angle_samples(seed: int) -> list[tuple[torch.Tensor]]:
    """Rotation vectors (5, 3), angles well below pi."""
    g = _gen(seed)
    return [(0.8 * torch.randn(5, 3, generator=g, dtype=torch.float64),)]


def away_from_zero_samples(seed: int) -> list[tuple[torch.Tensor]]:
    """Values in +-[0.2, 2] (off the jump of sign/heaviside), some beyond the STE clip of 1."""
    g = _gen(seed)
    mag = 0.2 + 1.8 * torch.rand(4, 5, generator=g, dtype=torch.float64)
    sign = torch.where(torch.rand(4, 5, generator=g, dtype=torch.float64) < 0.5, -1.0, 1.0)
    return [(mag * sign,)]


def float64_samples(seed: int) -> list[tuple[torch.Tensor]]:
    g = _gen(seed)
    return [(torch.randn(4, 5, generator=g, dtype=torch.float64),)]


def activation_samples(seed: int) -> list[tuple[torch.Tensor]]:
    """float32 activations with an offset and spread, as a normalisation layer sees them."""
    g = _gen(seed)
    return [((10.0 + 3.0 * torch.randn(4, 7, generator=g, dtype=torch.float64)).float(),)]


def float32_samples(seed: int) -> list[tuple[torch.Tensor]]:
    g = _gen(seed)
    return [(torch.randn(4, 5, generator=g, dtype=torch.float64).float(),)]


def complex_pair_samples(seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = _gen(seed)
    z = torch.randn(2, 4, 5, generator=g, dtype=torch.complex128)
    return [(z[0], z[1])]


def polar_samples(seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = _gen(seed)
    r = 0.5 + torch.rand(4, 5, generator=g, dtype=torch.float64)
    theta = torch.randn(4, 5, generator=g, dtype=torch.float64)
    return [(r, theta)]


# --- rotation fitting: custom backward, true-derivative jvp ----------------------------------


class NormalizeQuaternion(torch.autograd.Function):
    """q / |q| (the last step of a rotation fit). backward returns the tangent-space gradient
    (projected, without the 1/|q| factor) as the fitting library does; jvp is the true
    derivative."""

    generate_vmap_rule = True

    @staticmethod
    def forward(q):
        return q / q.norm(dim=-1, keepdim=True)

    @staticmethod
    def setup_context(ctx, inputs, output):
        (q,) = inputs
        ctx.save_for_backward(q, output)
        ctx.save_for_forward(q, output)

    @staticmethod
    def backward(ctx, grad):
        _, y = ctx.saved_tensors
        return grad - (grad * y).sum(-1, keepdim=True) * y

    @staticmethod
    def jvp(ctx, q_t):
        q, y = ctx.saved_tensors
        return (q_t - (q_t * y).sum(-1, keepdim=True) * y) / q.norm(dim=-1, keepdim=True)


class NormalizeQuaternionBadJvp(NormalizeQuaternion):
    """Twin: the jvp forgets the projection (neither the true derivative nor the backward's)."""

    @staticmethod
    def jvp(ctx, q_t):
        q, _ = ctx.saved_tensors
        return q_t / q.norm(dim=-1, keepdim=True)


# --- Lie group: tangent-space (left-perturbation) gradients ----------------------------------


def hat(w: torch.Tensor) -> torch.Tensor:
    z = torch.zeros_like(w[..., 0])
    x, y, c = w[..., 0], w[..., 1], w[..., 2]
    return torch.stack(
        [
            torch.stack([z, -c, y], -1),
            torch.stack([c, z, -x], -1),
            torch.stack([-y, x, z], -1),
        ],
        -2,
    )


def vee_of_skew(a: torch.Tensor) -> torch.Tensor:
    """(a32 - a23, a13 - a31, a21 - a12): <A, hat(t)> = <vee_of_skew(A), t>."""
    return torch.stack(
        [a[..., 2, 1] - a[..., 1, 2], a[..., 0, 2] - a[..., 2, 0], a[..., 1, 0] - a[..., 0, 1]],
        -1,
    )


class SO3Exp(torch.autograd.Function):
    """R = exp(hat(w)). Both rules are in the Lie algebra (left perturbation
    exp(hat(t) eps) R), as a Lie-group library defines them: jvp hat(t) R, backward
    vee(skew(G R^T)). Deliberately not the derivative with respect to w."""

    generate_vmap_rule = True

    @staticmethod
    def forward(w):
        return torch.linalg.matrix_exp(hat(w))

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(output)
        ctx.save_for_forward(output)

    @staticmethod
    def backward(ctx, grad):
        (r,) = ctx.saved_tensors
        return vee_of_skew(grad @ r.transpose(-1, -2))

    @staticmethod
    def jvp(ctx, w_t):
        (r,) = ctx.saved_tensors
        return hat(w_t) @ r


class SO3ExpBadBackward(SO3Exp):
    """Twin: backward multiplies by R instead of R^T (a right/left mix-up)."""

    @staticmethod
    def backward(ctx, grad):
        (r,) = ctx.saved_tensors
        return vee_of_skew(grad @ r)


# --- quantization: straight-through estimator ------------------------------------------------


class SignSTE(torch.autograd.Function):
    """sign(x) with the clipped straight-through gradient 1{|x| <= 1}."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return torch.sign(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        (x,) = inputs
        ctx.save_for_backward(x)
        ctx.save_for_forward(x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * (x.abs() <= 1).to(grad.dtype)

    @staticmethod
    def jvp(ctx, x_t):
        (x,) = ctx.saved_tensors
        return x_t * (x.abs() <= 1).to(x_t.dtype)


class SignSTEBadJvp(SignSTE):
    """Twin: the jvp forgets the clip (matches neither sign's derivative nor the backward)."""

    @staticmethod
    def jvp(ctx, x_t):
        return x_t.clone()


# --- spiking: surrogate gradient -------------------------------------------------------------


class Spike(torch.autograd.Function):
    """heaviside(v) with the fast-sigmoid surrogate 1 / (1 + 5|v|)^2 as its gradient."""

    generate_vmap_rule = True

    @staticmethod
    def forward(v):
        return (v > 0).to(v.dtype)

    @staticmethod
    def setup_context(ctx, inputs, output):
        (v,) = inputs
        ctx.save_for_backward(v)
        ctx.save_for_forward(v)

    @staticmethod
    def backward(ctx, grad):
        (v,) = ctx.saved_tensors
        return grad / (1 + 5 * v.abs()) ** 2

    @staticmethod
    def jvp(ctx, v_t):
        (v,) = ctx.saved_tensors
        return v_t / (1 + 5 * v.abs()) ** 2


class SpikeBadJvp(Spike):
    """Twin: the jvp's surrogate is not squared."""

    @staticmethod
    def jvp(ctx, v_t):
        (v,) = ctx.saved_tensors
        return v_t / (1 + 5 * v.abs())


# --- a float64-only numerical Function -------------------------------------------------------


class Float64Only(torch.autograd.Function):
    """x * sin(x), refusing anything but float64 (as numerically careful code does)."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        assert x.dtype == torch.float64, f"Float64Only needs float64 input, got {x.dtype}"
        return x * torch.sin(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        (x,) = inputs
        ctx.save_for_backward(x)
        ctx.save_for_forward(x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * (torch.sin(x) + x * torch.cos(x))

    @staticmethod
    def jvp(ctx, x_t):
        (x,) = ctx.saved_tensors
        return x_t * (torch.sin(x) + x * torch.cos(x))


class Float64OnlyBadBackward(Float64Only):
    """Twin: backward forgets the product rule's sin(x) term."""

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * x * torch.cos(x)


# --- a normalisation -------------------------------------------------------------------------


class Normalize(torch.autograd.Function):
    """(x - mean) / sqrt(var + 1e-5) over the last dim (layer norm without affine)."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        mean = x.mean(-1, keepdim=True)
        var = x.var(-1, unbiased=False, keepdim=True)
        return (x - mean) / torch.sqrt(var + 1e-5)

    @staticmethod
    def setup_context(ctx, inputs, output):
        # Save the input and recompute in backward: setup_context runs without grad
        # tracking, so statistics computed here would make double backward wrong.
        ctx.save_for_backward(*inputs)
        ctx.save_for_forward(*inputs)

    @staticmethod
    def _stats(x):
        rstd = 1 / torch.sqrt(x.var(-1, unbiased=False, keepdim=True) + 1e-5)
        return (x - x.mean(-1, keepdim=True)) * rstd, rstd

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        y, rstd = Normalize._stats(x)
        g_mean = grad.mean(-1, keepdim=True)
        gy_mean = (grad * y).mean(-1, keepdim=True)
        return rstd * (grad - g_mean - y * gy_mean)

    @staticmethod
    def jvp(ctx, x_t):
        (x,) = ctx.saved_tensors
        y, rstd = Normalize._stats(x)
        t = x_t - x_t.mean(-1, keepdim=True)
        return rstd * (t - y * (t * y).mean(-1, keepdim=True))


class NormalizeBadBackward(Normalize):
    """Twin: backward drops the variance term (-y * mean(g * y))."""

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        _, rstd = Normalize._stats(x)
        return rstd * (grad - grad.mean(-1, keepdim=True))


# --- dropout: a random Function with its mask drawn in the input's dtype ---------------------

P_DROP = 0.4


class Dropout(torch.autograd.Function):
    """Inverted dropout; the mask is drawn with torch.rand in the input's dtype and returned
    (a non-differentiable bool output) so setup_context can save it."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        mask = torch.rand(x.shape, dtype=x.dtype, device=x.device) >= P_DROP
        return x * mask / (1 - P_DROP), mask

    @staticmethod
    def setup_context(ctx, inputs, output):
        _, mask = output
        ctx.mark_non_differentiable(mask)
        ctx.save_for_backward(mask)
        ctx.save_for_forward(mask)

    @staticmethod
    def backward(ctx, grad, _grad_mask):
        (mask,) = ctx.saved_tensors
        return grad * mask / (1 - P_DROP)

    @staticmethod
    def jvp(ctx, x_t):
        (mask,) = ctx.saved_tensors
        return x_t * mask / (1 - P_DROP), None


class DropoutRedraws(Dropout):
    """Twin: backward draws a fresh mask instead of using the forward's."""

    @staticmethod
    def backward(ctx, grad, _grad_mask):
        mask = torch.rand(grad.shape, dtype=grad.dtype, device=grad.device) >= P_DROP
        return grad * mask / (1 - P_DROP)


# --- complex numbers -------------------------------------------------------------------------


class ComplexMul(torch.autograd.Function):
    """a * b for complex tensors; torch's convention: grad_a = grad * conj(b)."""

    generate_vmap_rule = True

    @staticmethod
    def forward(a, b):
        return a * b

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)
        ctx.save_for_forward(*inputs)

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        return grad * b.conj(), grad * a.conj()

    @staticmethod
    def jvp(ctx, a_t, b_t):
        a, b = ctx.saved_tensors
        return a_t * b + a * b_t


class ComplexMulNoConj(ComplexMul):
    """Twin: backward forgets the conjugate."""

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        return grad * b, grad * a


class Polar(torch.autograd.Function):
    """(r, theta) -> r * exp(i theta): real inputs, a complex output."""

    generate_vmap_rule = True

    @staticmethod
    def forward(r, theta):
        return torch.polar(r, theta)

    @staticmethod
    def setup_context(ctx, inputs, output):
        r, theta = inputs
        ctx.save_for_backward(r, theta)
        ctx.save_for_forward(r, theta)

    @staticmethod
    def backward(ctx, grad):
        r, theta = ctx.saved_tensors
        e = torch.polar(torch.ones_like(r), theta)
        # real inputs get Re(conj(dz/dx) * grad)
        return (grad * e.conj()).real, (grad * (1j * r * e).conj()).real

    @staticmethod
    def jvp(ctx, r_t, theta_t):
        r, theta = ctx.saved_tensors
        e = torch.polar(torch.ones_like(r), theta)
        return r_t * e + theta_t * 1j * r * e


class PolarNoConj(Polar):
    """Twin: backward takes Re(dz/dx * grad) without the conjugate."""

    @staticmethod
    def backward(ctx, grad):
        r, theta = ctx.saved_tensors
        e = torch.polar(torch.ones_like(r), theta)
        return (grad * e).real, (grad * 1j * r * e).real
