"""Loop-reference comparisons at low precision that know the computation's own rounding noise.

A loop reference at float32 (float16, bfloat16) is the Function's own low-precision
arithmetic, slice by slice, and the batched call is the same arithmetic on another path
(a batched LAPACK call, another summation order). Where a step is ill-conditioned both
round past a fixed per-dtype tolerance although neither is wrong: the gradients of a
numpy-backed solve of a matrix of condition 300 differ between its per-slice and batched
paths by about 3e-5 relative at float32 (``tests/noisy_functions.py``).

When such a comparison fails, the loop reference is computed once more from the float64
upcast of the same inputs (the same slices, cotangents and tangents): a leaf's noise
``N = max |reference at the dtype - reference at float64|`` measures how much this
computation rounds at this dtype on this sample. The comparison is repeated with
``atol + NOISE_MULTIPLE * N``, the allowance capped at ``min(CAP_EPS * eps, MAX_RELATIVE)
* S`` (``S`` the leaf's largest magnitude): about 1e-3 of the values at float32, where a
wrong rule is off by O(1). The tolerance used is named in the message (a note on a pass).

Nothing changes for a comparison that passes, for a random Function (its float64 call
draws other numbers) or for a Function that refuses float64 (its float64 loop raises).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from harness.checks.autodiff_refs import Findings
from harness.checks.catalogue import CaseContext
from harness.checks.compare import compare_tensors
from harness.checks.tolerances import LOW_PRECISION, MAX_RELATIVE
from harness.core.options import dtype_name
from harness.plans.batching import loop_reference
from harness.plans.plan import Plan
from harness.plans.pytrees import map_leaves

#: The allowance is this multiple of the observed noise: the batched path rounds about as
#: much as the per-slice one, in another direction.
NOISE_MULTIPLE = 4.0
#: Cap of the allowance, in machine epsilons of the dtype, relative to the leaf's largest
#: magnitude (also capped at ``tolerances.MAX_RELATIVE``): 1.2e-3 at float32.
CAP_EPS = 1.0e4


def applies(dtype: torch.dtype, random: bool) -> bool:
    """A low-precision case of a deterministic Function."""
    return dtype in LOW_PRECISION and not random


def widened(a: Any) -> Any:
    """``a`` with its low-precision floating tensors upcast to float64 (complex128)."""

    def one(_k: Any, v: Any) -> Any:
        if isinstance(v, torch.Tensor):
            v = v.detach()
            if v.dtype in LOW_PRECISION:
                return v.to(torch.complex128 if v.is_complex() else torch.float64)
        return v

    return map_leaves(a, one)


class Upcast:
    """A slice source look-alike giving the float64 upcast of another's slices (and extras)."""

    def __init__(self, source: Any) -> None:
        self._source = source
        self._peeked: dict[tuple[int, ...], tuple[Any, ...]] = {}

    def args(self, path: tuple[int, ...] = ()) -> tuple[Any, ...]:
        return tuple(widened(a) for a in self._source.args(path))

    def peek(self, path: tuple[int, ...]) -> tuple[Any, ...]:
        key = tuple(path)
        hit = self._peeked.get(key)
        if hit is None:
            hit = self._peeked[key] = tuple(widened(a) for a in self._source.peek(path))
        return hit


def wide_loop(fn: Callable[..., Any], plan: Plan, source: Any) -> tuple[Any, ...] | None:
    """The loop reference of ``fn`` over the float64 upcast of ``source``'s slices; None when
    the Function does not accept float64 (the loop raised)."""
    try:
        with torch.random.fork_rng(devices=[]):
            out, _ = loop_reference(fn, plan, Upcast(source))  # type: ignore[arg-type]
    except Exception:
        return None
    return out


def noise(expected: Any, wide: Any) -> float | None:
    """``max |expected - wide|`` over a floating leaf (None where it cannot be measured)."""
    if not (isinstance(expected, torch.Tensor) and isinstance(wide, torch.Tensor)):
        return None
    if expected.shape != wide.shape or not (expected.is_floating_point() or expected.is_complex()):
        return None
    if expected.numel() == 0:
        return 0.0
    target = torch.complex128 if (expected.is_complex() or wide.is_complex()) else torch.float64
    diff = (expected.detach().to(target) - wide.detach().to(target)).abs()
    value = float(diff.max())
    return value if value == value and value != float("inf") else None


def cap(expected: torch.Tensor, dtype: torch.dtype) -> float:
    """The largest allowance for a leaf: ``min(CAP_EPS * eps, MAX_RELATIVE) * S``."""
    if expected.numel() == 0:
        return 0.0
    scale = float(expected.detach().abs().max())
    if scale != scale or scale == float("inf"):
        return 0.0
    return min(CAP_EPS * torch.finfo(dtype).eps, MAX_RELATIVE) * scale


@dataclass(frozen=True)
class Recheck:
    """The outcome of comparing again with the noise allowance."""

    problems: tuple[str, ...]
    #: What was allowed, in words (for the failure message or the pass note); "" when no
    #: leaf's noise could be measured (nothing was compared again).
    words: str


def recheck(
    compares: Sequence[Callable[[float], str | None]],
    expected: Sequence[Any],
    wide: Sequence[Any] | None,
    dtype: torch.dtype,
    atol: float,
) -> Recheck | None:
    """Compare again, leaf ``k`` by ``compares[k](extra_atol)``, with the noise allowance of
    ``expected[k]`` against ``wide[k]`` (its float64 loop). None when no noise was measured.

    The words name the allowance of the leaves it was given to: those that still fail, or
    on a pass all of them (a leaf compared exactly, an integer count, gets none)."""
    if wide is None or len(wide) != len(expected):
        return None
    problems: list[str] = []
    given: list[tuple[float, float, float, bool]] = []  # (noise, allowance, cap, failed)
    for compare, e, w in zip(compares, expected, wide):
        n = noise(e, w)
        extra = 0.0
        limit = 0.0
        if n is not None:
            limit = cap(e, dtype)
            extra = min(NOISE_MULTIPLE * n, limit)
        message = compare(extra)
        if message:
            problems.append(message)
        if n is not None:
            given.append((n, extra, limit, bool(message)))
    if not given:
        return None
    named = [g for g in given if g[3]] if problems else given
    if not named:
        return Recheck(tuple(problems), "")
    n, extra, limit, _ = max(named, key=lambda g: g[1])
    name = dtype_name(dtype)
    capped = " (capped)" if NOISE_MULTIPLE * n > limit else ""
    words = (
        f"{name} rounding noise allowed for: the loop reference at {name} differs from the "
        f"same loop at float64 by up to {n:.3g}, so atol={atol + extra:.3g} was used (the "
        f"dtype's atol={atol:g} plus {NOISE_MULTIPLE:g} x that noise{capped}, at most "
        f"{limit:.3g}, {min(CAP_EPS * torch.finfo(dtype).eps, MAX_RELATIVE):.2g} of the values)"
    )
    return Recheck(tuple(problems), words)


def recheck_findings(
    ctx: CaseContext,
    findings: Findings,
    start: int,
    comparisons: Sequence[tuple[str, Any, Any]],
    wide: Callable[[], Sequence[Any] | None],
) -> None:
    """Where ``findings.problems[start:]`` (the value comparisons ``(label, actual, expected)``)
    are not empty at a low dtype, compare again with the noise allowance: the problems are
    replaced by the second comparison's (naming the tolerance used), or on a pass by a note.
    ``wide`` computes the expected values from the float64 upcast (run only here)."""
    if len(findings.problems) <= start or not applies(ctx.dtype, ctx.entry.caps.randomness):
        return

    def one(label: str, a: Any, e: Any) -> Callable[[float], str | None]:
        def compare(extra: float) -> str | None:
            if not isinstance(a, torch.Tensor):
                return f"{label}: got {type(a).__name__}, reference a tensor"
            if a.dtype != e.dtype:
                return f"{label}: dtype {a.dtype}, expected {e.dtype}"
            rtol, atol = findings.tolerances_for(a, e)
            return compare_tensors(
                a.detach(),
                e.detach().to(a.device),
                rtol=rtol,
                atol=atol + extra,
                label=label,
                check_dtype=False,
            )

        return compare

    again = recheck(
        [one(*c) for c in comparisons],
        [e for _, _, e in comparisons],
        wide(),
        ctx.dtype,
        findings.atol,
    )
    if again is None:
        return
    del findings.problems[start:]
    if again.problems:
        findings.problems.extend(again.problems)
        findings.hint(again.words)
    elif again.words:
        label = comparisons[0][0].split(":", 1)[0] if comparisons else ""
        ctx.notes.append(f"{label}: {again.words}")
