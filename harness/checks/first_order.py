"""First-order autodiff checks: ``jvp``, ``vjp``, ``jacrev`` and ``jacfwd``."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import torch

from harness.checks import fd_error
from harness.checks import finite_diff as fd
from harness.checks.autodiff_refs import (
    COTANGENT_WHY,
    EAGER_CUSTOM_REFERENCE,
    FULL_JACOBIAN_MAX,
    INPUT_WHY,
    Findings,
    Watch,
    attempt,
    close,
    diff_view,
    eager_protocol,
    is_custom,
    noncontiguous,
    random_like,
    reference_view,
    restricted,
)
from harness.checks.catalogue import (
    CaseContext,
    Unsupported,
)
from harness.checks.fd_shared import SharedDifferences
from harness.checks.forward_reverse import forward_derivative
from harness.checks.gauge import same_function
from harness.checks.recorded_use import noted_outside_use
from harness.checks.references import (
    eager_vjp,
    fd_jacobian,
    identity_problems,
    jacobian_fits,
    jvp_cases,
    reference_jacobian,
    require_jacobian_budget,
    vjp_cases,
)
from harness.core.errors import FunctionRaised


def _reraise(e: BaseException) -> None:
    raise e


# --- jvp -------------------------------------------------------------------------------------


def draw_tangents(ctx: CaseContext, view: Any) -> dict[int, torch.Tensor]:
    """The case's random tangents, by differentiated input (its "tangents" stream)."""
    return dict(zip(view.diff, random_like(ctx.generator("tangents"), view.primals())))


def draw_cotangents(ctx: CaseContext, view: Any) -> dict[int, torch.Tensor]:
    """The case's random cotangents, by differentiable output (its "cotangents" stream)."""
    outs = [view.outputs[j] for j in view.outs]
    return dict(zip(view.outs, random_like(ctx.generator("cotangents"), outs)))


def compare_grads(
    findings: Findings,
    view: Any,
    label: str,
    ref_name: str,
    ins: Sequence[int],
    grads: Sequence[Any],
    expected: Sequence[Any],
    *,
    custom: bool,
    order_hint_in_custom: bool = True,
) -> None:
    """Each input's gradient against its reference, with the hints a wrong backward earns:
    a formula wrong everywhere (not in custom mode, where the backward is the reference's
    own), gradients returned in the wrong order."""
    for i, actual, e in zip(ins, grads, expected):
        ok = findings.compare(
            f"{label}: grad of input {i} vs {ref_name} (reference)", actual, e, view.args[i].dtype
        )
        if not ok and not custom and _differs_everywhere(findings, actual, e):
            findings.hint(CUSTOM_GRADIENT_HINT)
        if ok or not isinstance(actual, torch.Tensor) or (custom and not order_hint_in_custom):
            continue
        for k, other in zip(ins, expected):
            if k != i and close(findings, actual, other):
                findings.hint(
                    f"the grad of input {i} equals the reference grad of input {k}: "
                    "backward returns its gradients in the wrong order?"
                )


def fd_identity_check(
    ctx: CaseContext,
    findings: Findings,
    view: Any,
    args64: Sequence[Any],
    label: str,
    ins: Sequence[int],
    outs: Sequence[int],
    cot: dict[int, torch.Tensor],
    grads: Sequence[Any],
    columns: int,
    regrad: Callable[[dict[int, torch.Tensor]], Sequence[Any]] | None = None,
    shared: SharedDifferences | None = None,
) -> None:
    """Without a Jacobian (too many columns): ``<grad, t> = <cot, J t>`` for a few random
    directions ``t``, ``J t`` by float64 finite differences; a failure in every direction
    earns the wrong-formula hint.

    Output elements where some ``J t`` did not converge (a kink within a step) would make
    every direction not comparable: with ``regrad`` (the Function's vjp for another
    cotangent) their cotangent is set to 0, the grads taken again, and they are counted as
    not comparable. ``shared``: the case's references, one set per input subset
    (``harness.checks.fd_shared``)."""
    shared = shared or SharedDifferences(ctx, view, args64)
    directions, jts = shared.for_outputs(ins, outs)
    if regrad is not None:
        masks = {
            j: _unconverged(findings, view, j, [jt[k] for jt in jts]) for k, j in enumerate(outs)
        }
        zeroed = sum(int(m.sum()) for m in masks.values())
        if zeroed:
            total = sum(m.numel() for m in masks.values())
            first_j = next(j for j in outs if bool(masks[j].any()))
            first = _flat_index(int(masks[first_j].reshape(-1).nonzero()[0]), masks[first_j].shape)
            what = f"{label}: {view.out_name(first_j)} (its cotangent set to 0 there)"
            findings.count_fd(total - zeroed, zeroed, first, what)
            cot = {
                j: c if j not in masks else torch.where(masks[j], torch.zeros_like(c), c)
                for j, c in cot.items()
            }
            grads = regrad(cot)
    rhs = [fd.dot_estimate(jt, [cot[j] for j in outs]) for jt in jts]
    before = len(findings.problems)
    identity_problems(label, findings, grads, directions, rhs, columns)
    if len(findings.problems) - before == len(directions):
        findings.hint(CUSTOM_GRADIENT_HINT)


def _unconverged(
    findings: Findings, view: Any, j: int, jts: Sequence[torch.Tensor]
) -> torch.Tensor:
    """Elements of output ``j`` where some direction's ``J t`` did not converge by more than
    the comparison's tolerance (``fd_error``)."""
    like = view.outputs[j]
    mask = torch.zeros(like.shape, dtype=torch.bool)
    for jt in jts:
        est = fd_error.of(jt)
        if est is None:
            continue
        rtol, atol = findings.tolerances_for(jt.to(like.dtype), jt)
        mask |= (est.spread > atol + rtol * jt.abs()).reshape(like.shape).cpu()
    return mask.to(like.device)


def _flat_index(flat: int, shape: Sequence[int]) -> str:
    idx = []
    for s in reversed(shape):
        idx.append(flat % s)
        flat //= s
    return "(" + ", ".join(map(str, reversed(idx))) + ")"


JvpReference = Callable[[Sequence[int]], list[torch.Tensor]]


def jvp_references(
    ctx: CaseContext,
    view: Any,
    tangents: dict[int, torch.Tensor],
    jac: Any,
) -> tuple[dict[str, JvpReference], Findings, dict[str, Findings]]:
    """What a jvp (torch.func's or eager forward-mode's) is compared with, per input subset:
    float64 central finite differences, and with ``jac`` (``gradient="custom"``: the custom
    backward's Jacobian) the tangent that follows the custom backward too. Also the findings
    that fail the case whatever the reference (contract and primal problems) and one
    findings list per reference."""
    entry = ctx.entry
    args64 = view.args64()

    def fd_reference(subset: Sequence[int]) -> list[torch.Tensor]:
        return attempt(  # type: ignore[no-any-return]
            "finite differences (reference, float64 forward)",
            fd.directional,
            view.fd_fn(args64, subset, view.outs),
            [args64[i] for i in subset],
            [tangents[i] for i in subset],
            step=entry.tolerances.fd_step,
        )

    def backward_reference(subset: Sequence[int]) -> list[torch.Tensor]:
        full = [tangents[i] if i in subset else None for i in view.diff]
        return fd.jvp_from_jacobian(jac, full, view.input_shapes)

    references: dict[str, JvpReference] = {fd.FD_REFERENCE: fd_reference}
    if jac is not None:
        references[EAGER_CUSTOM_REFERENCE] = backward_reference
    findings = Findings.derived(ctx, view)
    by_name = {name: Findings.derived(ctx, view) for name in references} if jac is not None else {}
    by_name.setdefault(fd.FD_REFERENCE, findings)
    return references, findings, by_name


def compare_jvp(
    findings: Findings,
    references: dict[str, JvpReference],
    by_name: dict[str, Findings],
    view: Any,
    name: str,
    label: str,
    subset: Sequence[int],
    primal: Sequence[Any],
    tangents: Sequence[torch.Tensor | None],
    how: str,
    side: str,
) -> None:
    """One jvp sub-case (``name``): the primal outputs under ``how`` against the plain call,
    then each output's tangent (``side``: what computed it) against every reference, into
    that reference's findings. A missing tangent (None: eager forward AD gave the output
    none) fails only where the reference is nonzero."""
    for k, j in enumerate(view.outs):
        findings.compare(
            f"{label}: primal {view.out_name(j)} under {how} vs the plain call",
            primal[k],
            view.outputs[j],
        )
    for ref_name, reference in references.items():
        found = by_name[ref_name]
        before_ref = len(found.problems)
        for j, actual, expected in zip(view.outs, tangents, reference(subset)):
            if actual is None:
                if bool(expected.abs().max() > 0) if expected.numel() else False:
                    found.add(
                        f"{label}: {view.out_name(j)} has no tangent (the jvp returned None "
                        f"for it, or forward AD did not reach it) but {ref_name} (reference) "
                        "is nonzero: forward-mode users get silent zeros"
                    )
                continue
            found.compare(
                f"{label}: tangent of {view.out_name(j)}{side} vs {ref_name} (reference)",
                actual,
                expected,
                view.outputs[j].dtype,
            )
        found.outcome(name, before_ref)


def run_jvp(ctx: CaseContext) -> str:
    view = diff_view(ctx)
    eager_protocol(ctx, view)
    same_function(ctx, view, "jvp")
    entry = ctx.entry
    tangents = draw_tangents(ctx, view)
    custom = is_custom(entry)
    jac = reference_jacobian(ctx, reference_view(ctx, view))[0] if custom else None
    references, findings, by_name = jvp_references(ctx, view, tangents, jac)

    for name, subset, strided in jvp_cases(view):
        label = f"jvp: {name}"
        before = len(findings.problems)
        args = list(view.args)
        tans = [tangents[i].clone() for i in subset]
        if strided:
            for i in subset:
                args[i] = noncontiguous(args[i])
            tans = [noncontiguous(t) for t in tans]
        watch = Watch()
        for i, a in enumerate(args):
            watch.add(f"input {i}", a)
        for i, t in zip(subset, tans):
            watch.add(f"the tangent of input {i}", t)
        f = restricted(entry, args, subset, view.outs)
        out, tout = attempt(
            f"{label} (torch.func.jvp)",
            torch.func.jvp,
            f,
            tuple(args[i] for i in subset),
            tuple(tans),
        )
        watch.verify(label, findings, "inputs and tangents must be left unchanged")
        compare_jvp(
            findings,
            references,
            by_name,
            view,
            name,
            label,
            subset,
            out,
            tout,
            "torch.func.jvp",
            ", torch.func.jvp (the Function's jvp)",
        )
        findings.outcome(name, before)
    if custom:
        return forward_derivative(ctx, "jvp", by_name, findings)
    findings.raise_if_any()
    return fd.FD_REFERENCE


# --- vjp -------------------------------------------------------------------------------------

CUSTOM_GRADIENT_HINT = (
    "if this gradient is intentional (surrogate, straight-through, tangent-space), check with "
    "`--gradient custom`"
)


def _differs_everywhere(findings: Findings, actual: Any, expected: torch.Tensor) -> bool:
    """A different rule rather than a slip: every value of the grad is outside tolerance, or
    the true derivative is zero everywhere (a piecewise-constant forward) and the grad is not."""
    if not isinstance(actual, torch.Tensor) or actual.shape != expected.shape:
        return False
    if actual.numel() == 0:
        return False
    rtol, atol = findings.tolerances_for(actual, expected)
    wide = torch.complex128 if actual.is_complex() or expected.is_complex() else torch.float64
    a, e = actual.detach().to(wide).cpu(), expected.detach().to(wide).cpu()
    bad = (a - e).abs() > atol + rtol * e.abs()
    flat_reference = bool((e.abs() <= atol).all())
    return bool(bad.all()) or (flat_reference and bool(bad.any()))


def run_vjp(ctx: CaseContext) -> str:
    view = diff_view(ctx)
    eager_protocol(ctx, view)
    entry = ctx.entry
    if not is_custom(entry):
        same_function(ctx, view, "vjp")
    findings = Findings.derived(ctx, view)
    cot = draw_cotangents(ctx, view)
    custom = is_custom(entry)
    columns = view.columns()
    jac = None
    ref_name = EAGER_CUSTOM_REFERENCE if custom else fd.FD_REFERENCE
    if not custom and columns <= FULL_JACOBIAN_MAX and not view.is_complex and jacobian_fits(view):
        jac, ref_name = reference_jacobian(ctx, view)
    args64 = view.args64()
    shared = SharedDifferences(ctx, view, args64)

    def reference(ins: Sequence[int], outs: Sequence[int]) -> list[torch.Tensor] | None:
        cots: list[torch.Tensor | None] = [cot[j] if j in outs else None for j in view.outs]
        if custom:
            ref = reference_view(ctx, view)
            full = attempt(
                "eager backward (reference)",
                eager_vjp,
                entry,
                ref.args,
                view.diff,
                view.outs,
                [
                    None if c is None else c.clone().to(ref.outputs[j].dtype)
                    for c, j in zip(cots, view.outs)
                ],
            )
        elif jac is not None:
            full = fd.vjp_from_jacobian(jac, cots, view.input_shapes)
        else:
            return None
        return [full[view.diff.index(i)] for i in ins]

    def check_grads(
        label: str,
        ins: Sequence[int],
        outs: Sequence[int],
        grads: Sequence[Any],
        regrad: Callable[[dict[int, torch.Tensor]], Sequence[Any]],
    ) -> None:
        expected = reference(ins, outs)
        if expected is not None:
            compare_grads(findings, view, label, ref_name, ins, grads, expected, custom=custom)
            return
        # only without gradient="custom" (whose reference, eager backward, is never None)
        fd_identity_check(
            ctx, findings, view, args64, label, ins, outs, cot, grads, columns, regrad, shared
        )

    def _vjp_subcheck(name: str, ins: Any, outs: Any, strided: bool) -> None:
        args = list(view.args)
        if strided:
            for i in ins:
                args[i] = noncontiguous(args[i])
        for how in ("torch.func.vjp", "torch.autograd.grad"):
            label = f"vjp: {name} ({how}, the Function's backward)"
            cots = [cot[j].clone() for j in outs]
            if strided:
                cots = [noncontiguous(c) for c in cots]
            watch = Watch()
            for i, a in enumerate(args):
                watch.add(f"input {i}", a)
            cot_watch = Watch()
            for j, c in zip(outs, cots):
                cot_watch.add(f"the cotangent of {view.out_name(j)}", c)
            if how == "torch.func.vjp":
                f = restricted(entry, args, ins, outs)
                _, vjp_fn = attempt(f"{label} forward", torch.func.vjp, f, *(args[i] for i in ins))
                grads = attempt(label, vjp_fn, tuple(cots))
            else:
                grads = attempt(label, eager_vjp, entry, args, ins, outs, cots)
            watch.verify(label, findings, INPUT_WHY)
            cot_watch.verify(label, findings, COTANGENT_WHY)

            regrad = functools.partial(_vjp_again, entry, args, ins, outs, how, label, strided)
            check_grads(label, ins, outs, grads, regrad)

    for name, ins, outs, strided in vjp_cases(view):
        before = len(findings.problems)
        try:
            _vjp_subcheck(name, ins, outs, strided)
        except FunctionRaised as e:
            if not noted_outside_use(ctx.notes, entry, f"vjp: {name}", ins, view.diff, e):
                raise
            continue
        findings.outcome(name, before)
    findings.raise_if_any()
    return ref_name


def _vjp_again(
    entry: Any,
    args: Sequence[Any],
    ins: Sequence[int],
    outs: Sequence[int],
    how: str,
    label: str,
    strided: bool,
    new: dict[int, torch.Tensor],
) -> Sequence[Any]:
    """The vjp case's grads again for other cotangents ``new`` (``fd_identity_check`` sets
    the cotangent of output elements that are not comparable to 0)."""
    cs = [new[j].clone() for j in outs]
    if strided:
        cs = [noncontiguous(c) for c in cs]
    if how == "torch.func.vjp":
        f = restricted(entry, args, ins, outs)
        _, again = attempt(f"{label} forward", torch.func.vjp, f, *(args[i] for i in ins))
        return attempt(label, again, tuple(cs))  # type: ignore[no-any-return]
    return attempt(label, eager_vjp, entry, args, ins, outs, cs)  # type: ignore[no-any-return]


# --- jacrev / jacfwd -------------------------------------------------------------------------


def run_jacobian(ctx: CaseContext, kind: str) -> str:
    view = diff_view(ctx)
    require_jacobian_budget(view, f"{kind} (torch.func.{kind} and its reference)")
    eager_protocol(ctx, view)
    if not is_custom(ctx.entry) or kind == "jacfwd":
        same_function(ctx, view, kind)
    findings = Findings.derived(ctx, view)
    transform: Callable[..., Any] = torch.func.jacrev
    if kind == "jacfwd":
        transform = functools.partial(torch.func.jacfwd, randomness=ctx.vmap_randomness)
    watch = Watch()
    for i, a in enumerate(view.args):
        watch.add(f"input {i}", a)
    argnums = tuple(range(len(view.diff)))
    try:
        jac = transform(view.fn(), argnums=argnums)(*view.primals())
    except RuntimeError as e:
        if view.is_complex and "to be real" in str(e):
            raise Unsupported(
                f"torch.func.{kind} refuses complex inputs and outputs (torch: {e}); the "
                "complex derivatives are checked by jvp and vjp"
            ) from None
        attempt(f"{kind} (torch.func.{kind})", _reraise, e)
        raise
    watch.verify(kind, findings, INPUT_WHY)
    refs = [reference_jacobian(ctx, view)]
    if kind == "jacfwd" and is_custom(ctx.entry):  # either reference, finite differences first
        refs.insert(0, (fd_jacobian(ctx, view), fd.FD_REFERENCE))
    by_name = {name: Findings.derived(ctx, view) for _, name in refs} if len(refs) > 1 else {}
    for ref, ref_name in refs:
        found = by_name.get(ref_name, findings)
        for k, j in enumerate(view.outs):
            for m, i in enumerate(view.diff):
                found.compare(
                    f"{kind}: d({view.out_name(j)})/d(input {i}), torch.func.{kind} (the Function's "
                    f"{'backward' if kind == 'jacrev' else 'jvp'}) vs {ref_name} Jacobian "
                    "(reference)",
                    jac[k][m],
                    ref[k][m],
                )
    if by_name:
        return forward_derivative(ctx, kind, by_name, findings)
    findings.raise_if_any()
    return refs[0][1]
