"""Functions whose bug a reference once could not see (issue 19 §1), each next to its twin.

Every class below is a user Function checked through ``harness.check``: the correct one
passes every check it claims, the planted wrong twin fails for the right reason. Samples
are seeded callables in the user's own dtype.
"""

from __future__ import annotations

import torch


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# --- second order under gradient="custom" ----------------------------------------------------


def spike_samples(seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Membrane potentials away from the threshold 0 and positive weights, float64."""
    g = _gen(seed)
    mag = 0.2 + 1.3 * torch.rand(4, 5, generator=g, dtype=torch.float64)
    sign = torch.where(torch.rand(4, 5, generator=g, dtype=torch.float64) < 0.5, -1.0, 1.0)
    w = 0.5 + torch.rand(4, 5, generator=g, dtype=torch.float64)
    return [(mag * sign, w)]


class WeightedSpike(torch.autograd.Function):
    """w * heaviside(v) with a fast-sigmoid surrogate for dv: a spiking layer's custom first
    order. backward reads only the saved inputs (v, w), so its derivative is the derivative
    of the gradient users get: d/dv [g w s(v)] = g w s'(v), d/dw [g w s(v)] = g s(v)."""

    generate_vmap_rule = True

    @staticmethod
    def forward(v, w):
        return w * (v > 0).to(v.dtype)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)
        ctx.save_for_forward(*inputs)

    @staticmethod
    def backward(ctx, grad):
        v, w = ctx.saved_tensors
        surrogate = 1 / (1 + 4 * v.abs()) ** 2
        return grad * w * surrogate, grad * (v > 0).to(grad.dtype)

    @staticmethod
    def jvp(ctx, v_t, w_t):
        v, w = ctx.saved_tensors
        surrogate = 1 / (1 + 4 * v.abs()) ** 2
        return v_t * w * surrogate + w_t * (v > 0).to(v.dtype)


class WeightedSpikeDetached(WeightedSpike):
    """Twin: backward detaches what it saved, so its second-order terms are lost (in eager
    double backward and torch.func alike)."""

    @staticmethod
    def backward(ctx, grad):
        v, w = [t.detach() for t in ctx.saved_tensors]
        surrogate = 1 / (1 + 4 * v.abs()) ** 2
        return grad * w * surrogate, grad * (v > 0).to(grad.dtype)


def rotation_samples(seed: int) -> list[tuple[torch.Tensor]]:
    g = _gen(seed)
    return [(0.8 * torch.randn(4, 3, generator=g, dtype=torch.float64),)]


class Rodrigues(torch.autograd.Function):
    """R = exp(hat(w)) with a Lie-algebra gradient vee(skew(G R^T)); backward reads the saved
    output R (its dependence on w runs through the custom rule under torch.func)."""

    generate_vmap_rule = True

    @staticmethod
    def forward(w):
        return torch.linalg.matrix_exp(_hat(w))

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(output)

    @staticmethod
    def backward(ctx, grad):
        (r,) = ctx.saved_tensors
        return _vee_of_skew(grad @ r.transpose(-1, -2))


def _hat(w: torch.Tensor) -> torch.Tensor:
    z = torch.zeros_like(w[..., 0])
    x, y, c = w[..., 0], w[..., 1], w[..., 2]
    return torch.stack(
        [torch.stack([z, -c, y], -1), torch.stack([c, z, -x], -1), torch.stack([-y, x, z], -1)],
        -2,
    )


def _vee_of_skew(a: torch.Tensor) -> torch.Tensor:
    return torch.stack(
        [a[..., 2, 1] - a[..., 1, 2], a[..., 0, 2] - a[..., 2, 0], a[..., 1, 0] - a[..., 0, 1]],
        -1,
    )


# --- outputs inside containers ---------------------------------------------------------------


def plain_samples(seed: int) -> list[tuple[torch.Tensor]]:
    g = _gen(seed)
    return [(torch.randn(4, 5, generator=g, dtype=torch.float64),)]


class SinCos(torch.autograd.Function):
    """(sin x, cos x) as a tuple: both outputs are tracked."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return torch.sin(x), torch.cos(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])
        ctx.save_for_forward(inputs[0])

    @staticmethod
    def backward(ctx, g_sin, g_cos):
        (x,) = ctx.saved_tensors
        return g_sin * torch.cos(x) - g_cos * torch.sin(x)

    @staticmethod
    def jvp(ctx, x_t):
        (x,) = ctx.saved_tensors
        return x_t * torch.cos(x), -x_t * torch.sin(x)


class SinCosDict(SinCos):
    """Twin: returns {"sin": ..., "cos": ...}; autograd tracks neither, gradients are zero."""

    @staticmethod
    def forward(x):
        return {"sin": torch.sin(x), "cos": torch.cos(x)}


class SinCosList(SinCos):
    """Twin: returns [sin x, cos x], a list, which autograd does not track either."""

    @staticmethod
    def forward(x):
        return [torch.sin(x), torch.cos(x)]


# --- finite-difference steps -----------------------------------------------------------------


def mixed_scale_samples(seed: int) -> list[tuple[torch.Tensor]]:
    """float32 values of scale 1 and one element of 3e3 (a raw feature next to normalised ones)."""
    g = _gen(seed)
    x = torch.randn(4, 5, generator=g, dtype=torch.float64)
    x[0, 0] = 3e3
    return [(x.float(),)]


class Softplus(torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return torch.nn.functional.softplus(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])
        ctx.save_for_forward(inputs[0])

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * torch.sigmoid(x)

    @staticmethod
    def jvp(ctx, x_t):
        (x,) = ctx.saved_tensors
        return x_t * torch.sigmoid(x)


class SoftplusWrongJvp(Softplus):
    """Twin: the jvp's derivative has the sign of x flipped (sigmoid(-x))."""

    @staticmethod
    def jvp(ctx, x_t):
        (x,) = ctx.saved_tensors
        return x_t * torch.sigmoid(-x)


# --- the float64 reference of another function (sign gauge) ---------------------------------


def _svd_signs_differ(a: torch.Tensor) -> bool:
    u32 = torch.linalg.svd(a, full_matrices=False)[0]
    u64 = torch.linalg.svd(a.double(), full_matrices=False)[0]
    return bool(((u32.double() * u64).sum(-2) < 0).any())


def gauge_samples(seed: int) -> list[tuple[torch.Tensor]]:
    """float32 5x4 matrices where LAPACK picks other signs for the singular vectors at float32
    than at float64 (about one random matrix in 15): the float64 copy's U is another U."""
    g = _gen(seed)
    while True:
        a = torch.randn(5, 4, generator=g, dtype=torch.float64).float()
        if _svd_signs_differ(a):
            return [(a,)]


def _svd_u_backward(a: torch.Tensor, gu: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
    """The gradient of A from that of U (thin SVD, distinct singular values; Townsend 2016):
    U [(F o (U^T gU - gU^T U)) S] V^T + (I - U U^T) gU S^-1 V^T, F_ij = 1 / (s_j^2 - s_i^2)."""
    u, s, vh = torch.linalg.svd(a, full_matrices=False)
    s2 = s * s
    gap = s2.unsqueeze(-2) - s2.unsqueeze(-1)
    eye = torch.eye(s.shape[-1], dtype=a.dtype, device=a.device)
    f = torch.where(eye.bool(), torch.zeros_like(gap), 1 / (gap + eye))
    utgu = u.mT @ gu
    inner = f * (utgu - utgu.mT) * s.unsqueeze(-2)
    return scale * (u @ inner @ vh) + (gu - u @ utgu) / s.unsqueeze(-2) @ vh


class LeftSingularVectors(torch.autograd.Function):
    """U of the thin SVD (as a subspace-tracking library returns it), with the analytic
    backward, vmap rule generated."""

    generate_vmap_rule = True

    @staticmethod
    def forward(a):
        return torch.linalg.svd(a, full_matrices=False)[0]

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, grad):
        (a,) = ctx.saved_tensors
        return _svd_u_backward(a, grad)


class LeftSingularVectorsWrongBackward(LeftSingularVectors):
    """Twin: the rotation term of the backward is doubled (a symmetrised F missing its 1/2)."""

    @staticmethod
    def backward(ctx, grad):
        (a,) = ctx.saved_tensors
        return _svd_u_backward(a, grad, scale=2.0)


def vector_samples(seed: int) -> list[tuple[torch.Tensor]]:
    g = _gen(seed)
    return [(torch.randn(4, 5, generator=g, dtype=torch.float64).float(),)]


class SafeNormalize(torch.autograd.Function):
    """x / (|x| + eps) over the last dim with eps = 1e4 * finfo(dtype).eps, as code that guards
    a division at the dtype's own precision does: the float64 forward is another function
    (eps 2e-12 against 1.2e-3), smooth in both."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        eps = 1e4 * torch.finfo(x.dtype).eps
        return x / (x.norm(dim=-1, keepdim=True) + eps)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        r = x.norm(dim=-1, keepdim=True)
        n = r + 1e4 * torch.finfo(x.dtype).eps
        return grad / n - x * (grad * x).sum(-1, keepdim=True) / (r * n * n)


class SafeNormalizeWrongBackward(SafeNormalize):
    """Twin: the projection term lacks a factor 1 / n."""

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        r = x.norm(dim=-1, keepdim=True)
        n = r + 1e4 * torch.finfo(x.dtype).eps
        return grad / n - x * (grad * x).sum(-1, keepdim=True) / (r * n)


# --- a float32 leg for float64 samples -------------------------------------------------------


def logit_samples(seed: int) -> list[tuple[torch.Tensor]]:
    """float64 logits of scale 60 (a sharpened attention, an unnormalised classifier): each
    row is 60, 70, ..., 110 in a random order with some noise, so exp(x) exceeds float32's
    range (x > 88.7) in every row."""
    g = _gen(seed)
    steps = torch.stack([torch.randperm(6, generator=g) for _ in range(4)]).to(torch.float64)
    noise = torch.rand(4, 6, generator=g, dtype=torch.float64)
    return [(60 + 10 * steps + noise,)]


def _softmax(x: torch.Tensor) -> torch.Tensor:
    e = torch.exp(x - x.amax(-1, keepdim=True))
    return e / e.sum(-1, keepdim=True)


class Softmax(torch.autograd.Function):
    """softmax over the last dim; backward and jvp recompute it from the saved input."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return torch.softmax(x, -1)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])
        ctx.save_for_forward(inputs[0])

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        p = _softmax(x)
        return p * (grad - (grad * p).sum(-1, keepdim=True))

    @staticmethod
    def jvp(ctx, x_t):
        (x,) = ctx.saved_tensors
        p = _softmax(x)
        return p * (x_t - (x_t * p).sum(-1, keepdim=True))


class SoftmaxNoShift(Softmax):
    """Twin: backward and jvp recompute softmax without the max shift: exp(x) overflows in
    float32 for logits above 88, never in float64."""

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        e = torch.exp(x)
        p = e / e.sum(-1, keepdim=True)
        return p * (grad - (grad * p).sum(-1, keepdim=True))

    @staticmethod
    def jvp(ctx, x_t):
        (x,) = ctx.saved_tensors
        e = torch.exp(x)
        p = e / e.sum(-1, keepdim=True)
        return p * (x_t - (x_t * p).sum(-1, keepdim=True))


class Float64OnlySoftmax(Softmax):
    """Refuses anything but float64 (as numerically careful code does)."""

    @staticmethod
    def forward(x):
        assert x.dtype == torch.float64, f"needs float64 input, got {x.dtype}"
        return torch.softmax(x, -1)


# --- the hazard probe with unbatched arguments -----------------------------------------------


def pair_samples(seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Two 5x5 matrices: the probe's batch size is 5, and an unbatched matrix taken for a
    batched one broadcasts silently."""
    g = _gen(seed)
    return [
        (
            torch.randn(5, 5, generator=g, dtype=torch.float64),
            torch.randn(5, 5, generator=g, dtype=torch.float64),
        )
    ]


class MulBatchLast(torch.autograd.Function):
    """x * y; the rule moves batch dims last and gives an unbatched argument a size-1 dim."""

    @staticmethod
    def forward(x, y):
        return x * y

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)

    @staticmethod
    def backward(ctx, grad):
        x, y = ctx.saved_tensors
        return grad * y, grad * x

    @staticmethod
    def vmap(info, in_dims, x, y):
        def last(t, d):
            return t.unsqueeze(-1) if d is None else t.movedim(d, -1)

        return MulBatchLast.apply(last(x, in_dims[0]), last(y, in_dims[1])), -1


class MulBatchLastBySize(MulBatchLast):
    """Twin: the rule decides whether an argument is batched by its size
    (``t.shape[-1] == info.batch_size``), not by in_dims."""

    @staticmethod
    def vmap(info, in_dims, x, y):
        def last(t, d):
            t = t if d is None else t.movedim(d, -1)
            return t if t.shape[-1] == info.batch_size else t.unsqueeze(-1)

        return MulBatchLastBySize.apply(last(x, in_dims[0]), last(y, in_dims[1])), -1
