"""Finite differences that know their own error, and say where they cannot be trusted.

Every finite-difference reference of the suite (``harness.checks.finite_diff``: Jacobian
columns and directional differences, first and second order, real and complex) is computed
from three central differences of one direction, at the steps ``h``, ``h/2`` and ``h/4``:

    D1 = D(h), D2 = D(h/2), D3 = D(h/4),   D(s) = (f(x + s t) - f(x - s t)) / 2s
    R1 = (4 D2 - D1) / 3   (the reference, as before: Richardson, error O(h^4))
    R2 = (4 D3 - D2) / 3   (the same at half the step)

Per element of the result:

* **Converged**: the differences shrink as the step does (``|D2 - D3| <= RATIO |D1 - D2|``:
  1/4 for a smooth function, 1/2 for one whose derivative has a kink, O(h) convergence),
  or they are within the rounding of the evaluations. The reference's error is estimated as
  ``SAFETY |R1 - R2| + N`` (truncation, and ``N = ROUNDING eps |f| / h`` for rounding, with
  ``eps`` of the dtype the forward computes in): the comparison's tolerance is widened by
  it, element by element. For a smooth float64 forward it is about 1e-12 relative, so a
  derivative off by 1e-4 is still caught at the entry's tolerance.
* **Not converged**: the differences do not shrink (a step straddles a kink, threshold,
  grid node or tie of the forward: ``D(s)`` is then jump / s and grows as s shrinks). Its
  spread ``|R1 - R2|`` is no error bound; where it exceeds the comparison's tolerance the
  element is **not comparable**: left out of the comparison, counted, and named in the
  case message ("3 of 63 elements not comparable: ..., e.g. element (6, 0)"). A case whose
  every derivative element was not comparable compared nothing and is ``unsupported``.

A reference carries its estimate as an attribute of the tensor (``attach`` / ``of``); the
linear maps the checks apply to Jacobians and directions (``J^T c``, ``J t``, ``<J t, c>``)
carry it on with the absolute values of their coefficients (``tensordot``, ``dot``).
``compare`` is the comparison the autodiff checks' findings use for such a reference.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

#: The truncation error is estimated as SAFETY x |R1 - R2| (R1's true error is about
#: |R1 - R2| / 15 for a smooth function, up to |R1 - R2| where the derivative has a kink).
SAFETY = 2.0
#: Converged: |D(h/2) - D(h/4)| <= RATIO |D(h) - D(h/2)| (smooth: 0.25; a kink of the
#: derivative within the step, as |x|^3 near 0 in second order: 0.5).
RATIO = 0.6
#: Rounding of R1: ROUNDING x eps x |f| / h. Each evaluation is off by a few ulps (k),
#: ``D(s)`` by about k eps |f| / 2s, and R1 = (4 D(h/2) - D(h)) / 3 by 1.5 k eps |f| / h.
ROUNDING = 8.0
#: The differences count as converged where they move by less than CONVERGED_NOISE times
#: that rounding (D(h/4) rounds four times as much as D(h)).
CONVERGED_NOISE = 4.0
#: A kink right at the point: the one-sided slopes' difference at h/4 is more than KINK_RATIO
#: times the one at h/2 (a smooth forward's halves: 0.5).
KINK_RATIO = 0.75
#: A function finite differences evaluate may name, in this attribute, the dtypes it computes
#: in besides its outputs' (the eager first-order map of a Function whose float64 copy still
#: returns float32: autograd casts the float64 cotangent to float32 before backward runs).
COMPUTES_IN = "afdb_computes_in"
#: The attribute a reference tensor carries its estimate in.
ATTRIBUTE = "_afdb_fd_estimate"

NOT_COMPARABLE_WHY = (
    "the finite differences do not converge there (the forward is not smooth within a step "
    "of the recorded point: a kink, threshold, grid node or tie)"
)


@dataclass
class Estimate:
    """The error of a finite-difference reference, per element (float64, its shape).

    ``error``: a bound of the reference's error where the differences converge.
    ``spread``: ``|R1 - R2|`` where they do not (0 elsewhere): no bound, a sign of a kink.
    """

    error: torch.Tensor
    spread: torch.Tensor

    def reshape(self, shape: Sequence[int]) -> Estimate:
        return Estimate(self.error.reshape(shape), self.spread.reshape(shape))


def attach(t: torch.Tensor, estimate: Estimate) -> torch.Tensor:
    """``t`` carrying ``estimate`` (returned for chaining)."""
    setattr(t, ATTRIBUTE, estimate)
    return t


def of(t: object) -> Estimate | None:
    """The estimate a reference tensor carries (None: not a finite-difference reference)."""
    est = getattr(t, ATTRIBUTE, None)
    return est if isinstance(est, Estimate) else None


def reshaped(t: torch.Tensor, shape: Sequence[int]) -> torch.Tensor:
    """``t.reshape(shape)`` keeping its estimate."""
    out = t.reshape(shape)
    est = of(t)
    return attach(out, est.reshape(shape)) if est is not None else out


def eps_of(outputs: Sequence[object], fn: object = None) -> float:
    """Machine epsilon of the dtype the forward computes in: its floating outputs' coarsest,
    or a coarser one ``fn`` names in its ``COMPUTES_IN`` attribute (set by its first call)."""
    eps = [
        torch.finfo(o.dtype).eps
        for o in outputs
        if isinstance(o, torch.Tensor) and (o.is_floating_point() or o.is_complex())
    ]
    eps += [torch.finfo(d).eps for d in getattr(fn, COMPUTES_IN, ()) or ()]
    return max(eps, default=torch.finfo(torch.float64).eps)


def richardson(
    d1: torch.Tensor,
    d2: torch.Tensor,
    d3: torch.Tensor,
    magnitude: torch.Tensor,
    eps: float,
    h: float,
    bends: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, Estimate]:
    """``R1 = (4 D2 - D1) / 3`` and its estimate from the three differences at h, h/2, h/4
    (``magnitude``: the size of the forward's values there, for the rounding term).

    ``bends``: ``(f(x+s) - 2 f(x) + f(x-s)) / s`` at s = h/2 and h/4, the difference of the
    one-sided slopes. It halves with the step where the forward is smooth and stays where
    the point sits right on a kink, where the central differences agree at every step on
    the average of the two slopes, which is neither side's derivative: not converged."""
    r1 = (4 * d2 - d1) / 3
    r2 = (4 * d3 - d2) / 3
    noise = ROUNDING * eps * magnitude / h
    spread = torch.nan_to_num((r1 - r2).abs(), nan=float("inf"))
    shrink = torch.nan_to_num((d2 - d3).abs(), nan=float("inf"))
    first = torch.nan_to_num((d1 - d2).abs(), nan=float("inf"))
    converged = (shrink <= RATIO * first) | (shrink <= CONVERGED_NOISE * noise)
    if bends is not None:
        b2 = torch.nan_to_num(bends[0].abs(), nan=float("inf"))
        b3 = torch.nan_to_num(bends[1].abs(), nan=float("inf"))
        # at h/4 the bend's rounding is about 2x R1's; a kink stands well above it
        kink = (b3 > KINK_RATIO * b2) & (b3 > 4 * CONVERGED_NOISE * noise)
        converged = converged & ~kink
        spread = torch.where(kink, torch.maximum(spread, b3 / 2), spread)
    zero = torch.zeros_like(spread)
    error = torch.where(converged, SAFETY * spread + noise, noise)
    return r1, Estimate(error, torch.where(converged, zero, spread))


def add(a: Estimate | None, b: Estimate | None) -> Estimate | None:
    """The estimate of a sum of two references."""
    if a is None or b is None:
        return a if b is None else b
    return Estimate(a.error + b.error, a.spread + b.spread)


def tensordot(
    coef: torch.Tensor, block: torch.Tensor, dims: int, *, coef_first: bool
) -> Estimate | None:
    """The estimate of ``tensordot(coef, block)`` (``coef_first``) or ``tensordot(block, coef)``
    for a block that carries one: the same product of ``|coef|`` with the block's error and
    spread (triangle inequality); None when the block carries none."""
    est = of(block)
    if est is None:
        return None
    c = coef.detach().abs().to(torch.float64)
    if coef_first:
        return Estimate(
            torch.tensordot(c, est.error, dims=dims), torch.tensordot(c, est.spread, dims=dims)
        )
    return Estimate(
        torch.tensordot(est.error, c, dims=dims), torch.tensordot(est.spread, c, dims=dims)
    )


@dataclass
class Scalar:
    """A scalar reference (``<J t, c>`` of the identity checks) and its estimate."""

    value: float
    error: float = 0.0
    spread: float = 0.0


def dot(
    jt: Sequence[torch.Tensor | None], c: Sequence[torch.Tensor | None], value: float
) -> Scalar:
    """``<J t, c>`` (``value``, computed by the caller) with the estimate ``J t`` carries:
    ``sum |c| error``."""
    error = spread = 0.0
    for x, y in zip(jt, c):
        est = of(x)
        if est is None or y is None:
            continue
        w = y.detach().abs().to(torch.float64).reshape(est.error.shape)
        error += float((w * est.error).sum())
        spread += float((w * est.spread).sum())
    return Scalar(value, error, spread)


def scalar(t: torch.Tensor) -> Scalar:
    """A one-element reference tensor as a ``Scalar`` with its estimate."""
    est = of(t)
    if est is None:
        return Scalar(float(t))
    return Scalar(float(t), float(est.error.sum()), float(est.spread.sum()))


# --- the comparison --------------------------------------------------------------------------


@dataclass
class Outcome:
    """What ``compare`` found: the message (None when close), the elements compared and
    those left out (with the first one's index), and the largest error allowed for."""

    message: str | None
    compared: int
    excluded: int
    first_excluded: str = ""
    widened: float = 0.0


def compare(
    actual: torch.Tensor,
    expected: torch.Tensor,
    estimate: Estimate,
    *,
    rtol: float,
    atol: float,
    label: str,
) -> Outcome:
    """``|a - e| <= atol + rtol |e| + error`` per element, leaving out the elements whose
    differences did not converge by more than that tolerance. ``actual`` and ``expected``
    have one shape (the caller checked it)."""
    from harness.checks.compare import error_phrase, index_str, require_finite

    require_finite(expected, label)
    wide = torch.complex128 if (actual.is_complex() or expected.is_complex()) else torch.float64
    a = actual.detach().cpu().to(wide).reshape(-1)
    e = expected.detach().cpu().to(wide).reshape(-1)
    error = estimate.error.detach().cpu().reshape(-1)
    spread = estimate.spread.detach().cpu().reshape(-1)
    base = atol + rtol * e.abs()
    out = (~(spread <= base)) & (spread > 0)
    allowed = base + error + SAFETY * spread
    diff = (a - e).abs()
    same_nan = torch.isnan(a) & torch.isnan(e)
    bad = ~((diff <= allowed) | same_nan | (a == e)) & ~out
    excluded = int(out.sum())
    first = index_str(int(out.nonzero()[0]), expected.shape) if excluded else ""
    kept = ~out
    widened = float((error + SAFETY * spread)[kept].max()) if bool(kept.any()) else 0.0
    compared = int(kept.sum())
    if not bool(bad.any()):
        return Outcome(None, compared, excluded, first, widened)
    nonfinite = bad & ~torch.isfinite(diff)
    if bool(nonfinite.any()):
        worst = int(nonfinite.nonzero()[0])
    else:
        worst = int(torch.where(bad, diff - allowed, torch.full_like(diff, -1.0)).argmax())
    message = (
        f"{label}: {int(bad.sum())} of {a.numel()} values outside tolerance; worst at "
        f"{index_str(worst, expected.shape)}: {error_phrase(a[worst], e[worst])}; rtol={rtol:g}, "
        f"atol={atol:g}, plus the reference's estimated finite-difference error "
        f"{float(error[worst] + SAFETY * spread[worst]):.3g} there"
    )
    if excluded:
        message += f" ({excluded} not comparable element(s) left out)"
    return Outcome(message, compared, excluded, first, widened)


def not_comparable_note(label: str, excluded: int, total: int, first: str) -> str:
    """The case message's line for elements left out of a comparison."""
    return (
        f"{label}: {excluded} of {total} elements not comparable: {NOT_COMPARABLE_WHY}, "
        f"e.g. element {first}"
    )


def nothing_comparable(what: str) -> str:
    """The ``unsupported`` message of a case that compared no derivative element."""
    return (
        f"nothing comparable: {what}; that is every element the case compares, so no "
        "derivative was checked: choose recorded points away from the kink"
    )
