"""Planted-bug Functions for the autodiff checks, each next to its correct twin.

Every bug is one realistic mistake in a custom Function; its twin is the same
Function with the mistake fixed. ``PAIRS`` lists (bug entry, twin entry, the
check that must flag the bug, words its message must contain). Samples are
hazard-free (dims 4, 5, 6; no 2 or 3) and drawn from the seed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from autograd_function_db._sampling import Maker
from autograd_function_db.entry import Entry, Sample, entry


def unary(seed: int, dtype: torch.dtype, device: str) -> list[Sample]:
    m = Maker(seed, dtype, device)
    return [Sample((m.randn(5),), "1d"), Sample((m.randn(4, 5),), "2d")]


def binary(seed: int, dtype: torch.dtype, device: str) -> list[Sample]:
    m = Maker(seed, dtype, device)
    return [
        Sample((m.randn(5), m.randn(5)), "1d"),
        Sample((m.randn(4, 5), m.randn(4, 5)), "2d"),
    ]


# --- a correct reference Function: sin with backward, jvp and a generated vmap rule ---------


class SinRule:
    """setup_context, backward and jvp of sin, shared by the correct sin Functions below (a
    mixin, not a Function: Sin has a generated vmap rule, NumpySin its own, SinNoVmap none)."""

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])
        ctx.save_for_forward(inputs[0])

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * torch.cos(x)

    @staticmethod
    def jvp(ctx, x_t):
        (x,) = ctx.saved_tensors
        return x_t * torch.cos(x)


class Sin(SinRule, torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return torch.sin(x)


# 1. backward scaled by a constant ---------------------------------------------------------


class ScaledBackward(Sin):
    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return 2 * grad * torch.cos(x)


# 2. gradients of two inputs swapped --------------------------------------------------------


class MulSquare(torch.autograd.Function):
    """x * y**2 (same shapes)."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x, y):
        return x * y**2

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)
        ctx.save_for_forward(*inputs)

    @staticmethod
    def backward(ctx, grad):
        x, y = ctx.saved_tensors
        return grad * y**2, 2 * grad * x * y

    @staticmethod
    def jvp(ctx, x_t, y_t):
        x, y = ctx.saved_tensors
        return x_t * y**2 + 2 * x * y * y_t


class SwappedGrads(MulSquare):
    @staticmethod
    def backward(ctx, grad):
        x, y = ctx.saved_tensors
        return 2 * grad * x * y, grad * y**2


# 3. the second output's gradient ignored ---------------------------------------------------


class SinCos(torch.autograd.Function):
    """x -> (sin x, cos x)."""

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


class IgnoresSecondGrad(SinCos):
    @staticmethod
    def backward(ctx, g_sin, g_cos):
        (x,) = ctx.saved_tensors
        return g_sin * torch.cos(x)


# 4. jvp with the wrong sign ----------------------------------------------------------------


class WrongSignJvp(Sin):
    @staticmethod
    def jvp(ctx, x_t):
        (x,) = ctx.saved_tensors
        return -x_t * torch.cos(x)


# 5. jvp that assumes every tangent is present ---------------------------------------------


class MulNoMaterialize(torch.autograd.Function):
    """x * y with set_materialize_grads(False): absent tangents/gradients arrive as None."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x, y):
        return x * y

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(*inputs)
        ctx.save_for_forward(*inputs)

    @staticmethod
    def backward(ctx, grad):
        x, y = ctx.saved_tensors
        if grad is None:
            return None, None
        return grad * y, grad * x

    @staticmethod
    def jvp(ctx, x_t, y_t):
        x, y = ctx.saved_tensors
        out = torch.zeros_like(x)
        if x_t is not None:
            out = out + x_t * y
        if y_t is not None:
            out = out + x * y_t
        return out


class JvpAssumesAllTangents(MulNoMaterialize):
    @staticmethod
    def jvp(ctx, x_t, y_t):
        x, y = ctx.saved_tensors
        return x_t * y + x * y_t


# 6. save_for_forward forgotten ------------------------------------------------------------


class ForgetsSaveForForward(Sin):
    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])


# 7. setup_context saves the output where the input was meant --------------------------------


class SavesOutputForInput(Sin):
    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(output)
        ctx.save_for_forward(inputs[0])


# 8. backward mutates grad_output in place --------------------------------------------------


class MutatesGradOutput(Sin):
    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        grad.mul_(torch.cos(x))
        return grad


# 9. forward mutates its input --------------------------------------------------------------


class NumpyDouble(torch.autograd.Function):
    """2 * x through numpy, with a hand-written vmap rule."""

    @staticmethod
    def forward(x):
        return torch.as_tensor(np.multiply(x.detach().cpu().numpy(), 2.0))

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, grad):
        return 2 * grad

    @staticmethod
    def jvp(ctx, x_t):
        return 2 * x_t

    @staticmethod
    def vmap(info, in_dims, x):
        return NumpyDouble.apply(x), in_dims[0]


class MutatesInput(NumpyDouble):
    @staticmethod
    def forward(x):
        xn = x.detach().cpu().numpy()
        np.multiply(xn, 2.0, out=xn)  # writes into x's storage
        return torch.as_tensor(xn.copy())

    @staticmethod
    def vmap(info, in_dims, x):
        return MutatesInput.apply(x), in_dims[0]


# 10. once_differentiable with double backward claimed ---------------------------------------


class Cube(torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return x**3

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])
        ctx.save_for_forward(inputs[0])

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return 3 * grad * x**2

    @staticmethod
    def jvp(ctx, x_t):
        (x,) = ctx.saved_tensors
        return 3 * x_t * x**2


class OnceDifferentiableCube(Cube):
    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return 3 * grad * x**2


# 11. backward through numpy (fine for vjp, not under vmap) -----------------------------------


class NumpyBackward(Sin):
    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        g = grad.detach().cpu().numpy() * np.cos(x.detach().cpu().numpy())
        return torch.as_tensor(g)


# 12. backward correct only for contiguous inputs --------------------------------------------


class ContiguousOnlyBackward(Sin):
    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        # Reads grad's storage as if it were contiguous (what a C extension that ignores
        # strides does): right for contiguous grad, scrambled for any other layout.
        strides = torch.empty(grad.shape).stride()
        flat = grad.as_strided(grad.shape, strides, grad.storage_offset())
        return flat * torch.cos(x)


# 13. a vmap rule that computes outside autograd (numpy), bypassing the Function ---------------


class NumpySin(SinRule, torch.autograd.Function):
    """sin through numpy; the vmap rule calls the Function again on the batched tensor."""

    @staticmethod
    def forward(x):
        return torch.as_tensor(np.sin(x.detach().cpu().numpy()))

    @staticmethod
    def vmap(info, in_dims, x):
        return NumpySin.apply(x), in_dims[0]


class RuleBypassesFunction(NumpySin):
    @staticmethod
    def vmap(info, in_dims, x):
        # Right values, but computed outside autograd: the result has no grad_fn.
        return torch.as_tensor(np.sin(x.detach().cpu().numpy())), in_dims[0]


# --- capabilities and their absence ----------------------------------------------------------


class SinNoJvp(torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return torch.sin(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * torch.cos(x)


class SinNoVmap(SinRule, torch.autograd.Function):
    @staticmethod
    def forward(x):
        return torch.sin(x)


class LegacySin(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.sin(x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * torch.cos(x)


# --- non-differentiable outputs and the in-place protocol ------------------------------------


class SinAndFloor(torch.autograd.Function):
    """(sin x, floor x): the floor is a float output with no useful derivative."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return torch.sin(x), torch.floor(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.mark_non_differentiable(output[1])
        ctx.save_for_backward(inputs[0])
        ctx.save_for_forward(inputs[0])

    @staticmethod
    def backward(ctx, g, _g_floor):
        (x,) = ctx.saved_tensors
        return g * torch.cos(x)

    @staticmethod
    def jvp(ctx, x_t):
        (x,) = ctx.saved_tensors
        return x_t * torch.cos(x), None


class FloorNotMarked(SinAndFloor):
    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])
        ctx.save_for_forward(inputs[0])

    @staticmethod
    def jvp(ctx, x_t):
        (x,) = ctx.saved_tensors
        return x_t * torch.cos(x), torch.zeros_like(x_t)


class Exp_(torch.autograd.Function):
    """x.exp_() in torch, mark_dirty."""

    @staticmethod
    def forward(x):
        return x.exp_()

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.mark_dirty(inputs[0])
        ctx.save_for_backward(output)
        ctx.save_for_forward(output)

    @staticmethod
    def backward(ctx, grad):
        (out,) = ctx.saved_tensors
        return grad * out

    @staticmethod
    def jvp(ctx, x_t):
        (out,) = ctx.saved_tensors
        return x_t.mul_(out)

    @staticmethod
    def vmap(info, in_dims, x):
        Exp_.apply(x)
        return x, in_dims[0]


class ExpNotInPlace(torch.autograd.Function):
    """Declared in place, but returns a new tensor and leaves the input alone."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return torch.exp(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(output)
        ctx.save_for_forward(output)

    @staticmethod
    def backward(ctx, grad):
        (out,) = ctx.saved_tensors
        return grad * out

    @staticmethod
    def jvp(ctx, x_t):
        (out,) = ctx.saved_tensors
        return x_t * out


# --- gradient by design ----------------------------------------------------------------------


class StraightThroughRound(torch.autograd.Function):
    """round(x) with the identity as its gradient (a straight-through estimator)."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return torch.round(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, grad):
        return grad

    @staticmethod
    def jvp(ctx, x_t):
        return x_t


class StraightThroughBadJvp(StraightThroughRound):
    """The jvp disagrees with the (by design) backward."""

    @staticmethod
    def jvp(ctx, x_t):
        return 2 * x_t


# --- the table -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pair:
    bug: Entry
    twin: Entry
    check: str
    words: tuple[str, ...]
    statuses: tuple[str, ...] = ("fail",)


def _e(name: str, cls: type, samples: Any = unary, **kw: Any) -> Entry:
    return entry(name, cls, samples, **kw)


PAIRS: dict[str, Pair] = {
    "backward scaled by a constant": Pair(
        _e("ScaledBackward", ScaledBackward),
        _e("Sin", Sin),
        "vjp",
        ("vjp: all inputs, all outputs", "finite differences", "abs error", "rtol="),
    ),
    "gradients of two inputs swapped": Pair(
        _e("SwappedGrads", SwappedGrads, binary),
        _e("MulSquare", MulSquare, binary),
        "vjp",
        ("grad of input 0", "grad of input 1", "finite differences", "wrong order"),
    ),
    "second output's gradient ignored": Pair(
        _e("IgnoresSecondGrad", IgnoresSecondGrad),
        _e("SinCos", SinCos),
        "vjp",
        ("output 1",),
    ),
    "jvp with the wrong sign": Pair(
        _e("WrongSignJvp", WrongSignJvp),
        _e("Sin", Sin),
        "jvp",
        ("jvp: all inputs", "tangent of output 0", "finite differences"),
    ),
    "jvp assumes every tangent is present": Pair(
        _e("JvpAssumesAllTangents", JvpAssumesAllTangents, binary),
        _e("MulNoMaterialize", MulNoMaterialize, binary),
        "jvp",
        ("alone", "NoneType"),
        ("error",),
    ),
    "save_for_forward forgotten": Pair(
        _e("ForgetsSaveForForward", ForgetsSaveForForward),
        _e("Sin", Sin),
        "jvp",
        ("jvp: all inputs", "torch.func.jvp"),
        ("error", "fail"),
    ),
    "setup_context saves the output for the input": Pair(
        _e("SavesOutputForInput", SavesOutputForInput),
        _e("Sin", Sin),
        "vjp",
        ("grad of input 0", "finite differences"),
    ),
    "backward mutates grad_output": Pair(
        _e("MutatesGradOutput", MutatesGradOutput),
        _e("Sin", Sin),
        "vjp",
        ("cotangent of output 0 was modified in place", "grad_output"),
    ),
    "forward mutates its input": Pair(
        _e("MutatesInput", MutatesInput),
        _e("NumpyDouble", NumpyDouble),
        "vjp",
        ("input 0 was modified", "inplace_args"),
    ),
    "once_differentiable with double backward claimed": Pair(
        _e("OnceDifferentiableCube", OnceDifferentiableCube, double_backward=True),
        _e("Cube", Cube),
        "vjp_of_vjp",
        ("once_differentiable", "silently returns zeros", "got 0"),
    ),
    "backward through numpy under vmap": Pair(
        _e("NumpyBackward", NumpyBackward),
        _e("Sin", Sin),
        "vmap_of_vjp",
        ("vmap_of_vjp", "cotangents="),
        ("error",),
    ),
    "backward correct only for contiguous grads": Pair(
        _e("ContiguousOnlyBackward", ContiguousOnlyBackward),
        _e("Sin", Sin),
        "vjp",
        ("non-contiguous",),
    ),
    "vmap rule computes outside autograd": Pair(
        _e("RuleBypassesFunction", RuleBypassesFunction),
        _e("NumpySin", NumpySin),
        "grad_of_vmap",
        ("grad_of_vmap in_dims=", "data pointer"),
        ("error", "fail"),
    ),
    "declared non-differentiable output requires grad": Pair(
        _e("FloorNotMarked", FloorNotMarked, nondiff_outputs=(1,)),
        _e("SinAndFloor", SinAndFloor, nondiff_outputs=(1,)),
        "vjp",
        ("output 1 is declared non-differentiable", "mark_non_differentiable"),
    ),
    "declared in place but returns a new tensor": Pair(
        _e("ExpNotInPlace", ExpNotInPlace, inplace_args=(0,)),
        _e("Exp_", Exp_, inplace_args=(0,)),
        "vjp",
        ("in-place protocol", "mark_dirty"),
    ),
    "straight-through jvp disagrees with its backward": Pair(
        _e("StraightThroughBadJvp", StraightThroughBadJvp, gradient="custom"),
        _e("StraightThroughRound", StraightThroughRound, gradient="custom"),
        "jvp",
        ("eager backward (gradient=custom)",),
    ),
}
