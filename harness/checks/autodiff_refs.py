"""Shared pieces of the autodiff checks: findings, views and restricted calls.

* ``DiffView``: which arguments are differentiated (floating-point tensors only) and which
  outputs get cotangents.
* ``restricted``: the Function as a function of a subset of its inputs and outputs.
* The references themselves are ``harness.checks.references``'s.
* ``Findings``: comparisons collected with one-line messages naming the sub-check.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from autograd_function_db.entry import GRADIENT_CUSTOM, Entry, Tolerances
from harness.checks import fd_error
from harness.checks import finite_diff as fd
from harness.checks import tolerances as dtype_tolerance
from harness.checks.catalogue import (
    CaseContext,
    CheckFailure,
    NonFiniteSample,
    ReferenceRaised,
    TorchBug,
    Unsupported,
)
from harness.checks.compare import compare_tensors
from harness.core.errors import FunctionRaised
from harness.core.options import dtype_name
from harness.plans.batching import as_tuple
from harness.plans.pytrees import FlatCall

#: Above this many Jacobian columns (input elements), vjp references use the identity
#: <J t, c> = <t, J^T c> with random directions instead of the full FD Jacobian.
FULL_JACOBIAN_MAX = 160
#: The most memory a reference may need (bytes): a full Jacobian beyond it is not built, and
#: the checks that need one are ``unsupported`` with the size (a 1e7-element sample's
#: Jacobian would need 800 TB).
MEMORY_BUDGET = 1 << 30
#: Random directions for the identity check.
IDENTITY_DIRECTIONS = 3
#: At most this many problems are spelled out in one failure message.
MAX_PROBLEMS = 4

EAGER_CUSTOM_REFERENCE = "eager backward (gradient=custom)"
LOOP_VJP_REFERENCE = "loop of per-slice eager vjp (torch.autograd.grad)"
LOOP_JVP_REFERENCE = "loop of per-slice eager jvp (torch.autograd.forward_ad)"
SECOND_ORDER_REFERENCE = "finite differences (float64) of the eager first-order vjp"

ONCE_DIFFERENTIABLE_REASON = (
    "backward is @once_differentiable: torch.func silently returns zeros (no error) for "
    "second-order derivatives through it, so second order is not checked; write backward "
    "with differentiable torch ops and drop the decorator to claim double backward"
)


def attempt(label: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call ``fn``; an exception is re-raised as FunctionRaised naming the sub-check."""
    try:
        return fn(*args, **kwargs)
    except (CheckFailure, Unsupported, TorchBug, FunctionRaised, ReferenceRaised, NonFiniteSample):
        raise
    except Exception as e:
        if "(reference" in label:
            raise ReferenceRaised(reference_raised_message(label, e)) from e
        raise FunctionRaised(label, e).with_traceback(e.__traceback__) from e


def reference_raised_message(label: str, exc: BaseException) -> str:
    """Which side raised (the reference named by ``label``) and what it means for users."""
    from harness.core.locations import describe_exception

    if "own dtype" in label:
        meaning = (
            "The Function fails at its own dtype on the points finite differences evaluate "
            "(within a step of the sample)"
        )
    elif "float64" in label or "finite differences" in label:
        meaning = (
            "The Function fails on the float64 copies of the sample that finite differences "
            "evaluate"
        )
    elif "vjp" in label or "backward" in label:
        meaning = (
            "Eager backward of the Function (torch.autograd.grad, .backward()) fails for its users"
        )
    else:
        meaning = ""
    return (
        f"the reference raised, not the transform under test: the {label} raised "
        f"{describe_exception(exc)}." + (f" {meaning}." if meaning else "")
    )


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
    #: Low-precision results against float64 references use the dtype rule
    #: (``harness.checks.tolerances``); set by ``Findings.derived``.
    derive: bool = False
    amplification: float = 1.0
    #: Set when the finite differences ran in the call's own low dtype (random Functions).
    reference_step: float | None = None
    #: The entry's own declared tolerances, kept as a floor (None: the defaults).
    floor: tuple[float, float] | None = None
    #: The case's notes (a passing case's message), where the not-comparable line goes.
    notes: list[str] | None = None
    #: Elements (or directions) compared with a finite-difference reference, and those left
    #: out as not comparable (``harness.checks.fd_error``); the comparison that left out
    #: most: (excluded, total, first index, what).
    fd_compared: int = 0
    fd_excluded: int = 0
    fd_worst: tuple[int, int, str, str] | None = None

    def hint(self, text: str) -> None:
        if text and text not in self.hints:
            self.hints.append(text)

    def outcome(self, subcheck: str, problems_before: int) -> None:
        """Record whether ``subcheck`` added problems (for the summary of a failure)."""
        target = self.failed if len(self.problems) > problems_before else self.passed
        if subcheck not in target:
            target.append(subcheck)

    @classmethod
    def of(cls, ctx: CaseContext) -> Findings:
        rtol, atol = ctx.tolerances
        return cls(rtol, atol, notes=ctx.notes)

    def count_fd(self, compared: int, excluded: int, first: str, what: str) -> None:
        """Record one comparison with a finite-difference reference (``fd_error``)."""
        self.fd_compared += compared
        self.fd_excluded += excluded
        if excluded and (self.fd_worst is None or excluded > self.fd_worst[0]):
            self.fd_worst = (excluded, compared + excluded, first, what)

    def fd_note(self) -> str:
        """The not-comparable line ("" when every element was comparable)."""
        if self.fd_worst is None:
            return ""
        excluded, total, first, what = self.fd_worst
        return fd_error.not_comparable_note(what, excluded, total, first)

    def settle(self) -> None:
        """No problems found: a case that compared no derivative element (all not
        comparable) is ``unsupported``; otherwise the not-comparable line joins the notes."""
        if self.fd_excluded and not self.fd_compared:
            raise Unsupported(fd_error.nothing_comparable(self.fd_note()))
        note = self.fd_note()
        if note and self.notes is not None and note not in self.notes:
            self.notes.append(note)

    @classmethod
    def derived(cls, ctx: CaseContext, view: DiffView) -> Findings:
        """Findings whose low-precision comparisons with float64 references follow the dtype
        rule (precision and size of the values), see ``harness.checks.tolerances``."""
        found = cls.of(ctx)
        found.derive = True
        found.amplification = dtype_tolerance.amplification(
            view.primals(), [view.outputs[j] for j in view.outs]
        )
        if view.same_dtype_fd:
            found.reference_step = fd.base_step([view.outputs[j] for j in view.outs])
        if view.run_dtype_fd:
            found.hint(
                f"{view.run_dtype_fd}: the finite differences ran at {dtype_name(ctx.dtype)}, "
                "the function the call computes"
            )
        declared = ctx.entry.tolerances.for_dtype(ctx.dtype)
        if declared != Tolerances().for_dtype(ctx.dtype):
            found.floor = declared
        return found

    def tolerances_for(self, actual: torch.Tensor, expected: torch.Tensor) -> tuple[float, float]:
        """(rtol, atol) for one comparison: the dtype rule where it applies, else the entry's."""
        if not (self.derive and dtype_tolerance.applies(actual.dtype, expected.dtype)):
            return self.rtol, self.atol
        rtol, atol = dtype_tolerance.tolerances(
            actual,
            expected,
            amplification=self.amplification,
            reference_step=self.reference_step,
        )
        if self.floor is not None:
            rtol, atol = max(rtol, self.floor[0]), max(atol, self.floor[1])
        return rtol, atol

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
        rtol, atol = self.tolerances_for(actual, expected)
        estimate = fd_error.of(expected)
        if estimate is not None and actual.shape == expected.shape and actual.numel():
            got = fd_error.compare(actual, expected, estimate, rtol=rtol, atol=atol, label=label)
            self.count_fd(got.compared, got.excluded, got.first_excluded, label)
            self.add(got.message)
            return got.message is None
        msg = compare_tensors(
            actual.detach(),
            expected.detach().to(actual.device),
            rtol=rtol,
            atol=atol,
            label=label,
            check_dtype=False,
        )
        self.add(msg)
        return msg is None

    def raise_if_any(self, hint: str = "") -> None:
        if not self.problems:
            self.settle()
            return
        self.hint(self.fd_note())
        shown = self.problems[:MAX_PROBLEMS]
        more = len(self.problems) - len(shown)
        text = "; ".join(shown) + (f"; and {more} more" if more > 0 else "")
        if self.failed and self.passed:
            summary = "failing sub-checks: " + " ".join(f"[{n}]" for n in self.failed)
            passing = [n for n in self.passed if n not in self.failed]
            text = summary + "; passing: " + " ".join(f"[{n}]" for n in passing) + " -- " + text
        hints = [*self.hints, *([hint] if hint else [])]
        raise CheckFailure(text + "".join(f" -- {h}" for h in hints))


def close(findings: Findings, actual: torch.Tensor, expected: torch.Tensor) -> bool:
    """Whether ``actual`` matches ``expected`` within the findings' tolerances (a quiet
    comparison: nothing is recorded; used for hints such as grads in the wrong order)."""
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
            if after.layout != torch.strided:  # sparse data: compared as the values it holds
                after, before = after.to_dense(), before.to_dense()
            if after.shape != before.shape or not torch.equal(after, before):
                findings.add(f"{label}: {what} was modified in place by the call ({why})")


INPUT_WHY = "declare it with inplace_args (and ctx.mark_dirty) if that is intended"
COTANGENT_WHY = "backward must not modify grad_output"
TANGENT_WHY = "jvp must not modify the tangent of an input it does not modify"


# --- the differentiable view of an entry -----------------------------------------------------


def restricted(
    entry: Entry,
    base: Sequence[Any],
    inputs: Sequence[int],
    outputs: Sequence[int],
    cast_to: Sequence[Any] | None = None,
) -> Callable[..., tuple[Any, ...]]:
    """The Function as a function of the arguments at ``inputs`` (others fixed to ``base``),
    returning the outputs at ``outputs``. In-place arguments are cloned before the call.
    ``cast_to`` (one dtype or None per argument) casts tensor arguments before the call."""
    inplace = set(entry.caps.inplace_args)
    base = tuple(base)

    def f(*xs: Any) -> tuple[Any, ...]:
        call = list(base)
        for i, x in zip(inputs, xs):
            call[i] = x
        if cast_to is not None:
            call = [
                c.to(d) if d is not None and isinstance(c, torch.Tensor) else c
                for c, d in zip(call, cast_to)
            ]
        for k in inplace:
            if 0 <= k < len(call) and isinstance(call[k], torch.Tensor):
                call[k] = call[k].clone()
        out = as_tuple(entry.call(*call))
        return tuple(map(out.__getitem__, outputs))

    return f


def all_outputs(entry: Entry, flat: bool = True) -> Callable[..., Any]:
    """The Function's call returning every output (a tuple when ``flat``), its in-place
    arguments cloned first so the caller's tensors never change."""
    inplace = set(entry.caps.inplace_args)

    def f(*args: Any) -> Any:
        call = [
            a.clone() if k in inplace and isinstance(a, torch.Tensor) else a
            for k, a in enumerate(args)
        ]
        out = entry.call(*call)
        return as_tuple(out) if flat else out

    return f


@dataclass
class DiffView:
    entry: Entry
    args: tuple[Any, ...]
    diff: tuple[int, ...]  # differentiable argument positions
    outs: tuple[int, ...]  # differentiable output indices
    outputs: tuple[Any, ...]  # the plain call's outputs (all leaves of them)
    out_names: tuple[str, ...] = ()  # each leaf's name: output 0, output 1['var'], ...
    #: Why finite differences evaluate the Function at the call's dtype ("" when they do
    #: not): the float64 copy is another function there (``harness.checks.gauge``).
    run_dtype_fd: str = ""

    def out_name(self, j: int) -> str:
        return self.out_names[j] if j < len(self.out_names) else f"output {j}"

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

    @property
    def same_dtype_fd(self) -> bool:
        """A random Function draws in its input's dtype, so its finite differences must run
        in the call's dtype (with the same RNG state) to see the same draw; so must those of
        a Function whose float64 forward is another function (``run_dtype_fd``)."""
        return (bool(self.run_dtype_fd) or self.entry.caps.randomness) and any(
            isinstance(a, torch.Tensor)
            and fd.is_differentiable_dtype(a)
            and a.dtype not in (torch.float64, torch.complex128)
            for a in self.args
        )

    def call_dtypes(self) -> list[Any] | None:
        """The dtypes FD evaluations cast back to (None: evaluate in float64)."""
        if not self.same_dtype_fd:
            return None
        return [a.dtype if fd.is_differentiable_dtype(a) else None for a in self.args]

    def fd_fn(
        self, base64: Sequence[Any], inputs: Sequence[int], outputs: Sequence[int]
    ) -> Callable[..., tuple[Any, ...]]:
        """The function finite differences evaluate: float64 primals in; for a random
        Function cast back to the call's dtype, so every evaluation sees the call's draw."""
        return restricted(self.entry, base64, inputs, outputs, self.call_dtypes())

    def columns(self) -> int:
        return sum(self.args[i].numel() for i in self.diff)

    @property
    def is_complex(self) -> bool:
        """Complex inputs or outputs: references use complex tangents and cotangents
        (torch's conjugate Wirtinger convention: the real adjoint of the map on C = R^2)."""
        return any(self.args[i].is_complex() for i in self.diff) or any(
            self.outputs[j].is_complex() for j in self.outs
        )


def reference_view(ctx: CaseContext, view: DiffView) -> DiffView:
    """The view that references running the Function itself (its eager backward, for
    ``gradient="custom"``) use: the case's own, or its float64 copy in a dtype leg, whose
    reference is the float64 one."""
    if ctx.leg is None:
        return view
    return dataclasses.replace(
        view, args=view.args64(), outputs=tuple(fd.upcast(o) for o in view.outputs)
    )


def eager_outputs(
    flat: Callable[..., Sequence[Any]], args: Sequence[Any], diff: Sequence[int]
) -> tuple[tuple[Any, ...], set[int]]:
    """The plain call's (flat) outputs, detached, and the outputs the Function itself marks
    non-differentiable (``ctx.mark_non_differentiable``).

    One eager call with the differentiable inputs requiring grad tells both: every floating
    output of an autograd.Function then requires grad unless it was marked, and a marked
    output gets no cotangent and no tangent, as autograd treats it (a Function need not
    also declare it with ``nondiff_outputs``). If that call raises, the call is made again
    without grad, where an exception is the Function's and names the sub-check, and
    nothing is excluded.
    """
    probe = [
        a.detach().requires_grad_() if i in diff and isinstance(a, torch.Tensor) else a
        for i, a in enumerate(args)
    ]
    try:
        with torch.enable_grad():
            outs = flat(*probe)
    except Exception:
        with torch.no_grad():
            return tuple(attempt("plain call", flat, *args)), set()
    marked = {
        j
        for j, o in enumerate(outs)
        if isinstance(o, torch.Tensor) and fd.is_differentiable_dtype(o) and not o.requires_grad
    }
    return tuple(o.detach() if isinstance(o, torch.Tensor) else o for o in outs), marked


def note_held_fixed(ctx: CaseContext, args: Sequence[Any], diff: Sequence[int]) -> None:
    """The case's note on differentiated inputs with non-finite elements (``fd.held_fixed``)."""
    held = fd.nonfinite_inputs_note([a if i in diff else None for i, a in enumerate(args)])
    if held and held not in ctx.notes:
        ctx.notes.append(held)


def diff_view(ctx: CaseContext) -> DiffView:
    entry = ctx.entry
    args = ctx.slices.args()
    if is_custom(entry) and any(isinstance(a, torch.Tensor) and a.is_complex() for a in args):
        raise Unsupported(
            "complex inputs with gradient=custom: the custom-gradient references cover real "
            "dtypes only"
        )
    fixed = set(entry.caps.nondiff_args)
    diff = tuple(i for i, a in enumerate(args) if fd.is_differentiable_dtype(a) and i not in fixed)
    if not diff:
        raise Unsupported(
            "no floating-point tensor argument"
            + (" outside nondiff_args" if fixed else "")
            + ": nothing to differentiate"
        )
    note_held_fixed(ctx, args, diff)
    flat = FlatCall(all_outputs(entry, flat=False))
    outputs, marked = eager_outputs(flat, args, diff)
    # Autograd tracks only the top-level tensors of a Function's outputs: leaves nested in
    # a dict, list or tuple inside the outputs are not differentiable.
    names = flat.names()
    top = flat.top_level(len(outputs))
    outs = tuple(
        j
        for j, o in enumerate(outputs)
        if fd.is_differentiable_dtype(o)
        and j not in entry.caps.nondiff_outputs
        and j not in marked
        and j in top
    )
    if not outs:
        raise Unsupported(
            "no differentiable output (all are integer, bool, nested in a container or "
            "declared non-differentiable)"
        )
    return DiffView(entry, args, diff, outs, outputs, tuple(names))


def sample_view(ctx: CaseContext) -> DiffView:
    """``diff_view`` then ``eager_protocol`` of the case's sample, once per sample for the
    checks that only read the view (the composite checks: its tensors give the shapes and
    dtypes of the extras, never inputs). A verdict either gave (``Unsupported``,
    ``CheckFailure``) is raised again, with its message, for the sample's later cases; any
    other exception is not kept (the next case calls again). A random entry's seeded call
    is a new callable per case, so it is never reused."""
    kept = getattr(ctx.slices, "views", None)
    key = ctx.entry.call
    try:
        hit = kept.get(key) if kept is not None else None
    except TypeError:  # an unhashable callable: nothing is kept for it
        kept, hit = None, None
    if hit is not None:
        view, verdict = hit
        if verdict is not None:
            raise verdict[0](verdict[1])
        note_held_fixed(ctx, view.args, view.diff)
        return view  # type: ignore[no-any-return]
    try:
        view = diff_view(ctx)
        eager_protocol(ctx, view)
    except (Unsupported, CheckFailure) as e:
        if kept is not None and type(e) in (Unsupported, CheckFailure):
            kept[key] = (None, (type(e), str(e)))
        raise
    if kept is not None:
        kept[key] = (view, None)
    return view


def random_like(gen: torch.Generator, likes: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Standard normal tensors shaped and typed like ``likes`` (drawn in float64; complex
    ones get a random imaginary part too, so a forgotten conjugate shows)."""
    out = []
    randn, c128, f64 = torch.randn, torch.complex128, torch.float64
    for t in likes:
        drawn = randn(t.shape, generator=gen, dtype=c128 if t.is_complex() else f64)
        # one conversion to the like's dtype and device (the drawn tensor itself when both match)
        out.append(drawn.to(device=t.device, dtype=t.dtype))
    return out


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


def is_custom(entry: Entry) -> bool:
    return entry.gradient == GRADIENT_CUSTOM
