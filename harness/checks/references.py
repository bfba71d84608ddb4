"""The autodiff references, never the thing being checked: eager autograd (no torch.func) and
float64 finite-difference Jacobians, with the memory budget that bounds them.

* ``eager_vjp`` / ``eager_jvp``: ``torch.autograd.grad`` and ``torch.autograd.forward_ad``,
  the references of the composite checks (per slice) and of ``gradient="custom"`` entries.
* ``fd_jacobian`` / ``reference_jacobian``: central differences in float64, cached per
  sample; a Jacobian past ``MEMORY_BUDGET`` is never built (the check is ``unsupported``).
* ``identity_problems``: <J t, c> = <t, J^T c> with random directions, for large inputs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
import torch.autograd.forward_ad as fwAD

from autograd_function_db.entry import Entry
from harness.checks import fd_error
from harness.checks import finite_diff as fd
from harness.checks import tolerances as dtype_tolerance
from harness.checks.autodiff_refs import (
    EAGER_CUSTOM_REFERENCE,
    FULL_JACOBIAN_MAX,
    MEMORY_BUDGET,
    DiffView,
    Findings,
    attempt,
    is_custom,
    noncontiguous,
    restricted,
)
from harness.checks.catalogue import (
    CaseContext,
    NonFiniteSample,
    Unsupported,
)
from harness.checks.compare import nonfinite_message

# --- eager references (no torch.func) --------------------------------------------------------


def grad_where_connected(
    outputs: Sequence[Any],
    inputs: Sequence[torch.Tensor],
    cotangents: Sequence[torch.Tensor | None],
    *,
    create_graph: bool = False,
) -> tuple[torch.Tensor, ...] | None:
    """``torch.autograd.grad`` over the (output, cotangent) pairs whose output is connected
    to the graph (None when none is); inputs the outputs do not use get zeros."""
    pairs = [
        (o, c)
        for o, c in zip(outputs, cotangents)
        if c is not None and isinstance(o, torch.Tensor) and o.requires_grad
    ]
    if not pairs:
        return None
    try:
        return torch.autograd.grad(
            [o for o, _ in pairs],
            inputs,
            [c for _, c in pairs],
            allow_unused=True,
            materialize_grads=True,
            create_graph=create_graph,
        )
    except RuntimeError as e:
        if not refuses_grad(e):
            raise
    return _through_backward(pairs, inputs, create_graph)


def refuses_grad(error: BaseException) -> bool:
    """The Function refuses ``torch.autograd.grad`` but not ``.backward()`` (reentrant
    checkpointing: "not compatible with .grad(), please use .backward()")."""
    text = str(error)
    return ".grad()" in text and "backward()" in text


def _through_backward(
    pairs: Sequence[tuple[torch.Tensor, torch.Tensor]],
    inputs: Sequence[torch.Tensor],
    create_graph: bool,
) -> tuple[torch.Tensor, ...]:
    """The same gradients through ``torch.autograd.backward`` (what such a Function's users
    call), read from the inputs' ``.grad`` and their earlier ``.grad`` put back."""
    kept = [x.grad for x in inputs]
    for x in inputs:
        x.grad = None
        if not x.is_leaf:
            x.retain_grad()
    try:
        torch.autograd.backward(
            [o for o, _ in pairs], [c for _, c in pairs], create_graph=create_graph
        )
        return tuple(torch.zeros_like(x) if x.grad is None else x.grad for x in inputs)
    finally:
        for x, g in zip(inputs, kept):
            x.grad = g


def fresh_leaves(args: Sequence[Any], wrt: Sequence[int], strided: bool) -> list[torch.Tensor]:
    """Fresh leaves for the arguments at ``wrt`` (non-contiguous ones when ``strided``)."""
    out = []
    for i in wrt:
        a = args[i].detach()
        leaf = noncontiguous(a) if strided else a.clone()
        out.append(leaf.requires_grad_(True))
    return out


def eager_vjp(
    entry: Entry,
    args: Sequence[Any],
    wrt: Sequence[int],
    outputs: Sequence[int],
    cotangents: Sequence[torch.Tensor | None],
    *,
    create_graph: bool = False,
) -> tuple[torch.Tensor, ...]:
    """``torch.autograd.grad`` of the selected outputs w.r.t. fresh leaves at ``wrt``.

    With ``create_graph`` the tensors at ``wrt`` are used as they are (the caller's
    leaves), so the result can be differentiated again."""
    with torch.enable_grad():
        if create_graph:
            leaves = [args[i] for i in wrt]
        else:
            leaves = [args[i].detach().clone().requires_grad_(True) for i in wrt]
        outs = restricted(entry, args, wrt, outputs)(*leaves)
        grads = grad_where_connected(outs, leaves, cotangents, create_graph=create_graph)
        if grads is None:
            return tuple(torch.zeros_like(x) for x in leaves)
    return tuple(grads if create_graph else (g.detach() for g in grads))


def eager_jvp(
    entry: Entry,
    args: Sequence[Any],
    wrt: Sequence[int],
    outputs: Sequence[int],
    tangents: Sequence[torch.Tensor],
) -> tuple[torch.Tensor, ...]:
    """Primal outputs then their tangents, by eager forward-mode AD (dual tensors)."""
    with fwAD.dual_level():
        duals = [fwAD.make_dual(args[i].detach().clone(), t) for i, t in zip(wrt, tangents)]
        outs = restricted(entry, args, wrt, outputs)(*duals)
        primal, tangent = [], []
        for o in outs:
            p, t = fwAD.unpack_dual(o)
            primal.append(p.detach().clone())
            tangent.append(torch.zeros_like(p) if t is None else t.detach().clone())
    return (*primal, *tangent)


def eager_jacobian(view: DiffView) -> list[list[torch.Tensor]]:
    """Jacobian blocks [output][input] from the Function's own eager backward, row by row."""
    blocks: list[list[torch.Tensor]] = []
    shapes = view.input_shapes
    for j in view.outs:
        out = view.outputs[j]
        rows: list[tuple[torch.Tensor, ...]] = []
        for e in range(out.numel()):
            cot = torch.zeros(out.numel(), dtype=out.dtype, device=out.device)
            cot[e] = 1
            cots: list[torch.Tensor | None] = [
                cot.reshape(out.shape) if k == j else None for k in view.outs
            ]
            rows.append(
                attempt(
                    "eager backward (reference)",
                    eager_vjp,
                    view.entry,
                    view.args,
                    view.diff,
                    view.outs,
                    cots,
                )
            )
        blocks.append(
            [
                torch.stack([r[i].to(torch.float64) for r in rows]).reshape((*out.shape, *shape))
                if rows
                else torch.zeros((*out.shape, *shape), dtype=torch.float64)
                for i, shape in enumerate(shapes)
            ]
        )
    return blocks


#: FD Jacobians by (entry, sample, seed, dtype, device): vjp, jacrev and jacfwd of one sample
#: share one (the reference is a deterministic function of the base sample).
_JACOBIAN_CACHE: dict[Any, list[list[torch.Tensor]]] = {}
_JACOBIAN_CACHE_SIZE = 32


def jacobian_bytes(view: DiffView) -> int:
    """Bytes of the view's full Jacobian in float64 (output elements x input elements x 8)."""
    return sum(view.outputs[j].numel() for j in view.outs) * view.columns() * 8


def jacobian_fits(view: DiffView) -> bool:
    return jacobian_bytes(view) <= MEMORY_BUDGET


def _size(n: float) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            return f"{n:.3g} {unit}" if unit != "bytes" else f"{int(n)} bytes"
        n /= 1024
    return f"{n:.3g} PiB"


def require_jacobian_budget(view: DiffView, what: str) -> None:
    """Unsupported (with the size and the advice) when the full Jacobian exceeds the budget."""
    need = jacobian_bytes(view)
    if need <= MEMORY_BUDGET:
        return
    rows = sum(view.outputs[j].numel() for j in view.outs)
    raise Unsupported(
        f"{what} needs the full Jacobian of this sample: {rows} output x {view.columns()} "
        f"input elements, {_size(need)} in float64, more than the suite's memory budget of "
        f"{_size(MEMORY_BUDGET)}; check the Function on a smaller sample (a few elements per "
        "dim catch the same bugs), or leave this check out with --checks"
    )


def reference_jacobian(ctx: CaseContext, view: DiffView) -> tuple[list[list[torch.Tensor]], str]:
    """The full reference Jacobian of the view: FD, or the eager backward for gradient=custom."""
    require_jacobian_budget(view, "the reference")
    if is_custom(view.entry):
        return eager_jacobian(view), EAGER_CUSTOM_REFERENCE
    return fd_jacobian(ctx, view), fd.FD_REFERENCE


def fd_jacobian(ctx: CaseContext, view: DiffView) -> list[list[torch.Tensor]]:
    """The finite-difference Jacobian of the view (cached per sample)."""
    key: Any = (
        view.entry,
        ctx.sample_index,
        ctx.options.seed,
        ctx.options.dtype,
        ctx.options.device,
        tuple(str(a.dtype) for a in view.args if isinstance(a, torch.Tensor)),
    )
    try:
        cached = _JACOBIAN_CACHE.get(key)
    except TypeError:  # an entry with unhashable fields
        key, cached = None, None
    if cached is not None:
        return cached
    args64 = view.args64()
    blocks = attempt(
        "finite differences (reference, float64 forward)",
        fd.jacobian,
        view.fd_fn(args64, view.diff, view.outs),
        view.primals(args64),
        step=view.entry.tolerances.fd_step,
    )
    if key is not None:
        if len(_JACOBIAN_CACHE) >= _JACOBIAN_CACHE_SIZE:
            _JACOBIAN_CACHE.pop(next(iter(_JACOBIAN_CACHE)))
        _JACOBIAN_CACHE[key] = blocks
    return blocks


def subsets(items: Sequence[int], word: str, plural: str) -> list[tuple[str, tuple[int, ...]]]:
    """The sub-cases over inputs or outputs: all of them, then each alone (when several),
    named as the case messages name them (``all inputs``, ``input 1 alone``)."""
    subsets = [(f"all {plural}", tuple(items))]
    if len(items) > 1:
        subsets += [(f"{word} {k} alone", (k,)) for k in items]
    return subsets


def jvp_cases(view: DiffView) -> list[tuple[str, tuple[int, ...], bool]]:
    """A jvp check's sub-cases: (name, tangent subset, strided): every input subset, then
    non-contiguous inputs and tangents."""
    cases = [(name, subset, False) for name, subset in subsets(view.diff, "input", "inputs")]
    cases.append(("non-contiguous inputs and tangents", view.diff, True))
    return cases


def vjp_cases(view: DiffView) -> list[tuple[str, tuple[int, ...], tuple[int, ...], bool]]:
    """A vjp check's sub-cases: (name, inputs, outputs, strided): every input subset x every
    output subset, then non-contiguous inputs and cotangents."""
    cases = [
        (f"{in_name}, {out_name}", ins, outs, False)
        for in_name, ins in subsets(view.diff, "input", "inputs")
        for out_name, outs in subsets(view.outs, "output", "outputs")
    ]
    cases.append(("non-contiguous inputs and cotangents", view.diff, view.outs, True))
    return cases


def identity_problems(
    label: str,
    findings: Findings,
    grads: Sequence[torch.Tensor],
    directions: Sequence[Sequence[torch.Tensor]],
    rhs: Sequence[float | fd_error.Scalar],
    columns: int,
) -> None:
    """<t, J^T c> from the Function vs <J t, c> from finite differences, per direction.

    A reference with its estimate (``fd_error.Scalar``) widens the bound by its error; a
    direction whose differences did not converge by more than the bound is not comparable
    (left out and counted, as elements are)."""
    rtol, atol = findings.rtol, findings.atol
    low = [g for g in grads if isinstance(g, torch.Tensor)]
    if findings.derive and low and dtype_tolerance.applies(low[0].dtype, torch.float64):
        # the dtype rule on a scalar: the scale of the sum is the size of the values
        factor = dtype_tolerance.factor(low[0].dtype, reference_step=findings.reference_step)
        cap = dtype_tolerance.MARGIN * dtype_tolerance.MAX_RELATIVE
        rtol, atol = min(factor * findings.amplification, cap), 0.0
        if findings.floor is not None:
            rtol, atol = max(rtol, findings.floor[0]), max(atol, findings.floor[1])
    why = (
        f"{columns} Jacobian columns > {FULL_JACOBIAN_MAX}"
        if columns > FULL_JACOBIAN_MAX
        else "complex tensors, with the real inner product <a, b> = Re sum conj(a) b"
    )
    for k, (t, ref) in enumerate(zip(directions, rhs)):
        est = ref if isinstance(ref, fd_error.Scalar) else fd_error.Scalar(float(ref))
        r = est.value
        if not math.isfinite(r):
            raise NonFiniteSample(
                nonfinite_message(
                    "NaN" if math.isnan(r) else "inf", f"<J t, c> from {fd.FD_REFERENCE}"
                )
            )
        lhs = fd.dot(t, grads)
        err = abs(lhs - r)
        scale = max(fd.abs_dot(t, grads), abs(r))
        bound = atol * sum(float(x.abs().sum()) for x in t) + rtol * scale
        if isinstance(ref, fd_error.Scalar):
            what = f"{label}: <J t, c> for random direction t #{k}"
            if est.spread > bound:
                findings.count_fd(0, 1, f"#{k} (a direction)", what)
                continue
            findings.count_fd(1, 0, "", what)
            bound += est.error + fd_error.SAFETY * est.spread
        if not err <= bound:
            widened = (
                f", plus the reference's estimated finite-difference error "
                f"{est.error + fd_error.SAFETY * est.spread:.3g}"
                if isinstance(ref, fd_error.Scalar)
                else ""
            )
            findings.add(
                f"{label}: <t, J^T c> from the Function's vjp = {lhs:.6g}, <J t, c> from "
                f"{fd.FD_REFERENCE} (reference) = {r:.6g} for random direction t #{k}: "
                f"abs error {err:.3g}{f', rel error {err / abs(r):.3g}' if r else ''}; "
                f"rtol={rtol:g}, atol={atol:g}{widened} (identity check: {why})"
            )
