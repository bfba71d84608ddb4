"""Second-order autodiff checks: ``vjp_of_vjp`` (double backward) and ``jvp_of_vjp``.

``jvp_of_vjp`` is compared with the finite-difference derivative of the eager first-order
vjp ``g(x, c) = J(x)^T c`` along the tangents. For ``vjp_of_vjp`` of a ``derivative``
entry the symmetry of second derivatives makes the reference two directional differences;
a ``custom`` entry gets the full FD Jacobian of ``g`` (or the identity when large).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from autograd_function_db.entry import Entry

from . import finite_diff as fd
from .autodiff_refs import (
    FULL_JACOBIAN_MAX,
    IDENTITY_DIRECTIONS,
    SECOND_ORDER_REFERENCE,
    DiffView,
    Findings,
    Watch,
    _identity_problems,
    attempt,
    diff_view,
    eager_protocol,
    eager_vjp,
    is_custom,
    random_like,
    restricted,
)
from .checks import (
    CaseContext,
)

# --- second order ----------------------------------------------------------------------------


def first_order_vjp(view: DiffView, args: Sequence[Any]) -> Callable[..., tuple[Any, ...]]:
    """g(x..., c...) = the first-order vjp through torch.func (differentiable by torch.func)."""
    n = len(view.diff)
    f = restricted(view.entry, args, view.diff, view.outs)

    def g(*xc: Any) -> tuple[Any, ...]:
        vjp_fn = torch.func.vjp(f, *xc[:n])[1]
        return tuple(vjp_fn(tuple(xc[n:])))

    return g


def eager_first_order(view: DiffView, args: Sequence[Any]) -> Callable[..., tuple[Any, ...]]:
    """g(x..., c...) through the Function's eager backward (for finite differences)."""
    n = len(view.diff)

    def g(*xc: Any) -> tuple[Any, ...]:
        call = list(args)
        for i, x in zip(view.diff, xc[:n]):
            call[i] = x
        return eager_vjp(view.entry, call, view.diff, view.outs, list(xc[n:]))

    return g


def _second_order_hint(entry: Entry, actual: Sequence[Any], expected: Sequence[Any]) -> str:
    zero = all(isinstance(a, torch.Tensor) and not bool(a.detach().any()) for a in actual)
    nonzero_ref = any(bool(e.abs().max() > 0) for e in expected if e.numel())
    if entry.caps.once_differentiable:
        return (
            "backward is @once_differentiable, and torch.func silently returns zeros for "
            "second order through it; drop the decorator or do not claim double_backward"
        )
    if zero and nonzero_ref:
        return (
            "the second-order result is all zeros: a backward computed outside autograd "
            "(@once_differentiable, numpy, .detach()) gives silent zeros under torch.func"
        )
    return ""


def _second_order_setup(
    ctx: CaseContext,
) -> tuple[DiffView, list[torch.Tensor], list[torch.Tensor], list[str]]:
    view = diff_view(ctx)
    eager_protocol(ctx, view)
    cots = random_like(ctx.generator("cotangents"), [view.outputs[j] for j in view.outs])
    names = [f"input {i}" for i in view.diff] + [f"the cotangent of output {j}" for j in view.outs]
    return view, view.primals(), cots, names


def run_vjp_of_vjp(ctx: CaseContext) -> str:
    view, xs, cots, names = _second_order_setup(ctx)
    entry = ctx.entry
    findings = Findings.of(ctx)
    w = random_like(ctx.generator("outer cotangents"), xs)
    primals = [*xs, *cots]
    # Reference: finite differences (float64) of the eager first-order vjp g(x, c) = J(x)^T c.
    args64 = view.args64()
    g64 = eager_first_order(view, args64)
    p64 = [fd.upcast(p) for p in primals]
    columns = sum(p.numel() for p in primals)
    expected: list[torch.Tensor] | None = None
    if not is_custom(entry):
        # Second derivatives are symmetric, so d<J(x)^T c, w>/dx is the derivative of
        # g(., c) along w, and d<J(x)^T c, w>/dc = J w: two directional differences.
        x64 = p64[: len(xs)]
        along_w = attempt(
            "finite differences of the eager vjp (reference)",
            fd.directional,
            g64,
            p64,
            [*w, *([None] * len(cots))],
            step=entry.tolerances.fd_step,
        )
        jw = attempt(
            "finite differences (reference, float64 forward)",
            fd.directional,
            restricted(entry, args64, view.diff, view.outs),
            x64,
            w,
            step=entry.tolerances.fd_step,
        )
        expected = [*along_w, *jw]
    elif columns <= FULL_JACOBIAN_MAX:
        # gradient=custom: no symmetry to lean on, so the full Jacobian of g.
        jac = attempt(
            "finite differences of the eager vjp (reference)",
            fd.jacobian,
            g64,
            p64,
            step=entry.tolerances.fd_step,
        )
        expected = fd.vjp_from_jacobian(jac, w, [p.shape for p in primals])

    results: list[tuple[str, Sequence[Any]]] = []
    # torch.func: vjp of vjp
    label = "vjp_of_vjp (torch.func.vjp of torch.func.vjp, the Function's double backward)"
    watch = Watch()
    for nm, p in zip(names, primals):
        watch.add(nm, p)
    w_in = [t.clone() for t in w]
    for i, t in zip(view.diff, w_in):
        watch.add(f"the outer cotangent for input {i}", t)
    _, vjp2 = attempt(
        f"{label} forward", torch.func.vjp, first_order_vjp(view, view.args), *primals
    )
    results.append((label, attempt(label, vjp2, tuple(w_in))))
    watch.verify(label, findings, "backward must leave its inputs and grad_output unchanged")
    # plain autograd: double backward with create_graph=True
    label = (
        "vjp_of_vjp (torch.autograd.grad with create_graph=True, the Function's double backward)"
    )

    def double_backward() -> tuple[torch.Tensor, ...]:
        with torch.enable_grad():
            leaves = [p.detach().clone().requires_grad_(True) for p in primals]
            call = list(view.args)
            for i, x in zip(view.diff, leaves):
                call[i] = x
            first = eager_vjp(
                entry, call, view.diff, view.outs, leaves[len(xs) :], create_graph=True
            )
            pairs = [(g, t) for g, t in zip(first, w) if g.requires_grad]
            if not pairs:
                return tuple(torch.zeros_like(x) for x in leaves)
            return torch.autograd.grad(
                [g for g, _ in pairs],
                leaves,
                [t.clone() for _, t in pairs],
                allow_unused=True,
                materialize_grads=True,
            )

    results.append((label, attempt(label, double_backward)))

    for label, actual in results:
        if expected is not None:
            for nm, a, e in zip(names, actual, expected):
                findings.compare(
                    f"{label}: d<vjp, w>/d {nm} vs {SECOND_ORDER_REFERENCE} (reference)", a, e
                )
            continue
        gen = ctx.generator("directions", label)
        directions = [random_like(gen, primals) for _ in range(IDENTITY_DIRECTIONS)]
        rhs = []
        for direction in directions:
            jt = attempt(
                "finite differences of the eager vjp (reference)",
                fd.directional,
                g64,
                p64,
                direction,
                step=entry.tolerances.fd_step,
            )
            rhs.append(fd.dot(jt, w))
        _identity_problems(label, findings, actual, directions, rhs, columns)
    hint = ""
    if findings.problems:
        hint = _second_order_hint(
            entry, results[0][1], expected if expected is not None else [torch.ones(1)]
        )
    findings.raise_if_any(hint)
    return SECOND_ORDER_REFERENCE


def run_jvp_of_vjp(ctx: CaseContext) -> str:
    view, xs, cots, names = _second_order_setup(ctx)
    entry = ctx.entry
    findings = Findings.of(ctx)
    primals = [*xs, *cots]
    tangents = random_like(ctx.generator("tangents"), primals)
    label = "jvp_of_vjp (torch.func.jvp of torch.func.vjp, forward-over-reverse)"
    watch = Watch()
    for nm, p, t in zip(names, primals, tangents):
        watch.add(nm, p)
        watch.add(f"the tangent of {nm}", t)
    g = first_order_vjp(view, view.args)
    _, actual = attempt(label, torch.func.jvp, g, tuple(primals), tuple(tangents))
    watch.verify(label, findings, "inputs, cotangents and tangents must be left unchanged")
    args64 = view.args64()
    expected = attempt(
        "finite differences of the eager vjp (reference)",
        fd.directional,
        eager_first_order(view, args64),
        [fd.upcast(p) for p in primals],
        tangents,
        step=entry.tolerances.fd_step,
    )
    for i, a, e in zip(view.diff, actual, expected):
        findings.compare(
            f"{label}: tangent of the grad of input {i} vs {SECOND_ORDER_REFERENCE} (reference)",
            a,
            e,
        )
    hint = _second_order_hint(entry, actual, expected) if findings.problems else ""
    findings.raise_if_any(hint)
    return SECOND_ORDER_REFERENCE
