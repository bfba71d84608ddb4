"""The autodiff checks: first and second order, Jacobians, and autodiff composed with vmap.

Every check is a small ``run(ctx)`` built from a few composable pieces:

* ``DiffView``: which arguments are differentiated (floating-point tensors only;
  integer/bool tensors and Python values are held fixed) and which outputs get
  cotangents (floating-point outputs not declared in ``caps.nondiff_outputs``).
* ``restricted``: the Function as a function of a subset of its inputs, returning
  a subset of its outputs (in-place arguments are cloned first, so a
  ``mark_dirty`` Function is differentiated through a clone of a leaf).
* References (never the thing being checked): finite differences in float64
  (``harness.checks.finite_diff``); for ``gradient="custom"`` entries, the Function's own
  eager backward through ``torch.autograd.grad`` (jvp and jacfwd: either that or finite
  differences; second order: eager autograd's double backward); for the composite vmap
  checks, a loop of per-slice eager calls (``torch.autograd.grad`` /
  ``torch.autograd.forward_ad``), which never runs a vmap rule.
* ``Findings``: comparisons and contract checks collected with one-line messages
  that name the sub-check, which side is the Function's and which the reference.

Second order (``harness.checks.second_order``): ``jvp_of_vjp`` is compared with the
finite-difference derivative of the eager first-order vjp ``g(x, c) = J(x)^T c`` along
the tangents. For ``vjp_of_vjp`` of a ``derivative`` entry the symmetry of second
derivatives makes the reference two directional differences (``d<g, w>/dx`` is the
derivative of ``g`` along ``w``, and ``d<g, w>/dc = J w``); a ``custom`` entry is compared
with plain eager autograd's double backward of the same Function instead.

Plans of the composite checks: see ``harness.plans.composite`` (pairwise covering arrays
over the arguments and, for vmap_of_vjp/vmap_of_jvp, the cotangents/tangents). Ids read
``in_dims=(0,None),cotangents=0``.

Contract sub-checks run in every case: the inputs are unchanged afterwards
(in-place arguments are cloned before each call, so the caller's never
change), incoming cotangents/tangents are unchanged by backward/jvp, declared
non-differentiable outputs do not require grad, and a declared in-place
argument is returned as the same tensor object (``mark_dirty``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch

from autograd_function_db.entry import Entry
from harness.checks import finite_diff as fd
from harness.checks.autodiff_refs import (
    LOOP_JVP_REFERENCE,
    LOOP_VJP_REFERENCE,
    ONCE_DIFFERENTIABLE_REASON,
    SECOND_ORDER_REFERENCE,
)
from harness.checks.catalogue import (
    TORCH_FUNC_REFUSAL,
    CaseContext,
    CheckSpec,
    Unsupported,
    needs_setup_context,
    needs_vmap,
    no_plan,
    register,
)
from harness.checks.composites import (
    run_grad_of_vmap,
    run_jvp_of_vmap,
    run_vmap_of_jvp,
    run_vmap_of_vjp,
)
from harness.checks.dtype_leg import LEG_CHECKS, with_dtype_leg
from harness.checks.first_order import (
    run_jacobian,
    run_jvp,
    run_vjp,
)
from harness.checks.second_order import (
    run_jvp_of_vjp,
    run_vjp_of_vjp,
)
from harness.plans.composite import composite_plans, grad_of_vmap_plans, jvp_of_vmap_plans
from harness.plans.slices import derive_seed, seeded_call

# --- capabilities ----------------------------------------------------------------------------

NO_JVP = (
    "no jvp staticmethod: forward-mode AD (torch.func.jvp, jacfwd, vmap of jvp, "
    "forward-over-reverse) raises NotImplementedError; add @staticmethod jvp(ctx, *tangents) "
    "returning one tangent per output (save what it needs with ctx.save_for_forward)"
)
NO_BACKWARD = (
    "no backward staticmethod: reverse-mode AD (torch.func.vjp, grad, jacrev) cannot run; add "
    "@staticmethod backward(ctx, *grad_outputs) returning one gradient per input"
)


def first_reason(*reasons: Callable[[Entry], str | None]) -> Callable[[Entry], str | None]:
    """A check's ``supported``: the first of ``reasons`` that refuses the entry (None when
    none does)."""

    def supported(entry: Entry) -> str | None:
        for r in reasons:
            reason = r(entry)
            if reason:
                return reason
        return None

    return supported


def custom_op_no_jvp(entry: Entry) -> str:
    """Why a torch.library custom op has no forward mode, and what it needs instead (checked on
    torch 2.13: torch.library has register_autograd, register_vmap, register_fake, ... but
    nothing for forward mode, and forward AD through the op drops the tangent silently)."""
    return (
        f"custom op {entry.function_name}: torch.library has no forward-mode registration "
        "(register_autograd gives reverse mode only; on torch 2.13 torch.func.jvp through the "
        "op returns zero tangents and torch.autograd.forward_ad no tangent, without an error); "
        "forward mode needs the op written in differentiable torch ops (a "
        "CompositeImplicitAutograd kernel, torch.library.Library.impl(name, fn, "
        "'CompositeImplicitAutograd'), which forward AD traces through) or an "
        "autograd.Function with a jvp staticmethod instead of the custom op"
    )


def needs_jvp(entry: Entry) -> str | None:
    """Why forward mode cannot run (no jvp staticmethod, or a custom op), else None."""
    if entry.caps.jvp:
        return None
    return custom_op_no_jvp(entry) if entry.custom_op is not None else NO_JVP


def needs_backward(entry: Entry) -> str | None:
    """Why reverse mode cannot run (no backward staticmethod), else None."""
    return None if entry.caps.backward else NO_BACKWARD


def _jacfwd_needs_vmap(entry: Entry) -> str | None:
    reason = needs_vmap(entry)
    return f"jacfwd vmaps the Function over the basis tangents: {reason}" if reason else None


def needs_double_backward(entry: Entry) -> str | None:
    """Why second order is not checked (not claimed, or @once_differentiable), else None."""
    if entry.caps.double_backward:
        return None
    if entry.caps.once_differentiable:
        return ONCE_DIFFERENTIABLE_REASON
    return "the entry does not claim double backward (double_backward=False)"


_CATALOGUE: list[tuple[str, Callable[[CaseContext], str | None], Any, Any, str, str]] = [
    (
        "jvp",
        run_jvp,
        no_plan,
        first_reason(needs_setup_context, needs_jvp),
        fd.FD_REFERENCE,
        "torch.func.jvp with all tangents, each tangent alone (others absent) and non-contiguous "
        "inputs, against finite differences",
    ),
    (
        "vjp",
        run_vjp,
        no_plan,
        first_reason(needs_setup_context, needs_backward),
        fd.FD_REFERENCE,
        "torch.func.vjp and torch.autograd.grad, each differentiable input alone and all together "
        "x each differentiable output alone and all together, and non-contiguous, against finite "
        "differences (J^T c from the full Jacobian, or <J t, c> = <t, J^T c> when large)",
    ),
    (
        "grad_of_vmap",
        run_grad_of_vmap,
        grad_of_vmap_plans,
        first_reason(needs_vmap, needs_backward),
        LOOP_VJP_REFERENCE,
        "torch.func.vjp(vmap(f)) against per-slice eager vjps (unbatched inputs summed)",
    ),
    (
        "jvp_of_vmap",
        run_jvp_of_vmap,
        jvp_of_vmap_plans,
        first_reason(needs_vmap, needs_jvp),
        LOOP_JVP_REFERENCE,
        "torch.func.jvp(vmap(f)): forward mode through the vmap rule, tangents batched like "
        "their primals, against per-slice eager jvps",
    ),
    (
        "vmap_of_vjp",
        run_vmap_of_vjp,
        composite_plans("cotangents"),
        first_reason(needs_vmap, needs_backward),
        LOOP_VJP_REFERENCE,
        "vmap over (primals, cotangents) of torch.func.vjp; plans batch both, the primals alone "
        "and the cotangents alone (plan id: in_dims of the arguments, then of the cotangents)",
    ),
    (
        "vmap_of_jvp",
        run_vmap_of_jvp,
        composite_plans("tangents"),
        first_reason(needs_vmap, needs_jvp),
        LOOP_JVP_REFERENCE,
        "vmap over (primals, tangents) of torch.func.jvp; plans batch both, the primals alone "
        "and the tangents alone",
    ),
    (
        "jvp_of_vjp",
        run_jvp_of_vjp,
        no_plan,
        first_reason(needs_setup_context, needs_backward, needs_jvp, needs_double_backward),
        SECOND_ORDER_REFERENCE,
        "forward-over-reverse: torch.func.jvp of the torch.func.vjp (tangents on primals and "
        "cotangents)",
    ),
    (
        "vjp_of_vjp",
        run_vjp_of_vjp,
        no_plan,
        first_reason(needs_setup_context, needs_backward, needs_double_backward),
        SECOND_ORDER_REFERENCE,
        "double backward: torch.func.vjp of torch.func.vjp, and torch.autograd.grad with "
        "create_graph=True",
    ),
    (
        "jacrev",
        lambda ctx: run_jacobian(ctx, "jacrev"),
        no_plan,
        first_reason(needs_setup_context, needs_backward),
        fd.FD_REFERENCE,
        "torch.func.jacrev against the finite-difference Jacobian",
    ),
    (
        "jacfwd",
        lambda ctx: run_jacobian(ctx, "jacfwd"),
        no_plan,
        first_reason(needs_setup_context, needs_jvp, _jacfwd_needs_vmap),
        fd.FD_REFERENCE,
        "torch.func.jacfwd against the finite-difference Jacobian",
    ),
]


def with_fixed_rng(
    run: Callable[[CaseContext], str | None],
) -> Callable[[CaseContext], str | None]:
    """For a random entry, every call of the Function draws the same numbers.

    The RNG is reseeded (from the seed and the case id) before each call, so the
    Function is a deterministic function of its inputs: finite differences, eager
    references and transforms all see the same draws. Under vmap the draws must then
    be shared by the slices too, which is ``randomness='same'``; the vmap checks test
    the other modes.
    """

    def run_fixed(ctx: CaseContext) -> str | None:
        if ctx.entry.caps.randomness:
            seed = derive_seed(ctx.options.seed, ctx.case_id, "rng")
            ctx.entry = dataclasses.replace(ctx.entry, op=seeded_call(ctx.entry.call, seed))
            ctx.vmap_randomness = "same"
        try:
            return run(ctx)
        except Exception as e:
            refusal = torch_func_refusal(e)
            if refusal is None:
                raise
            raise Unsupported(refused_message(ctx.entry, refusal)) from None

    return run_fixed


def torch_func_refusal(exc: BaseException) -> str | None:
    """torch's message when ``exc`` (or what it wraps) is torch.func refusing to differentiate
    an autograd.Function that has no ``setup_context`` (else None)."""
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, RuntimeError) and TORCH_FUNC_REFUSAL in str(e):
            return str(e).strip().splitlines()[0]
        e = e.__cause__ or e.__context__
    return None


def refused_message(entry: Entry, refusal: str) -> str:
    """``unsupported``: torch.func refused to differentiate the entry (torch's words)."""
    what = (
        f"custom op {entry.function_name}: torch {torch.__version__.split('+')[0]}'s "
        "register_autograd builds an autograd.Function without setup_context, so torch.func "
        "cannot differentiate it"
        if entry.custom_op is not None
        else "torch.func cannot differentiate what this Function calls"
    )
    return (
        f"{what} (torch: {refusal!r}); its derivatives are checked through eager autograd "
        "instead (eager_vjp, eager_vjp_of_vjp)"
        if entry.custom_op is not None
        else f"{what} (torch: {refusal!r})"
    )


for _name, _run, _plans, _supported, _reference, _description in _CATALOGUE:
    if _name in LEG_CHECKS:
        _run = with_dtype_leg(_run)
    register(
        CheckSpec(
            _name, with_fixed_rng(_run), _plans, _supported, "autodiff", _reference, _description
        )
    )
