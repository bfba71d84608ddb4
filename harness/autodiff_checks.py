"""The autodiff checks: first and second order, Jacobians, and autodiff composed with vmap.

Every check is a small ``run(ctx)`` built from a few composable pieces:

* ``DiffView``: which arguments are differentiated (floating-point tensors only;
  integer/bool tensors and Python values are held fixed) and which outputs get
  cotangents (floating-point outputs not declared in ``caps.nondiff_outputs``).
* ``restricted``: the Function as a function of a subset of its inputs, returning
  a subset of its outputs (in-place arguments are cloned first, so a
  ``mark_dirty`` Function is differentiated through a clone of a leaf).
* References (never the thing being checked): finite differences in float64
  (``harness.finite_diff``); for ``gradient="custom"`` entries, the Function's own
  eager backward through ``torch.autograd.grad``; for the composite vmap
  checks, a loop of per-slice eager calls (``torch.autograd.grad`` /
  ``torch.autograd.forward_ad``), which never runs a vmap rule.
* ``Findings``: comparisons and contract checks collected with one-line messages
  that name the sub-check, which side is the Function's and which the reference.

Second order: ``jvp_of_vjp`` is compared with the finite-difference derivative of the
eager first-order vjp ``g(x, c) = J(x)^T c`` along the tangents. For ``vjp_of_vjp`` of a
``derivative`` entry the symmetry of second derivatives makes the reference two
directional differences (``d<g, w>/dx`` is the derivative of ``g`` along ``w``, and
``d<g, w>/dc = J w``); a ``custom`` entry gets the full FD Jacobian of ``g`` (or the
identity with random directions when it is large).

Plans of the composite checks (``CompositePlan``): the Function's in_dims from the
single-level plan strategy with the cotangents/tangents batched at 0, then the
extras at -1, the extras alone (arguments unbatched: the vmap rule is not
called), the arguments alone (extras unbatched) and one nested plan. Ids read
``in_dims=(0,None),cotangents=0``.

Contract sub-checks run in every case: the inputs are unchanged afterwards
(in-place arguments are cloned before each call, so the caller's never
change), incoming cotangents/tangents are unchanged by backward/jvp, declared
non-differentiable outputs do not require grad, and a declared in-place
argument is returned as the same tensor object (``mark_dirty``).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.autograd.forward_ad as fwAD

from autograd_function_db.entry import GRADIENT_CUSTOM, Entry

from . import finite_diff as fd
from .batching import (
    MID,
    ArgLayout,
    LevelPlan,
    Plan,
    SliceSource,
    as_tuple,
    build_batched_args,
    concrete_out_dims,
    derive_seed,
    loop_reference,
    nested_plans,
    normalize_dim,
    seeded_call,
    single_level_plans,
    slice_call_args,
    vmapped,
)
from .checks import (
    CaseContext,
    CheckFailure,
    CheckSpec,
    Unsupported,
    needs_setup_context,
    needs_vmap,
    no_plan,
    register,
)
from .compare import compare_tensors
from .options import Options

#: Above this many Jacobian columns (input elements), vjp references use the identity
#: <J t, c> = <t, J^T c> with random directions instead of the full FD Jacobian.
FULL_JACOBIAN_MAX = 160
#: Random directions for the identity check.
IDENTITY_DIRECTIONS = 3
#: At most this many problems are spelled out in one failure message.
MAX_PROBLEMS = 4
#: Composite checks: cap on the primal in_dims plans (before the tangent-only/primal-only ones).
COMPOSITE_PLAN_CAP = 8

EAGER_CUSTOM_REFERENCE = "eager backward (gradient=custom)"
LOOP_VJP_REFERENCE = "loop of per-slice eager vjp (torch.autograd.grad)"
LOOP_JVP_REFERENCE = "loop of per-slice eager jvp (torch.autograd.forward_ad)"
SECOND_ORDER_REFERENCE = "finite differences (float64) of the eager first-order vjp"

ONCE_DIFFERENTIABLE_REASON = (
    "backward is @once_differentiable: torch.func silently returns zeros (no error) for "
    "second-order derivatives through it, so second order is not checked; write backward "
    "with differentiable torch ops and drop the decorator to claim double backward"
)


class FunctionRaised(Exception):
    """The Function (or torch on its behalf) raised inside a named sub-check."""


def attempt(label: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call ``fn``; an exception is re-raised as FunctionRaised naming the sub-check."""
    try:
        return fn(*args, **kwargs)
    except (CheckFailure, Unsupported, FunctionRaised):
        raise
    except Exception as e:
        from .textsafe import safe_str  # an exception whose __str__ raises still gets a line

        raise FunctionRaised(f"{label}: {type(e).__name__}: {safe_str(e)}").with_traceback(
            e.__traceback__
        ) from e


# --- findings ------------------------------------------------------------------------------


@dataclass
class Findings:
    """Problems found by one case, raised together as one CheckFailure."""

    rtol: float
    atol: float
    problems: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    passed: list[str] = field(default_factory=list)
    hints: list[str] = field(default_factory=list)

    def hint(self, text: str) -> None:
        if text not in self.hints:
            self.hints.append(text)

    def outcome(self, subcheck: str, problems_before: int) -> None:
        """Record whether ``subcheck`` added problems (for the summary of a failure)."""
        target = self.failed if len(self.problems) > problems_before else self.passed
        if subcheck not in target:
            target.append(subcheck)

    @classmethod
    def of(cls, ctx: CaseContext) -> Findings:
        rtol, atol = ctx.tolerances
        return cls(rtol, atol)

    def add(self, message: str | None) -> None:
        if message:
            self.problems.append(message)

    def compare(
        self,
        label: str,
        actual: Any,
        expected: torch.Tensor,
        dtype: torch.dtype | None = None,
    ) -> bool:
        """Values within tolerance; ``dtype``, when given, is the dtype ``actual`` must have."""
        if not isinstance(actual, torch.Tensor):
            self.add(f"{label}: got {type(actual).__name__}, reference a tensor")
            return False
        if dtype is not None and actual.dtype != dtype:
            self.add(f"{label}: dtype {actual.dtype}, expected {dtype}")
            return False
        msg = compare_tensors(
            actual.detach(),
            expected.detach().to(actual.device),
            rtol=self.rtol,
            atol=self.atol,
            label=label,
            check_dtype=False,
        )
        self.add(msg)
        return msg is None

    def raise_if_any(self, hint: str = "") -> None:
        if not self.problems:
            return
        shown = self.problems[:MAX_PROBLEMS]
        more = len(self.problems) - len(shown)
        text = "; ".join(shown) + (f"; and {more} more" if more > 0 else "")
        if self.failed and self.passed:
            summary = "failing sub-checks: " + " ".join(f"[{n}]" for n in self.failed)
            passing = [n for n in self.passed if n not in self.failed]
            text = summary + "; passing: " + " ".join(f"[{n}]" for n in passing) + " -- " + text
        hints = [*self.hints, *([hint] if hint else [])]
        raise CheckFailure(text + "".join(f" -- {h}" for h in hints))


def _close(findings: Findings, actual: torch.Tensor, expected: torch.Tensor) -> bool:
    if actual.shape != expected.shape:
        return False
    a, e = actual.detach().to(torch.float64), expected.detach().to(torch.float64)
    return bool(torch.allclose(a, e, rtol=findings.rtol, atol=findings.atol))


class Watch:
    """Snapshots of tensors that a call must leave unchanged."""

    def __init__(self) -> None:
        self._items: list[tuple[str, torch.Tensor, torch.Tensor]] = []

    def add(self, what: str, t: Any) -> None:
        if isinstance(t, torch.Tensor):
            self._items.append((what, t, t.detach().clone()))

    def verify(self, label: str, findings: Findings, why: str) -> None:
        for what, t, before in self._items:
            after = t.detach()
            if after.shape != before.shape or not torch.equal(after, before):
                findings.add(f"{label}: {what} was modified in place by the call ({why})")


INPUT_WHY = "declare it with inplace_args (and ctx.mark_dirty) if that is intended"
COTANGENT_WHY = "backward must not modify grad_output"
TANGENT_WHY = "jvp must not modify the tangent of an input it does not modify"


# --- the differentiable view of an entry -----------------------------------------------------


def restricted(
    entry: Entry, base: Sequence[Any], inputs: Sequence[int], outputs: Sequence[int]
) -> Callable[..., tuple[Any, ...]]:
    """The Function as a function of the arguments at ``inputs`` (others fixed to ``base``),
    returning the outputs at ``outputs``. In-place arguments are cloned before the call."""
    inplace = set(entry.caps.inplace_args)
    base = tuple(base)

    def f(*xs: Any) -> tuple[Any, ...]:
        call = list(base)
        for i, x in zip(inputs, xs):
            call[i] = x
        call = [
            c.clone() if k in inplace and isinstance(c, torch.Tensor) else c
            for k, c in enumerate(call)
        ]
        out = as_tuple(entry.call(*call))
        return tuple(out[j] for j in outputs)

    return f


def _all_outputs(entry: Entry) -> Callable[..., tuple[Any, ...]]:
    inplace = set(entry.caps.inplace_args)

    def f(*args: Any) -> tuple[Any, ...]:
        call = [
            a.clone() if k in inplace and isinstance(a, torch.Tensor) else a
            for k, a in enumerate(args)
        ]
        return as_tuple(entry.call(*call))

    return f


@dataclass
class DiffView:
    entry: Entry
    args: tuple[Any, ...]
    diff: tuple[int, ...]  # differentiable argument positions
    outs: tuple[int, ...]  # differentiable output indices
    outputs: tuple[Any, ...]  # the plain call's outputs (all of them)

    def primals(self, args: Sequence[Any] | None = None) -> list[torch.Tensor]:
        args = self.args if args is None else args
        return [args[i] for i in self.diff]

    @property
    def input_shapes(self) -> list[torch.Size]:
        return [self.args[i].shape for i in self.diff]

    def fn(self, args: Sequence[Any] | None = None) -> Callable[..., tuple[Any, ...]]:
        return restricted(self.entry, self.args if args is None else args, self.diff, self.outs)

    def args64(self) -> tuple[Any, ...]:
        return tuple(fd.upcast(a) for a in self.args)

    def columns(self) -> int:
        return sum(self.args[i].numel() for i in self.diff)


def diff_view(ctx: CaseContext) -> DiffView:
    entry = ctx.entry
    args = ctx.slices.args()
    if any(isinstance(a, torch.Tensor) and a.is_complex() for a in args):
        raise Unsupported("complex inputs: the autodiff checks cover real dtypes only")
    diff = tuple(i for i, a in enumerate(args) if fd.is_differentiable_dtype(a))
    if not diff:
        raise Unsupported("no floating-point tensor argument: nothing to differentiate")
    with torch.no_grad():
        outputs = attempt("plain call", _all_outputs(entry), *args)
    outs = tuple(
        j
        for j, o in enumerate(outputs)
        if fd.is_differentiable_dtype(o) and j not in entry.caps.nondiff_outputs
    )
    if not outs:
        raise Unsupported(
            "no differentiable output (all are integer, bool or declared non-differentiable)"
        )
    return DiffView(entry, args, diff, outs, tuple(outputs))


def random_like(gen: torch.Generator, likes: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Standard normal tensors shaped and typed like ``likes`` (drawn in float64)."""
    return [
        torch.randn(t.shape, generator=gen, dtype=torch.float64).to(t.dtype).to(t.device)
        for t in likes
    ]


def noncontiguous(t: torch.Tensor) -> torch.Tensor:
    """The same values in a non-contiguous layout (stride 2 in the last dim)."""
    if t.dim() == 0 or t.numel() <= 1:
        return t.clone()
    return torch.stack([t, torch.zeros_like(t)], dim=-1).select(-1, 0)


def eager_protocol(ctx: CaseContext, view: DiffView) -> None:
    """Contract of a plain eager call with leaves that require grad (raises on a violation)."""
    entry = ctx.entry
    findings = Findings.of(ctx)
    args = ctx.slices.args()
    leaves = [
        a.detach().clone().requires_grad_(True) if i in view.diff else a for i, a in enumerate(args)
    ]
    watch = Watch()
    for i, a in enumerate(leaves):
        watch.add(f"input {i}", a)
    inplace = set(entry.caps.inplace_args)
    call = [
        a.clone() if i in inplace and isinstance(a, torch.Tensor) else a
        for i, a in enumerate(leaves)
    ]
    with torch.enable_grad():
        outs = as_tuple(attempt("eager call", entry.call, *call))
    watch.verify("eager call", findings, INPUT_WHY)
    for i in sorted(inplace):
        if i >= len(call) or not isinstance(call[i], torch.Tensor):
            continue
        if not any(o is call[i] for o in outs):
            findings.add(
                f"in-place protocol: argument {i} is declared in-place (inplace_args) but no "
                "output is that same tensor object: modify the input, call ctx.mark_dirty(input) "
                "in setup_context and return the input itself"
            )
        elif (
            i in view.diff
            and call[i].grad_fn is not None
            and "Clone" in type(call[i].grad_fn).__name__
        ):
            findings.add(
                f"in-place protocol: after the call argument {i} still has grad_fn "
                f"{type(call[i].grad_fn).__name__}: the Function did not record itself on the "
                "modified input (ctx.mark_dirty missing?)"
            )
    for j in entry.caps.nondiff_outputs:
        if j < len(outs) and isinstance(outs[j], torch.Tensor) and outs[j].requires_grad:
            findings.add(
                f"non-differentiable outputs: output {j} is declared non-differentiable "
                "(nondiff_outputs) but requires grad; call ctx.mark_non_differentiable on it "
                "in setup_context"
            )
    findings.raise_if_any()


# --- eager references (no torch.func) --------------------------------------------------------


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
        pairs = [
            (o, c)
            for o, c in zip(outs, cotangents)
            if c is not None and isinstance(o, torch.Tensor) and o.requires_grad
        ]
        if not pairs:
            return tuple(torch.zeros_like(x) for x in leaves)
        grads = torch.autograd.grad(
            [o for o, _ in pairs],
            leaves,
            [c for _, c in pairs],
            allow_unused=True,
            materialize_grads=True,
            create_graph=create_graph,
        )
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


def is_custom(entry: Entry) -> bool:
    return entry.gradient == GRADIENT_CUSTOM


#: FD Jacobians by (entry, sample, seed, dtype, device): vjp, jacrev and jacfwd of one sample
#: share one (the reference is a deterministic function of the base sample).
_JACOBIAN_CACHE: dict[Any, list[list[torch.Tensor]]] = {}
_JACOBIAN_CACHE_SIZE = 32


def reference_jacobian(ctx: CaseContext, view: DiffView) -> tuple[list[list[torch.Tensor]], str]:
    """The full reference Jacobian of the view: FD, or the eager backward for gradient=custom."""
    if is_custom(view.entry):
        return eager_jacobian(view), EAGER_CUSTOM_REFERENCE
    key: Any = (
        view.entry,
        ctx.sample_index,
        ctx.options.seed,
        ctx.options.dtype,
        ctx.options.device,
    )
    try:
        cached = _JACOBIAN_CACHE.get(key)
    except TypeError:  # an entry with unhashable fields
        key, cached = None, None
    if cached is not None:
        return cached, fd.FD_REFERENCE
    args64 = view.args64()
    blocks = attempt(
        "finite differences (reference, float64 forward)",
        fd.jacobian,
        restricted(view.entry, args64, view.diff, view.outs),
        view.primals(args64),
        step=view.entry.tolerances.fd_step,
    )
    if key is not None:
        if len(_JACOBIAN_CACHE) >= _JACOBIAN_CACHE_SIZE:
            _JACOBIAN_CACHE.pop(next(iter(_JACOBIAN_CACHE)))
        _JACOBIAN_CACHE[key] = blocks
    return blocks, fd.FD_REFERENCE


def _subsets(items: Sequence[int], word: str, plural: str) -> list[tuple[str, tuple[int, ...]]]:
    subsets = [(f"all {plural}", tuple(items))]
    if len(items) > 1:
        subsets += [(f"{word} {k} alone", (k,)) for k in items]
    return subsets


# --- jvp -------------------------------------------------------------------------------------


def run_jvp(ctx: CaseContext) -> str:
    view = diff_view(ctx)
    eager_protocol(ctx, view)
    entry = ctx.entry
    findings = Findings.of(ctx)
    tangents = dict(zip(view.diff, random_like(ctx.generator("tangents"), view.primals())))
    custom = is_custom(entry)
    jac, ref_name = reference_jacobian(ctx, view) if custom else (None, fd.FD_REFERENCE)
    args64 = view.args64()

    def reference(subset: Sequence[int]) -> list[torch.Tensor]:
        if jac is not None:
            full = [tangents[i] if i in subset else None for i in view.diff]
            return fd.jvp_from_jacobian(jac, full, view.input_shapes)
        return attempt(
            "finite differences (reference, float64 forward)",
            fd.directional,
            restricted(entry, args64, subset, view.outs),
            [args64[i] for i in subset],
            [tangents[i] for i in subset],
            step=entry.tolerances.fd_step,
        )

    cases = [(name, subset, False) for name, subset in _subsets(view.diff, "input", "inputs")]
    cases.append(("non-contiguous inputs and tangents", view.diff, True))
    for name, subset, strided in cases:
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
        for k, j in enumerate(view.outs):
            findings.compare(
                f"{label}: primal output {j} under torch.func.jvp vs the plain call",
                out[k],
                view.outputs[j],
            )
        for j, actual, expected in zip(view.outs, tout, reference(subset)):
            findings.compare(
                f"{label}: tangent of output {j}, torch.func.jvp (the Function's jvp) vs "
                f"{ref_name} (reference)",
                actual,
                expected,
                view.outputs[j].dtype,
            )
        findings.outcome(name, before)
    findings.raise_if_any()
    return ref_name


# --- vjp -------------------------------------------------------------------------------------


def _identity_problems(
    label: str,
    findings: Findings,
    grads: Sequence[torch.Tensor],
    directions: Sequence[Sequence[torch.Tensor]],
    rhs: Sequence[float],
    columns: int,
) -> None:
    """<t, J^T c> from the Function vs <J t, c> from finite differences, per direction."""
    for k, (t, r) in enumerate(zip(directions, rhs)):
        lhs = fd.dot(t, grads)
        err = abs(lhs - r)
        scale = max(fd.abs_dot(t, grads), abs(r))
        bound = findings.atol * sum(float(x.abs().sum()) for x in t) + findings.rtol * scale
        if not err <= bound:
            findings.add(
                f"{label}: <t, J^T c> from the Function's vjp = {lhs:.6g}, <J t, c> from "
                f"{fd.FD_REFERENCE} (reference) = {r:.6g} for random direction t #{k}: "
                f"abs error {err:.3g}, rel error {err / max(abs(r), 1e-300):.3g}; "
                f"rtol={findings.rtol:g}, atol={findings.atol:g} (identity check: "
                f"{columns} Jacobian columns > {FULL_JACOBIAN_MAX})"
            )


def run_vjp(ctx: CaseContext) -> str:
    view = diff_view(ctx)
    eager_protocol(ctx, view)
    entry = ctx.entry
    findings = Findings.of(ctx)
    cot = dict(
        zip(
            view.outs,
            random_like(ctx.generator("cotangents"), [view.outputs[j] for j in view.outs]),
        )
    )
    custom = is_custom(entry)
    columns = view.columns()
    jac = None
    ref_name = EAGER_CUSTOM_REFERENCE if custom else fd.FD_REFERENCE
    if not custom and columns <= FULL_JACOBIAN_MAX:
        jac, ref_name = reference_jacobian(ctx, view)
    args64 = view.args64()

    def reference(ins: Sequence[int], outs: Sequence[int]) -> list[torch.Tensor] | None:
        cots: list[torch.Tensor | None] = [cot[j] if j in outs else None for j in view.outs]
        if custom:
            full = attempt(
                "eager backward (reference)",
                eager_vjp,
                entry,
                view.args,
                view.diff,
                view.outs,
                [None if c is None else c.clone() for c in cots],
            )
        elif jac is not None:
            full = fd.vjp_from_jacobian(jac, cots, view.input_shapes)
        else:
            return None
        return [full[view.diff.index(i)] for i in ins]

    def check_grads(
        label: str, ins: Sequence[int], outs: Sequence[int], grads: Sequence[Any]
    ) -> None:
        expected = reference(ins, outs)
        if expected is not None:
            for i, actual, e in zip(ins, grads, expected):
                ok = findings.compare(
                    f"{label}: grad of input {i} vs {ref_name} (reference)",
                    actual,
                    e,
                    view.args[i].dtype,
                )
                if not ok and isinstance(actual, torch.Tensor):
                    for k, other in zip(ins, expected):
                        if k != i and _close(findings, actual, other):
                            findings.hint(
                                f"the grad of input {i} equals the reference grad of input {k}: "
                                "backward returns its gradients in the wrong order?"
                            )
            return
        gen = ctx.generator("directions", label)
        directions = [
            random_like(gen, [view.args[i] for i in ins]) for _ in range(IDENTITY_DIRECTIONS)
        ]
        f64 = restricted(entry, args64, ins, outs)
        rhs = []
        for t in directions:
            jt = attempt(
                "finite differences (reference, float64 forward)",
                fd.directional,
                f64,
                [args64[i] for i in ins],
                t,
                step=entry.tolerances.fd_step,
            )
            rhs.append(fd.dot(jt, [cot[j] for j in outs]))
        _identity_problems(label, findings, grads, directions, rhs, columns)

    cases = [
        (f"{in_name}, {out_name}", ins, outs, False)
        for in_name, ins in _subsets(view.diff, "input", "inputs")
        for out_name, outs in _subsets(view.outs, "output", "outputs")
    ]
    cases.append(("non-contiguous inputs and cotangents", view.diff, view.outs, True))
    for name, ins, outs, strided in cases:
        before = len(findings.problems)
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
                cot_watch.add(f"the cotangent of output {j}", c)
            if how == "torch.func.vjp":
                f = restricted(entry, args, ins, outs)
                _, vjp_fn = attempt(f"{label} forward", torch.func.vjp, f, *(args[i] for i in ins))
                grads = attempt(label, vjp_fn, tuple(cots))
            else:
                grads = attempt(label, eager_vjp, entry, args, ins, outs, cots)
            watch.verify(label, findings, INPUT_WHY)
            cot_watch.verify(label, findings, COTANGENT_WHY)
            check_grads(label, ins, outs, grads)
        findings.outcome(name, before)
    findings.raise_if_any()
    return ref_name


# --- jacrev / jacfwd -------------------------------------------------------------------------


def run_jacobian(ctx: CaseContext, kind: str) -> str:
    view = diff_view(ctx)
    eager_protocol(ctx, view)
    findings = Findings.of(ctx)
    transform: Callable[..., Any] = torch.func.jacrev
    if kind == "jacfwd":
        transform = functools.partial(torch.func.jacfwd, randomness=ctx.vmap_randomness)
    watch = Watch()
    for i, a in enumerate(view.args):
        watch.add(f"input {i}", a)
    argnums = tuple(range(len(view.diff)))
    jac = attempt(
        f"{kind} (torch.func.{kind})", transform(view.fn(), argnums=argnums), *view.primals()
    )
    watch.verify(kind, findings, INPUT_WHY)
    ref, ref_name = reference_jacobian(ctx, view)
    for k, j in enumerate(view.outs):
        for m, i in enumerate(view.diff):
            findings.compare(
                f"{kind}: d(output {j})/d(input {i}), torch.func.{kind} (the Function's "
                f"{'backward' if kind == 'jacrev' else 'jvp'}) vs {ref_name} Jacobian (reference)",
                jac[k][m],
                ref[k][m],
            )
    findings.raise_if_any()
    return ref_name


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


# --- autodiff composed with vmap -------------------------------------------------------------


@dataclass(frozen=True)
class CompositePlan(Plan):
    """A plan over the Function's arguments plus one batch dim per level for every extra
    argument (the cotangents or tangents), appended after the Function's arguments."""

    extra_name: str = "cotangents"
    extra_dims: tuple[int | None, ...] = ()

    @property
    def id(self) -> str:
        parts = Plan.id.fget(self).split("|")  # type: ignore[attr-defined]
        return "|".join(
            f"{p},{self.extra_name}={'None' if d is None else d}"
            for p, d in zip(parts, self.extra_dims)
        )

    def to_dict(self) -> dict[str, Any]:
        d = super().to_dict()
        d["id"] = self.id
        d["extra"] = {"name": self.extra_name, "in_dims": list(self.extra_dims)}
        return d

    def combined(self, n_extra: int) -> Plan:
        """The plan over (arguments..., extras...) that the batching helpers understand."""
        return Plan(
            tuple(
                dataclasses.replace(lv, in_dims=(*lv.in_dims, *([d] * n_extra)))
                for lv, d in zip(self.levels, self.extra_dims)
            ),
            self.strategy,
        )


class WithExtras:
    """A SliceSource look-alike: each slice's arguments followed by its own random extras."""

    def __init__(
        self, slices: SliceSource, make: Callable[[tuple[int, ...]], list[torch.Tensor]]
    ) -> None:
        self._slices = slices
        self._make = make
        self._cache: dict[tuple[int, ...], list[torch.Tensor]] = {}

    def args(self, path: tuple[int, ...] = ()) -> tuple[Any, ...]:
        key = tuple(path)
        while key and key[-1] == 0:
            key = key[:-1]
        if key not in self._cache:
            self._cache[key] = self._make(key)
        return (*self._slices.args(path), *(e.clone() for e in self._cache[key]))


def _composite_plans(extra_name: str) -> Callable[[ArgLayout, Options], list[Plan | None]]:
    def plans(layout: ArgLayout, options: Options) -> list[Plan | None]:
        units = layout.units()
        if not units:
            return []
        b = options.batch_sizes[0]
        cap = min(options.plan_cap, COMPOSITE_PLAN_CAP)
        zero = tuple(0 if r is not None else None for r in layout.ranks)
        none = tuple(None for _ in layout.ranks)
        candidates: list[Plan] = [
            CompositePlan(p.levels, p.strategy, extra_name, (0,))
            for p in single_level_plans(layout, b, cap=cap, seed=options.seed)
            if p.levels[0].out_dims != MID  # out_dims=-1 stays; the vmap checks cover the rest
        ]
        candidates += [
            CompositePlan((LevelPlan(b, zero),), "composite", extra_name, (-1,)),
            CompositePlan((LevelPlan(b, none),), "composite", extra_name, (0,)),
            CompositePlan((LevelPlan(b, zero),), "composite", extra_name, (None,)),
        ]
        nb = tuple(options.nested_batch_sizes)
        if len(nb) >= 2:
            candidates.append(
                CompositePlan(
                    tuple(LevelPlan(s, zero) for s in nb),
                    "nested-fixed",
                    extra_name,
                    (0,) * len(nb),
                )
            )
        out: list[Plan | None] = []
        seen: set[str] = set()
        for p in candidates:
            if p.id not in seen:
                seen.add(p.id)
                out.append(p)
        return out

    return plans


def _grad_of_vmap_plans(layout: ArgLayout, options: Options) -> list[Plan | None]:
    b = options.batch_sizes[0]
    cap = min(options.plan_cap, COMPOSITE_PLAN_CAP)
    plans: list[Plan | None] = list(single_level_plans(layout, b, cap=cap, seed=options.seed))
    nested = nested_plans(layout, options.nested_batch_sizes)
    if nested:
        plans.append(nested[0])
    return plans


def _extras_maker(
    ctx: CaseContext, kind: str, likes: Sequence[torch.Tensor]
) -> Callable[[tuple[int, ...]], list[torch.Tensor]]:
    return lambda key: random_like(ctx.generator(kind, key), likes)


def _run_composite(
    ctx: CaseContext,
    check: str,
    kind: str,
    likes: Sequence[torch.Tensor],
    actual_fn: Callable[..., tuple[Any, ...]],
    reference_fn: Callable[..., tuple[Any, ...]],
    names: Sequence[str],
    sides: str,
) -> None:
    plan = ctx.plan
    assert isinstance(plan, CompositePlan)
    findings = Findings.of(ctx)
    full = plan.combined(len(likes))
    source = WithExtras(ctx.slices, _extras_maker(ctx, kind, likes))
    expected, returned_tuple = loop_reference(reference_fn, full, source)  # type: ignore[arg-type]
    out_dims = concrete_out_dims(full, expected, returned_tuple)
    batched = build_batched_args(full, source)  # type: ignore[arg-type]
    label = f"{check} {plan.id}"
    n = len(ctx.sample.args)
    watch = Watch()
    for i, a in enumerate(batched):
        watch.add(f"input {i}" if i < n else f"batched {kind} {i - n}", a)
    actual = as_tuple(
        attempt(label, vmapped(actual_fn, full, out_dims, randomness=ctx.vmap_randomness), *batched)
    )
    watch.verify(label, findings, f"the Function must leave its inputs and {kind} unchanged")
    if len(actual) != len(expected):
        findings.add(f"{label}: {len(actual)} results, reference {len(expected)}")
    for nm, a, e in zip(names, actual, expected):
        findings.compare(f"{label}: {nm}, {sides}", a, e, e.dtype)
    findings.raise_if_any()


def run_vmap_of_vjp(ctx: CaseContext) -> str:
    view = diff_view(ctx)
    eager_protocol(ctx, view)
    entry = ctx.entry
    n = len(view.args)

    def actual(*a: Any) -> tuple[Any, ...]:
        f = restricted(entry, a[:n], view.diff, view.outs)
        vjp_fn = torch.func.vjp(f, *(a[i] for i in view.diff))[1]
        return tuple(vjp_fn(tuple(a[n:])))

    def reference(*a: Any) -> tuple[Any, ...]:
        return eager_vjp(entry, a[:n], view.diff, view.outs, list(a[n:]))

    _run_composite(
        ctx,
        "vmap_of_vjp",
        "cotangents",
        [view.outputs[j] for j in view.outs],
        actual,
        reference,
        [f"grad of input {i}" for i in view.diff],
        f"vmap of torch.func.vjp (the Function's backward under vmap) vs {LOOP_VJP_REFERENCE} (reference)",
    )
    return LOOP_VJP_REFERENCE


def run_vmap_of_jvp(ctx: CaseContext) -> str:
    view = diff_view(ctx)
    eager_protocol(ctx, view)
    entry = ctx.entry
    n = len(view.args)
    plan = ctx.plan
    assert isinstance(plan, CompositePlan)
    for lv, extra in zip(plan.levels, plan.extra_dims):
        batched_inplace = [
            i for i in entry.caps.inplace_args if i < n and lv.in_dims[i] is not None
        ]
        if batched_inplace and extra is None:
            raise Unsupported(
                f"argument {batched_inplace[0]} is modified in place (mark_dirty), so jvp must "
                "update its tangent in place; with the argument batched and the tangent not, "
                "vmap cannot write batched values into the unbatched tangent (torch's own "
                "in-place ops such as exp_ raise the same way)"
            )

    def actual(*a: Any) -> tuple[Any, ...]:
        f = restricted(entry, a[:n], view.diff, view.outs)
        result = torch.func.jvp(f, tuple(a[i] for i in view.diff), tuple(a[n:]))
        return (*result[0], *result[1])

    def reference(*a: Any) -> tuple[Any, ...]:
        return eager_jvp(entry, a[:n], view.diff, view.outs, list(a[n:]))

    _run_composite(
        ctx,
        "vmap_of_jvp",
        "tangents",
        view.primals(),
        actual,
        reference,
        [f"primal output {j}" for j in view.outs] + [f"tangent of output {j}" for j in view.outs],
        f"vmap of torch.func.jvp (the Function's jvp under vmap) vs {LOOP_JVP_REFERENCE} (reference)",
    )
    return LOOP_JVP_REFERENCE


def run_grad_of_vmap(ctx: CaseContext) -> str:
    view = diff_view(ctx)
    eager_protocol(ctx, view)
    entry = ctx.entry
    plan = ctx.plan
    assert plan is not None
    findings = Findings.of(ctx)
    fn = _all_outputs(entry)
    stacked, returned_tuple = loop_reference(fn, plan, ctx.slices)
    out_dims = concrete_out_dims(plan, stacked, returned_tuple)
    batched = build_batched_args(plan, ctx.slices)
    cots = random_like(ctx.generator("cotangents"), [stacked[j] for j in view.outs])

    def out_dim(level: int, j: int) -> int:
        od = out_dims[level]
        return od[j] if isinstance(od, tuple) else od

    def reference(level: int, path: tuple[int, ...], cs: list[torch.Tensor]) -> list[torch.Tensor]:
        if level == len(plan.levels):
            args = slice_call_args(plan, ctx.slices, path)
            return list(
                attempt(
                    "per-slice eager vjp (reference)",
                    eager_vjp,
                    entry,
                    args,
                    view.diff,
                    view.outs,
                    cs,
                )
            )
        lv = plan.levels[level]
        per = []
        for b in range(lv.batch_size):
            sliced = [
                c.select(normalize_dim(out_dim(level, j), c.dim()), b)
                for j, c in zip(view.outs, cs)
            ]
            per.append(reference(level + 1, (*path, b), sliced))
        result = []
        for m, i in enumerate(view.diff):
            parts = [p[m] for p in per]
            dim = lv.in_dims[i]
            if dim is None:
                result.append(torch.stack(parts).sum(0))
            else:
                result.append(torch.stack(parts, dim=normalize_dim(dim, parts[0].dim() + 1)))
        return result

    expected = reference(0, (), cots)
    label = f"grad_of_vmap {plan.id}"
    watch = Watch()
    for i, a in enumerate(batched):
        watch.add(f"input {i}", a)
    cot_in = [c.clone() for c in cots]
    for j, c in zip(view.outs, cot_in):
        watch.add(f"the cotangent of output {j}", c)
    vf = vmapped(fn, plan, out_dims, randomness=ctx.vmap_randomness)

    def f(*xs: Any) -> tuple[Any, ...]:
        call = list(batched)
        for i, x in zip(view.diff, xs):
            call[i] = x
        outs = vf(*call)
        return tuple(outs[j] for j in view.outs)

    _, vjp_fn = attempt(f"{label} forward", torch.func.vjp, f, *(batched[i] for i in view.diff))
    actual = attempt(label, vjp_fn, tuple(cot_in))
    watch.verify(label, findings, "inputs and cotangents must be left unchanged")
    for i, a, e in zip(view.diff, actual, expected):
        findings.compare(
            f"{label}: grad of input {i}, torch.func.vjp of vmap (the Function's vmap rule and "
            f"backward) vs {LOOP_VJP_REFERENCE} (reference; unbatched inputs summed over slices)",
            a,
            e,
            e.dtype,
        )
    findings.raise_if_any()
    return LOOP_VJP_REFERENCE


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


def _first(*reasons: Callable[[Entry], str | None]) -> Callable[[Entry], str | None]:
    def supported(entry: Entry) -> str | None:
        for r in reasons:
            reason = r(entry)
            if reason:
                return reason
        return None

    return supported


def _needs_jvp(entry: Entry) -> str | None:
    return None if entry.caps.jvp else NO_JVP


def _needs_backward(entry: Entry) -> str | None:
    return None if entry.caps.backward else NO_BACKWARD


def _jacfwd_needs_vmap(entry: Entry) -> str | None:
    reason = needs_vmap(entry)
    return f"jacfwd vmaps the Function over the basis tangents: {reason}" if reason else None


def _needs_double_backward(entry: Entry) -> str | None:
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
        _first(needs_setup_context, _needs_jvp),
        fd.FD_REFERENCE,
        "torch.func.jvp with all tangents, each tangent alone (others absent) and non-contiguous "
        "inputs, against finite differences",
    ),
    (
        "vjp",
        run_vjp,
        no_plan,
        _first(needs_setup_context, _needs_backward),
        fd.FD_REFERENCE,
        "torch.func.vjp and torch.autograd.grad, each differentiable input alone and all together "
        "x each differentiable output alone and all together, and non-contiguous, against finite "
        "differences (J^T c from the full Jacobian, or <J t, c> = <t, J^T c> when large)",
    ),
    (
        "grad_of_vmap",
        run_grad_of_vmap,
        _grad_of_vmap_plans,
        _first(needs_vmap, _needs_backward),
        LOOP_VJP_REFERENCE,
        "torch.func.vjp(vmap(f)) against per-slice eager vjps (unbatched inputs summed)",
    ),
    (
        "vmap_of_vjp",
        run_vmap_of_vjp,
        _composite_plans("cotangents"),
        _first(needs_vmap, _needs_backward),
        LOOP_VJP_REFERENCE,
        "vmap over (primals, cotangents) of torch.func.vjp; plans batch both, the primals alone "
        "and the cotangents alone (plan id: in_dims of the arguments, then of the cotangents)",
    ),
    (
        "vmap_of_jvp",
        run_vmap_of_jvp,
        _composite_plans("tangents"),
        _first(needs_vmap, _needs_jvp),
        LOOP_JVP_REFERENCE,
        "vmap over (primals, tangents) of torch.func.jvp; plans batch both, the primals alone "
        "and the tangents alone",
    ),
    (
        "jvp_of_vjp",
        run_jvp_of_vjp,
        no_plan,
        _first(needs_setup_context, _needs_backward, _needs_jvp, _needs_double_backward),
        SECOND_ORDER_REFERENCE,
        "forward-over-reverse: torch.func.jvp of the torch.func.vjp (tangents on primals and "
        "cotangents)",
    ),
    (
        "vjp_of_vjp",
        run_vjp_of_vjp,
        no_plan,
        _first(needs_setup_context, _needs_backward, _needs_double_backward),
        SECOND_ORDER_REFERENCE,
        "double backward: torch.func.vjp of torch.func.vjp, and torch.autograd.grad with "
        "create_graph=True",
    ),
    (
        "jacrev",
        lambda ctx: run_jacobian(ctx, "jacrev"),
        no_plan,
        _first(needs_setup_context, _needs_backward),
        fd.FD_REFERENCE,
        "torch.func.jacrev against the finite-difference Jacobian",
    ),
    (
        "jacfwd",
        lambda ctx: run_jacobian(ctx, "jacfwd"),
        no_plan,
        _first(needs_setup_context, _needs_jvp, _jacfwd_needs_vmap),
        fd.FD_REFERENCE,
        "torch.func.jacfwd against the finite-difference Jacobian",
    ),
]


def _with_fixed_rng(
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
        return run(ctx)

    return run_fixed


for _name, _run, _plans, _supported, _reference, _description in _CATALOGUE:
    register(
        CheckSpec(
            _name, _with_fixed_rng(_run), _plans, _supported, "autodiff", _reference, _description
        )
    )
