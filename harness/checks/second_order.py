"""Second-order autodiff checks: ``vjp_of_vjp`` (double backward) and ``jvp_of_vjp``.

``derivative`` entries: ``jvp_of_vjp`` is compared with the finite-difference derivative
of the eager first-order vjp ``g(x, c) = J(x)^T c`` along the tangents; for
``vjp_of_vjp`` the symmetry of second derivatives makes the reference two directional
differences. When the sample's first-order vjp already differs from finite differences,
a second-order failure says it follows from that case.

``custom`` entries (a first order that is deliberately not the derivative): which
reference is independent depends on what backward reads, worked out from the ctx
(``harness.checks.saved``).

* Only saved inputs: the derivative of the gradient users get is the derivative of the
  Function's own first-order map ``g(x, c) = backward(x)(c)``, so both checks are compared
  with float64 central finite differences of ``g`` (``vjp_of_vjp`` with the transpose of
  ``g``'s FD Jacobian, as ``g`` is not a gradient and its Jacobian not symmetric; by
  random directions ``<J_g t, w> = <t, J_g^T w>`` when large). A backward that detaches
  what it saved loses its second-order terms here and fails.
* A saved output or intermediate: its dependence on the inputs runs through the custom
  rule under torch.func and through the true derivative in finite differences, so
  ``vjp_of_vjp`` is compared with plain eager autograd's double backward of the same
  Function (``torch.autograd.grad`` twice with ``create_graph=True``), and ``jvp_of_vjp``
  passes when it matches either that double backward (``J_g t`` by the double-vjp trick) or
  eager forward-over-reverse (``forward_ad`` dual tensors through ``torch.autograd.grad``:
  the Function's own jvp for saved outputs). The case message says so, and what this
  reference cannot see: a backward that detaches what it saved, or any second-order
  mistake that eager autograd makes too.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.autograd.forward_ad as fwAD

from autograd_function_db.entry import Entry
from harness.checks import fd_error
from harness.checks import finite_diff as fd
from harness.checks.autodiff_refs import (
    FULL_JACOBIAN_MAX,
    IDENTITY_DIRECTIONS,
    MEMORY_BUDGET,
    SECOND_ORDER_REFERENCE,
    DiffView,
    Findings,
    Watch,
    attempt,
    diff_view,
    eager_protocol,
    is_custom,
    random_like,
    restricted,
)
from harness.checks.catalogue import (
    CaseContext,
)
from harness.checks.forward_reverse import either_reference
from harness.checks.gauge import same_function
from harness.checks.no_graph import no_graph_second_order
from harness.checks.references import (
    eager_vjp,
    fd_jacobian,
    grad_where_connected,
    identity_problems,
)
from harness.checks.saved import BackwardReads, backward_reads, nondiff_saved_hint

EAGER_DOUBLE_BACKWARD = (
    "eager double backward (torch.autograd.grad twice with create_graph=True, gradient=custom)"
)
EAGER_FORWARD_OVER_REVERSE = (
    "eager forward-over-reverse (torch.autograd.forward_ad over torch.autograd.grad, "
    "gradient=custom)"
)
CUSTOM_FD_SECOND_ORDER = (
    "finite differences (float64) of the Function's own first-order map x -> backward(x)(c) "
    "(gradient=custom)"
)
EAGER_BLIND_SPOT = (
    "this reference cannot see a backward that detaches what it saved, nor any second-order "
    "mistake eager autograd makes too"
)


def custom_reference_note(check: str, reads: BackwardReads) -> str:
    """What the case message says about the reference a custom entry's second order used."""
    if reads.inputs_only:
        return (
            f"{check}: compared with {CUSTOM_FD_SECOND_ORDER}, independent of the Function's "
            f"double backward: {reads.describe()}"
        )
    return (
        f"{check}: compared with eager double backward of the same Function, because "
        f"{reads.describe()} (its dependence on the inputs runs through the custom rule under "
        f"torch.func and through the true derivative in finite differences); {EAGER_BLIND_SPOT}"
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
    """g(x..., c...) through the Function's eager backward (for finite differences; a
    random Function is evaluated in the call's dtype, so it sees the call's draw)."""
    n = len(view.diff)
    dtypes = view.call_dtypes()

    def g(*xc: Any) -> tuple[Any, ...]:
        call = list(args)
        for i, x in zip(view.diff, xc[:n]):
            call[i] = x
        cots = list(xc[n:])
        if dtypes is not None:
            call = [c.to(d) if d is not None else c for c, d in zip(call, dtypes)]
            cots = [c.to(view.outputs[j].dtype) for c, j in zip(cots, view.outs)]
        if not hasattr(g, fd_error.COMPUTES_IN):
            # backward runs at the dtype of the outputs it gets a cotangent for (autograd
            # casts the cotangent): the precision finite differences of g see
            with torch.no_grad():
                outs = restricted(view.entry, call, view.diff, view.outs)(
                    *(call[i] for i in view.diff)
                )
            setattr(g, fd_error.COMPUTES_IN, [o.dtype for o in outs if isinstance(o, torch.Tensor)])
        return eager_vjp(view.entry, call, view.diff, view.outs, cots)

    return g


def second_order_hint(entry: Entry, actual: Sequence[Any], expected: Sequence[Any]) -> str:
    """The hint of a failed second-order case: @once_differentiable, or all zeros where the
    reference is not ("" when neither)."""
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


def second_order_setup(
    ctx: CaseContext,
) -> tuple[DiffView, list[torch.Tensor], list[torch.Tensor], list[str]]:
    """A second-order case's view (eager protocol checked), primals, random cotangents and
    the names of (primals..., cotangents...) in messages."""
    view = diff_view(ctx)
    eager_protocol(ctx, view)
    cots = random_like(ctx.generator("cotangents"), [view.outputs[j] for j in view.outs])
    names = [f"input {i}" for i in view.diff] + [
        f"the cotangent of {view.out_name(j)}" for j in view.outs
    ]
    return view, view.primals(), cots, names


def _eager_first_order(
    view: DiffView, primals: Sequence[torch.Tensor]
) -> tuple[list[torch.Tensor], tuple[torch.Tensor, ...]]:
    """Fresh leaves for (x, c) and the eager first-order grads g(x, c) = J(x)^T c, taken with
    ``create_graph=True`` so that they can be differentiated again (call under enable_grad)."""
    n = len(view.diff)
    leaves = [p.detach().clone().requires_grad_(True) for p in primals]
    call = list(view.args)
    for i, x in zip(view.diff, leaves):
        call[i] = x
    first = eager_vjp(view.entry, call, view.diff, view.outs, leaves[n:], create_graph=True)
    return leaves, first


def eager_double_backward(
    view: DiffView, primals: Sequence[torch.Tensor], w: Sequence[torch.Tensor]
) -> tuple[torch.Tensor, ...]:
    """d<g(x, c), w>/d(x, c) by plain eager autograd: ``torch.autograd.grad`` of the
    first-order grads (taken with ``create_graph=True``), no torch.func involved."""
    with torch.enable_grad():
        leaves, first = _eager_first_order(view, primals)
        grads = grad_where_connected(first, leaves, [t.clone() for t in w])
        if grads is None:
            return tuple(torch.zeros_like(x) for x in leaves)
    return tuple(g.detach() for g in grads)


def eager_double_backward_jvp(
    view: DiffView, primals: Sequence[torch.Tensor], tangents: Sequence[torch.Tensor]
) -> tuple[torch.Tensor, ...]:
    """``J_g t`` for g(x, c) = J(x)^T c by eager reverse mode only (the double-vjp trick:
    ``u -> J_g^T u`` is linear in ``u``, and its vjp with ``t`` is ``J_g t``)."""
    with torch.enable_grad():
        leaves, first = _eager_first_order(view, primals)
        us = [torch.zeros_like(g).requires_grad_(True) for g in first]
        vs = grad_where_connected(first, leaves, us, create_graph=True)
        if vs is None:
            return tuple(torch.zeros_like(g) for g in first)
        out = grad_where_connected(vs, us, [t.detach().clone() for t in tangents])
        if out is None:
            return tuple(torch.zeros_like(g) for g in first)
    return tuple(o.detach() for o in out)


def eager_forward_over_reverse_both(
    view: DiffView, primals: Sequence[torch.Tensor], tangents: Sequence[torch.Tensor]
) -> tuple[torch.Tensor, ...]:
    """``J(x)^T c`` and its tangent ``J_g t`` along ``t`` by eager forward-mode AD (dual
    tensors) through ``torch.autograd.grad``: the Function's own jvp gives the tangents of
    what it saved, as under torch.func."""
    n = len(view.diff)
    with fwAD.dual_level(), torch.enable_grad():
        leaves = [p.detach().clone().requires_grad_(True) for p in primals[:n]]
        duals = [fwAD.make_dual(x, t.detach().clone()) for x, t in zip(leaves, tangents[:n])]
        cots = [
            fwAD.make_dual(c.detach().clone(), t.detach().clone())
            for c, t in zip(primals[n:], tangents[n:])
        ]
        outs = restricted(view.entry, view.args, view.diff, view.outs)(*duals)
        grads = grad_where_connected(outs, leaves, cots)
        if grads is None:
            zeros = tuple(torch.zeros_like(x).detach() for x in leaves)
            return (*zeros, *zeros)
        primal_out, tangent_out = [], []
        for g in grads:
            p, t = fwAD.unpack_dual(g)
            primal_out.append(p.detach().clone())
            tangent_out.append(torch.zeros_like(p).detach() if t is None else t.detach().clone())
    return (*primal_out, *tangent_out)


def eager_forward_over_reverse(
    view: DiffView, primals: Sequence[torch.Tensor], tangents: Sequence[torch.Tensor]
) -> tuple[torch.Tensor, ...]:
    """``J_g t`` alone (``eager_forward_over_reverse_both``'s tangents)."""
    return eager_forward_over_reverse_both(view, primals, tangents)[len(view.diff) :]


def fd_double_backward(
    view: DiffView, primals: Sequence[torch.Tensor], w: Sequence[torch.Tensor], step: Any
) -> list[torch.Tensor]:
    """``d<J(x)^T c, w>/d(x, c)`` by float64 finite differences, for a ``derivative`` entry.

    Second derivatives are symmetric, so d<J(x)^T c, w>/dx is the derivative of the eager
    first-order vjp g(., c) along w, and d<J(x)^T c, w>/dc = J w: two directional
    differences. ``primals``: (x..., c...)."""
    args64 = view.args64()
    p64 = [fd.upcast(p) for p in primals]
    along_w = attempt(
        "finite differences of the eager vjp (reference)",
        fd.directional,
        eager_first_order(view, args64),
        p64,
        [*w, *([None] * (len(primals) - len(w)))],
        step=step,
    )
    jw = attempt(
        "finite differences (reference, float64 forward)",
        fd.directional,
        view.fd_fn(args64, view.diff, view.outs),
        p64[: len(w)],
        w,
        step=step,
    )
    return [*along_w, *jw]


def first_order_failure(ctx: CaseContext, view: DiffView, cots: Sequence[torch.Tensor]) -> str:
    """The id of this sample's first-order ``vjp`` case when the Function's eager backward
    already differs from finite differences there (else ""): a second-order mismatch then
    follows from it."""
    findings = Findings.derived(ctx, view)
    grads = attempt(
        "eager backward", eager_vjp, view.entry, view.args, view.diff, view.outs, list(cots)
    )
    if view.columns() <= FULL_JACOBIAN_MAX and not view.is_complex:
        expected = fd.vjp_from_jacobian(fd_jacobian(ctx, view), list(cots), view.input_shapes)
        for i, a, e in zip(view.diff, grads, expected):
            findings.compare(f"grad of input {i}", a, e)
    else:
        gen = ctx.generator("first-order directions")
        direction = random_like(gen, view.primals())
        args64 = view.args64()
        jt = attempt(
            "finite differences (reference, float64 forward)",
            fd.directional,
            view.fd_fn(args64, view.diff, view.outs),
            view.primals(args64),
            direction,
            step=view.entry.tolerances.fd_step,
        )
        identity_problems(
            "vjp", findings, grads, [direction], [fd.dot_estimate(jt, cots)], view.columns()
        )
    if not findings.problems:
        return ""
    return f"{view.entry.name}/vjp/s{ctx.sample_index}"


def follows_first_order(findings: Findings, check: str, case: str) -> None:
    """Replace a second-order mismatch by the first-order failure it follows from."""
    detail = findings.problems[0]
    findings.problems = [
        f"{check}: follows from the first-order failure of {case} (the Function's backward "
        "differs from finite differences (float64) there, so its derivative cannot match: fix "
        f"the first order first); first second-order mismatch: {detail}"
    ]
    findings.failed, findings.passed = [], []


def custom_fd_transpose(
    ctx: CaseContext,
    view: DiffView,
    primals: Sequence[torch.Tensor],
    w: Sequence[torch.Tensor],
) -> list[torch.Tensor] | None:
    """``J_g^T w`` for the Function's own first-order map ``g(x, c) = backward(x)(c)`` from its
    float64 finite-difference Jacobian (one column per element of x and c); None when that
    Jacobian is too large (the caller checks random directions instead)."""
    p64 = [fd.upcast(p) for p in primals]
    columns = sum(p.numel() for p in p64)
    rows = sum(x.numel() for x in p64[: len(view.diff)])
    if columns > FULL_JACOBIAN_MAX or rows * columns * 8 > MEMORY_BUDGET or view.is_complex:
        return None
    blocks = attempt(
        f"{CUSTOM_FD_SECOND_ORDER} (reference)",
        fd.jacobian,
        eager_first_order(view, view.args64()),
        p64,
        step=ctx.entry.tolerances.fd_step,
    )
    return fd.vjp_from_jacobian(blocks, list(w), [p.shape for p in p64])


def _custom_fd_directions(
    ctx: CaseContext,
    view: DiffView,
    findings: Findings,
    results: Sequence[tuple[str, Sequence[Any]]],
    primals: Sequence[torch.Tensor],
    w: Sequence[torch.Tensor],
) -> None:
    """``<t, J_g^T w>`` from each result vs ``<J_g t, w>`` by finite differences of ``g``, for
    random directions t over (x, c) (``g``'s Jacobian is too large to build)."""
    p64 = [fd.upcast(p) for p in primals]
    g = eager_first_order(view, view.args64())
    gen = ctx.generator("second-order directions")
    directions = [random_like(gen, list(primals)) for _ in range(IDENTITY_DIRECTIONS)]
    rhs = []
    for t in directions:
        jt = attempt(
            f"{CUSTOM_FD_SECOND_ORDER} (reference)",
            fd.directional,
            g,
            p64,
            t,
            step=ctx.entry.tolerances.fd_step,
        )
        rhs.append(fd.dot_estimate(jt, list(w)))
    columns = sum(p.numel() for p in p64)
    for label, actual in results:
        identity_problems(label, findings, list(actual), directions, rhs, columns)


def run_vjp_of_vjp(ctx: CaseContext) -> str:
    view, xs, cots, names = second_order_setup(ctx)
    entry = ctx.entry
    findings = Findings.derived(ctx, view)
    w = random_like(ctx.generator("outer cotangents"), xs)
    primals = [*xs, *cots]
    custom = is_custom(entry)
    reads = backward_reads(view) if custom else None
    ref_name = SECOND_ORDER_REFERENCE
    expected: list[torch.Tensor] | None
    if reads is not None:
        ctx.notes.append(custom_reference_note("vjp_of_vjp", reads))
    if reads is None or reads.inputs_only:  # finite differences: of the function called
        same_function(ctx, view, "vjp_of_vjp")
        findings = Findings.derived(ctx, view)
    if reads is not None and reads.inputs_only:
        # gradient=custom, backward a function of the inputs alone: the derivative of the
        # gradient users get, J_g^T w, by finite differences of g (g is no gradient, so its
        # Jacobian is not symmetric: no directional shortcut).
        ref_name = CUSTOM_FD_SECOND_ORDER
        expected = custom_fd_transpose(ctx, view, primals, w)
    elif reads is not None:
        # gradient=custom, backward reads saved outputs or intermediates: plain eager
        # autograd's double backward of the same Function.
        ref_name = EAGER_DOUBLE_BACKWARD
        expected = list(
            attempt(f"{EAGER_DOUBLE_BACKWARD} (reference)", eager_double_backward, view, primals, w)
        )
    else:
        expected = fd_double_backward(view, primals, w, entry.tolerances.fd_step)

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
    if ref_name != EAGER_DOUBLE_BACKWARD:
        # plain autograd: double backward with create_graph=True, also against FD
        label = (
            "vjp_of_vjp (torch.autograd.grad with create_graph=True, the Function's double "
            "backward)"
        )
        results.append((label, attempt(label, eager_double_backward, view, primals, w)))

    if expected is None:
        _custom_fd_directions(ctx, view, findings, results, primals, w)
    else:
        for label, actual in results:
            for nm, a, e in zip(names, actual, expected):
                findings.compare(f"{label}: d<vjp, w>/d {nm} vs {ref_name} (reference)", a, e)
    hint = ""
    if findings.problems:
        case = "" if custom else first_order_failure(ctx, view, cots)
        if case:
            follows_first_order(findings, "vjp_of_vjp", case)
        else:
            # a correct first order with no graph: double backward unsupported (or raises)
            no_graph_second_order(ctx, view, primals, findings)
            hint = second_order_hint(entry, results[0][1], expected or [])
            if not custom:
                findings.hint(nondiff_saved_hint(view))
        if reads is not None:
            findings.hint(custom_reference_note("vjp_of_vjp", reads))
    findings.raise_if_any(hint)
    return ref_name


def run_jvp_of_vjp(ctx: CaseContext) -> str:
    view, xs, cots, names = second_order_setup(ctx)
    entry = ctx.entry
    findings = Findings.derived(ctx, view)
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
    custom = is_custom(entry)
    reads = backward_reads(view) if custom else None
    if reads is not None:
        ctx.notes.append(custom_reference_note("jvp_of_vjp", reads))
    if reads is not None and not reads.inputs_only:
        by_name: dict[str, Findings] = {}
        for ref_name, reference in (
            (EAGER_DOUBLE_BACKWARD, eager_double_backward_jvp),
            (EAGER_FORWARD_OVER_REVERSE, eager_forward_over_reverse),
        ):
            found = by_name[ref_name] = Findings.derived(ctx, view)
            expected = attempt(f"{ref_name} (reference)", reference, view, primals, tangents)
            for i, a, e in zip(view.diff, actual, expected):
                found.compare(
                    f"{label}: tangent of the grad of input {i} vs {ref_name} (reference)", a, e
                )
        return either_reference(
            ctx,
            "jvp_of_vjp",
            by_name,
            findings,
            what="torch.func's forward-over-reverse",
            why={},
            neither=(
                "gradient=custom: torch.func's forward-over-reverse matches neither eager "
                "autograd's double backward nor eager forward-over-reverse of the same Function "
                f"({custom_reference_note('jvp_of_vjp', reads)})"
            ),
        )
    # derivative entries, and custom ones whose backward reads only saved inputs: the
    # derivative of g(x, c) = backward(x)(c) along the tangents, by finite differences
    same_function(ctx, view, "jvp_of_vjp")
    findings = Findings.derived(ctx, view)
    watch.verify(label, findings, "inputs, cotangents and tangents must be left unchanged")
    ref_name = CUSTOM_FD_SECOND_ORDER if custom else SECOND_ORDER_REFERENCE
    args64 = view.args64()
    expected = attempt(
        f"{'finite differences of the eager vjp' if not custom else CUSTOM_FD_SECOND_ORDER} "
        "(reference)",
        fd.directional,
        eager_first_order(view, args64),
        [fd.upcast(p) for p in primals],
        tangents,
        step=entry.tolerances.fd_step,
    )
    for i, a, e in zip(view.diff, actual, expected):
        findings.compare(
            f"{label}: tangent of the grad of input {i} vs {ref_name} (reference)",
            a,
            e,
        )
    hint = ""
    if findings.problems:
        case = "" if custom else first_order_failure(ctx, view, cots)
        if case:
            follows_first_order(findings, "jvp_of_vjp", case)
        else:
            # a correct first order with no graph: double backward unsupported (or raises)
            no_graph_second_order(ctx, view, primals, findings)
            hint = second_order_hint(entry, actual, expected)
            if not custom:
                findings.hint(nondiff_saved_hint(view))
        if reads is not None:
            findings.hint(custom_reference_note("jvp_of_vjp", reads))
    findings.raise_if_any(hint)
    return ref_name
