"""Ground truth for the autodiff checks: central finite differences in float64.

Everything here treats the function under test as a black box ``fn(*primals) ->
tuple of tensors``: it never calls a Function's ``backward`` or ``jvp``. The
primals are upcast to float64 before differencing, so the reference is as
accurate as the float64 forward allows, whatever dtype the check runs at.

The step
    Scaled per element: an element ``x_e`` is perturbed by about ``base * max(1, |x_e|)``.
    A direction ``t`` is split by the magnitude of the elements it moves (one part per
    decade of ``max(1, |x_e|)``, ``scale_groups``), ``J t`` is the sum of ``J t_g`` over
    the parts (it is linear in ``t``), and each part gets the step
    ``h_g = base * scale_g / |t_g|_inf`` with ``scale_g`` its largest ``max(1, |x_e|)``.
    So one element of size 3e3 does not make the step ~1 for elements of size 1 (a
    softplus over values of scale 1 would then be differenced across its curvature).
    ``base`` is chosen per dtype the forward actually computes in (float64 normally:
    the outputs' dtype at float64 inputs), see ``BASE_STEP``; an entry may fix it
    (``Tolerances.fd_step``).

The formula
    Central differences with one Richardson extrapolation,
    ``(4 D(h/2) - D(h)) / 3`` where ``D(h) = (f(x + h t) - f(x - h t)) / 2h``:
    the truncation error is O(h^4), so a fairly large step (kinder to roundoff)
    still gives a float64 reference good to about 1e-11 relative for smooth
    functions. A third difference at ``h/4`` gives each element its error estimate,
    or marks it not comparable where the differences do not converge (a kink within
    the step): ``harness.checks.fd_error``; the reference tensors carry it.

Jacobians are built column by column (one direction per input element, each
with its own magnitude-scaled step). A vector-Jacobian product is either
``J^T c`` from the full Jacobian (small problems) or checked through the
identity ``<J t, c> = <t, J^T c>`` with random directions ``t`` (large ones).
"""

from __future__ import annotations

import math
import types
from collections.abc import Callable, Sequence
from typing import Any

import torch

from harness.checks import fd_error, fd_precision

#: Base relative step per dtype the forward computes in (with Richardson extrapolation).
BASE_STEP: dict[torch.dtype, float] = {
    torch.float64: 1e-3,
    torch.float32: 3e-2,
    torch.float16: 1e-1,
    torch.bfloat16: 1e-1,
}

#: The name references carry in reports.
FD_REFERENCE = "finite differences (float64)"

Fn = Callable[..., Sequence[torch.Tensor]]


def upcast(value: Any) -> Any:
    """A detached float64 (complex128) copy of a floating (complex) tensor; a float64 copy
    of an ``nn.Module`` (its floating parameters and buffers), also behind a bound method
    (a recorded call's live values); other values as is."""
    if isinstance(value, torch.nn.Module):
        import copy

        return copy.deepcopy(value).to(torch.float64)
    if isinstance(value, types.MethodType) and isinstance(value.__self__, torch.nn.Module):
        return types.MethodType(value.__func__, upcast(value.__self__))
    if isinstance(value, torch.Tensor):
        value = value.detach()
        if value.is_complex():
            return value.to(torch.complex128).clone()
        if value.is_floating_point():
            return value.to(torch.float64).clone()
        return value.clone()
    return value


def is_differentiable_dtype(t: Any) -> bool:
    return isinstance(t, torch.Tensor) and (t.is_floating_point() or t.is_complex())


def base_step(outputs: Sequence[Any], override: float | None = None) -> float:
    """The base step for a forward whose float64 evaluation gave ``outputs``."""
    if override is not None:
        return override
    steps = [
        BASE_STEP.get(o.dtype, BASE_STEP[torch.float32])
        for o in outputs
        if isinstance(o, torch.Tensor) and o.is_floating_point()
    ]
    return max(steps, default=BASE_STEP[torch.float64])


def _wide(t: torch.Tensor) -> torch.Tensor:
    """float64, or complex128 for a complex tensor."""
    return t.detach().to(torch.complex128 if t.is_complex() else torch.float64)


def _eval(fn: Fn, primals: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    with torch.no_grad():
        return [_wide(o) for o in fn(*primals)]


def _inf_norm(ts: Sequence[torch.Tensor | None]) -> float:
    return max((float(t.abs().max()) for t in ts if t is not None and t.numel()), default=0.0)


def _central(
    fn: Fn,
    primals: Sequence[torch.Tensor],
    tangents: Sequence[torch.Tensor | None],
    h: float,
) -> tuple[list[torch.Tensor], list[torch.Tensor], list[torch.Tensor]]:
    """``D(h)`` per output, the size of the values it differences (for the rounding), and
    ``f(x + h t) + f(x - h t)`` (for the one-sided slopes)."""
    plus = [x if t is None else x + h * t for x, t in zip(primals, tangents)]
    minus = [x if t is None else x - h * t for x, t in zip(primals, tangents)]
    diffs, sizes, sums = [], [], []
    for a, b in zip(_eval(fn, plus), _eval(fn, minus)):
        diffs.append((a - b) / (2 * h))
        sizes.append(torch.maximum(a.abs(), b.abs()))
        sums.append(a + b)
    return diffs, sizes, sums


def _estimated(
    fn: Fn,
    primals: Sequence[torch.Tensor],
    tangents: Sequence[torch.Tensor | None],
    h: float,
    eps: float,
    at: Sequence[torch.Tensor],
) -> list[tuple[torch.Tensor, fd_error.Estimate]]:
    """The Richardson difference along ``tangents`` per output, with its error estimate
    (three central differences: h, h/2, h/4; see ``harness.checks.fd_error``); ``at``: the
    outputs at the point itself, for the one-sided slopes that find a kink right there."""
    d1, sizes, _ = _central(fn, primals, tangents, h)
    d2, _, s2 = _central(fn, primals, tangents, h / 2)
    d3, _, s3 = _central(fn, primals, tangents, h / 4)
    found = []
    for j in range(len(d1)):
        f0 = at[j] if j < len(at) else None
        bends = None
        if f0 is not None and f0.shape == s2[j].shape and f0.dtype == s2[j].dtype:
            # (f(x+s) - 2 f(x) + f(x-s)) / s: the one-sided slopes' difference at step s
            bends = ((s2[j] - 2 * f0) / (h / 2), (s3[j] - 2 * f0) / (h / 4))
        found.append(fd_error.richardson(d1[j], d2[j], d3[j], sizes[j], eps, h, bends))
    return found


def directional(
    fn: Fn,
    primals: Sequence[torch.Tensor],
    tangents: Sequence[torch.Tensor | None],
    *,
    step: float | None = None,
) -> list[torch.Tensor]:
    """The Jacobian-vector product ``J t`` of ``fn`` at ``primals`` by finite differences.

    ``primals`` must already be float64 (see ``upcast``); a ``None`` tangent
    means that input is held fixed. Returns one float64 tensor per output.
    Complex primals take complex tangents and complex outputs give complex
    derivatives: ``J t`` of the map on C = R^2 (what torch's forward mode computes).
    """
    primals = list(primals)
    tangents = held_fixed(primals, [None if t is None else _wide(t) for t in tangents])
    with torch.no_grad():
        raw = list(fn(*primals))
    outputs = [_wide(o) for o in raw]
    if _inf_norm(tangents) == 0.0:
        return [torch.zeros_like(o) for o in outputs]
    eps, base = _precision(fn, primals, tangents, outputs, raw, step)
    total: list[tuple[torch.Tensor, fd_error.Estimate | None]] | None = None
    for scale, part in scale_groups(primals, tangents):
        h = base * scale / _inf_norm(part)
        found = _estimated(fn, primals, part, h, eps, outputs)
        if total is None:
            total = [(v, e) for v, e in found]
        else:
            total = [(a + v, fd_error.add(ea, e)) for (a, ea), (v, e) in zip(total, found)]
    assert total is not None  # some tangent is non-zero
    return [fd_error.attach(v, e) if e is not None else v for v, e in total]


def _precision(
    fn: Fn,
    primals: Sequence[torch.Tensor],
    moved: Sequence[torch.Tensor | None],
    outputs: list[torch.Tensor],
    raw: Sequence[Any],
    step: float | None,
) -> tuple[float, float]:
    """The precision the forward computes at (its outputs' epsilon, or coarser where
    measured: ``fd_precision``) and the base step for it (a fixed ``step`` is kept)."""
    eps = fd_error.eps_of(raw, fn)
    base = base_step(raw, step)
    if step is not None:
        return eps, base
    found = fd_precision.measured_eps(fn, _eval, primals, moved, outputs, base / 4, eps)
    if found > eps:
        base = max(base, BASE_STEP[fd_precision.step_dtype(found)])
    return found, base


def held_fixed(
    primals: Sequence[torch.Tensor], tangents: Sequence[torch.Tensor | None]
) -> list[torch.Tensor | None]:
    """``tangents`` with 0 where the primal is not finite (a masked logit's ``-inf``, a NaN):
    finite differences step only finite elements. ``x + h t`` is ``x`` there for every
    finite step, so the reference's derivative in them is 0: the limit of a derivative where
    the outputs stay finite (a forward that converges as ``x -> -inf`` has a derivative
    that goes to 0); ``nonfinite_inputs_note`` says so in the case."""
    out: list[torch.Tensor | None] = []
    for x, t in zip(primals, tangents):
        if t is None or not isinstance(x, torch.Tensor) or x.shape != t.shape:
            out.append(t)
            continue
        finite = torch.isfinite(x.detach())
        out.append(t if bool(finite.all()) else torch.where(finite, t, torch.zeros_like(t)))
    return out


def nonfinite_inputs_note(primals: Sequence[Any], names: Sequence[str] | None = None) -> str:
    """The case's line for differentiated inputs that hold non-finite elements ("" if none)."""
    parts = []
    for i, x in enumerate(primals):
        if not is_differentiable_dtype(x) or x.numel() == 0:
            continue
        bad = ~torch.isfinite(x.detach())
        count = int(bad.sum())
        if not count:
            continue
        kinds = sorted({_nonfinite_kind(v) for v in x.detach()[bad].reshape(-1)[:64]})
        name = names[i] if names is not None and i < len(names) else f"input {i}"
        parts.append(f"{name} holds {count} non-finite element(s) ({', '.join(kinds)})")
    if not parts:
        return ""
    return (
        "; ".join(parts)
        + ": where the reference is finite differences, they step only finite elements and "
        "hold these fixed, so their derivative is compared with 0 (the limit where the "
        "outputs stay finite), not differentiated"
    )


def _nonfinite_kind(v: torch.Tensor) -> str:
    z = complex(v)
    if math.isnan(z.real) or math.isnan(z.imag):
        return "nan"
    return "-inf" if z.real < 0 or z.imag < 0 else "inf"


def _decade(x: torch.Tensor) -> torch.Tensor:
    """``floor(log10(max(1, |x_e|)))`` per element (0 where ``x_e`` is not finite)."""
    magnitude = x.detach().abs().to(torch.float64).clamp(min=1.0)
    return torch.nan_to_num(torch.floor(torch.log10(magnitude)), nan=0.0, posinf=0.0)


def scale_groups(
    primals: Sequence[torch.Tensor], tangents: Sequence[torch.Tensor | None]
) -> list[tuple[float, list[torch.Tensor | None]]]:
    """The direction split by the magnitude of the elements it moves: one part per decade of
    ``max(1, |x_e|)`` (elements of size up to 10 are one part), each with its largest
    ``max(1, |x_e|)``. The parts sum to the direction; parts with a zero tangent are left out."""
    decades = [None if t is None else _decade(x) for x, t in zip(primals, tangents)]
    # float() of each element, not .tolist(): tensor subclasses (certify --subclass) refuse it
    found = sorted({float(k) for d in decades if d is not None for k in d.unique()})
    groups: list[tuple[float, list[torch.Tensor | None]]] = []
    for k in found:
        part: list[torch.Tensor | None] = []
        scale = 1.0
        for x, t, d in zip(primals, tangents, decades):
            if t is None or d is None:
                part.append(None)
                continue
            mask = d == k
            if not bool((mask & (t != 0)).any()):
                part.append(None)
                continue
            part.append(torch.where(mask, t, torch.zeros_like(t)))
            moved = x.detach().abs().to(torch.float64)[mask & (t != 0)]
            scale = max(scale, float(moved.max()) if moved.numel() else 1.0)
        if any(p is not None for p in part):
            groups.append((scale, part))
    return groups


def jacobian(
    fn: Fn,
    primals: Sequence[torch.Tensor],
    wrt: Sequence[int] | None = None,
    *,
    step: float | None = None,
) -> list[list[torch.Tensor]]:
    """The Jacobian blocks ``J[j][i]`` (shape ``out_j.shape + in_i.shape``) by finite differences.

    One column per element of each input in ``wrt`` (default: all), each with a
    step scaled to that element's magnitude. ``primals`` must be float64.
    """
    primals = list(primals)
    wrt = list(range(len(primals))) if wrt is None else list(wrt)
    if any(primals[i].is_complex() for i in wrt):
        raise ValueError("jacobian: complex inputs need two columns per element; use directional")
    with torch.no_grad():
        ref_out = list(fn(*primals))
    outputs = [o.detach().to(torch.float64) for o in ref_out]
    moved = [x if i in wrt else None for i, x in enumerate(primals)]
    eps, base = _precision(fn, primals, moved, outputs, ref_out, step)
    blocks: list[list[torch.Tensor]] = [[] for _ in outputs]
    for i in wrt:
        x = primals[i]
        cols: list[list[tuple[torch.Tensor, fd_error.Estimate]]] = [[] for _ in outputs]
        flat = x.reshape(-1)
        for e in range(x.numel()):
            if not math.isfinite(abs(complex(flat[e]))):
                # held fixed (``held_fixed``): f(x + h e) is f(x) for every finite h
                for j, o in enumerate(outputs):
                    zero = torch.zeros_like(o)
                    cols[j].append((zero, fd_error.Estimate(zero, zero)))
                continue
            h = base * max(1.0, abs(float(flat[e])))
            tangent = torch.zeros_like(x).reshape(-1)
            tangent[e] = 1.0
            tangents: list[torch.Tensor | None] = [None] * len(primals)
            tangents[i] = tangent.reshape(x.shape)
            for j, column in enumerate(_estimated(fn, primals, tangents, h, eps, outputs)):
                cols[j].append(column)
        for j, o in enumerate(outputs):
            shape = (*o.shape, *x.shape)
            if cols[j]:
                block = torch.stack([v for v, _ in cols[j]], dim=-1).reshape(shape)
                estimate = fd_error.Estimate(
                    torch.stack([est.error for _, est in cols[j]], dim=-1).reshape(shape),
                    torch.stack([est.spread for _, est in cols[j]], dim=-1).reshape(shape),
                )
                fd_error.attach(block, estimate)
            else:
                block = o.new_zeros(shape)
            blocks[j].append(block)
    return blocks


def jvp_from_jacobian(
    blocks: Sequence[Sequence[torch.Tensor]],
    tangents: Sequence[torch.Tensor | None],
    input_shapes: Sequence[torch.Size],
) -> list[torch.Tensor]:
    """``J t`` per output from Jacobian blocks (``None`` tangents count as zero)."""
    out = []
    for row in blocks:
        in_rank = len(input_shapes[0]) if input_shapes else 0
        acc = torch.zeros(row[0].shape[: row[0].dim() - in_rank], dtype=torch.float64)
        est: fd_error.Estimate | None = None
        for block, t in zip(row, tangents):
            if t is not None:
                acc = acc + torch.tensordot(block, t.detach().to(torch.float64), dims=t.dim())
                part = fd_error.tensordot(t, block, t.dim(), coef_first=False)
                est = fd_error.add(est, part)
        out.append(fd_error.attach(acc, est) if est is not None else acc)
    return out


def vjp_from_jacobian(
    blocks: Sequence[Sequence[torch.Tensor]],
    cotangents: Sequence[torch.Tensor | None],
    input_shapes: Sequence[torch.Size],
) -> list[torch.Tensor]:
    """``J^T c`` per input from Jacobian blocks (``None`` cotangents count as zero)."""
    grads = []
    for i, shape in enumerate(input_shapes):
        acc = torch.zeros(shape, dtype=torch.float64)
        est: fd_error.Estimate | None = None
        for row, c in zip(blocks, cotangents):
            if c is None:
                continue
            acc = acc + torch.tensordot(c.detach().to(torch.float64), row[i], dims=c.dim())
            est = fd_error.add(est, fd_error.tensordot(c, row[i], c.dim(), coef_first=True))
        grads.append(fd_error.attach(acc, est) if est is not None else acc)
    return grads


def dot(a: Sequence[torch.Tensor | None], b: Sequence[torch.Tensor | None]) -> float:
    """``sum_k <a_k, b_k>`` in float64 (``None`` counts as zero); for complex tensors the
    real inner product ``Re sum conj(a) b`` of C = R^2, under which torch's vjp (conjugate
    Wirtinger convention) is the adjoint of its jvp."""
    total = 0.0
    for x, y in zip(a, b):
        if x is None or y is None:
            continue
        xw, yw = _wide(x), _wide(y)
        if xw.is_complex() or yw.is_complex():
            total += float((xw.conj() * yw).sum().real)
        else:
            total += float((xw * yw).sum())
    return total


def abs_dot(a: Sequence[torch.Tensor | None], b: Sequence[torch.Tensor | None]) -> float:
    """``sum_k <|a_k|, |b_k|>``: the scale of ``dot(a, b)`` for tolerances."""
    return dot(
        [None if x is None else x.abs() for x in a], [None if y is None else y.abs() for y in b]
    )


def dot_estimate(
    jt: Sequence[torch.Tensor | None], c: Sequence[torch.Tensor | None]
) -> fd_error.Scalar:
    """``dot(jt, c)`` for a finite-difference ``jt``, with the error estimate it carries
    (a ``harness.checks.fd_error.Scalar``)."""
    return fd_error.dot(jt, c, dot(jt, c))
