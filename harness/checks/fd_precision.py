"""The precision a forward really computes at, measured: finite differences of a Function
that rounds through float32 inside (a numpy or numba kernel, ``torch.Tensor(...)``) while
returning float64 are float32-noisy, and a rounding allowance at float64's epsilon calls a
correct backward wrong.

The measure is the noise of the forward along one direction (the idea of Moré and Wild's
ECnoise): the fourth difference ``f(-2s) - 4 f(-s) + 6 f(0) - 4 f(s) + f(2s)`` of a smooth
function is ``s^4 f''''`` (tiny at a small step), while independent rounding of relative
size ``e`` makes it about ``sqrt(70) e |f|``. Taken at two steps ``s`` and ``s/2``, the
smaller of the two (the truncation term shrinks 16x, rounding does not) and the median over
the output elements, it is a robust estimate of ``e``. Only a forward whose measured ``e``
is clearly coarser than its outputs' epsilon is treated as computing at ``e``: the finite
differences then take the step of the dtype of that precision and allow for ``e``.

Costs eight evaluations of the forward, once per (function, point): cached while both live.
"""

from __future__ import annotations

import contextlib
import math
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import torch

#: A measured precision counts only when it is this many times coarser than the outputs'
#: epsilon (float64 arithmetic with long reductions stays far below it).
COARSER = 1e4
#: sqrt(1 + 16 + 36 + 16 + 1): the fourth difference's noise in units of one evaluation's.
_SPREAD = math.sqrt(70.0)

_cache: weakref.WeakKeyDictionary[Any, tuple[tuple[int, ...], float]] = weakref.WeakKeyDictionary()


def _direction(primals: Sequence[torch.Tensor], tangents: Sequence[Any]) -> list[Any]:
    """A fixed pseudo-random direction over the inputs the differences move."""
    gen = torch.Generator().manual_seed(0)
    out: list[Any] = []
    for x, t in zip(primals, tangents):
        if t is None:
            out.append(None)
            continue
        r = torch.randn(x.shape, generator=gen, dtype=torch.float64)
        r = torch.where(torch.isfinite(x.detach()), r, torch.zeros_like(r))  # held fixed
        out.append(r.to(x.dtype) if x.is_complex() else r)
    return out


def _relative_noise(values: list[list[torch.Tensor]]) -> float:
    """Median over elements of |fourth difference| / (sqrt(70) |f|), the largest over outputs."""
    found = 0.0
    for m2, m1, f0, p1, p2 in zip(*values):
        d4 = (m2 - 4 * m1 + 6 * f0 - 4 * p1 + p2).abs()
        mag = f0.abs()
        keep = (mag > 0) & torch.isfinite(d4) & torch.isfinite(mag)
        if not bool(keep.any()):
            continue
        ratio = (d4[keep] / mag[keep]).to(torch.float64)
        found = max(found, float(ratio.median()) / _SPREAD)
    return found


def measured_eps(
    fn: Callable[..., Any],
    evaluate: Callable[[Callable[..., Any], Sequence[torch.Tensor]], list[torch.Tensor]],
    primals: Sequence[torch.Tensor],
    tangents: Sequence[Any],
    outputs: list[torch.Tensor],
    step: float,
    eps: float,
) -> float:
    """The relative precision ``fn`` computes at near ``primals`` (``eps``, the outputs'
    epsilon, unless the measure is clearly coarser). ``evaluate(fn, primals)`` gives the
    outputs as float64; ``step`` is the smallest step the differences will take."""
    if eps > 1e-10 or not any(t is not None for t in tangents):
        return eps  # outputs below float64 already carry their precision
    key = tuple(id(p) for p in primals)
    try:
        cached = _cache.get(fn)
    except TypeError:  # not weakly referenceable: measured each time
        cached = None
    if cached is not None and cached[0] == key:
        return cached[1]
    direction = _direction(primals, tangents)
    scale = max(
        (
            float(x.abs()[d != 0].max())
            for x, d in zip(primals, direction)
            if d is not None and bool((d != 0).any())
        ),
        default=1.0,
    )
    estimates = []
    try:
        for s in (step * max(1.0, scale), step * max(1.0, scale) / 2):
            at = [
                evaluate(
                    fn, [x if d is None else x + k * s * d for x, d in zip(primals, direction)]
                )
                for k in (-2, -1, 1, 2)
            ]
            estimates.append(_relative_noise([at[0], at[1], outputs, at[2], at[3]]))
    except Exception:  # noqa: BLE001 - the differences themselves will say what raised
        return eps
    # rounding does not shrink with the step; a smooth function's fourth difference does
    # (16x at half the step): only the former is the forward's precision
    noisy = estimates[1] > estimates[0] / 4
    measured = min(estimates)
    found = measured if noisy and measured > COARSER * eps else eps
    with contextlib.suppress(TypeError):  # not weakly referenceable: not cached
        _cache[fn] = (key, found)
    return found


def step_dtype(eps: float) -> torch.dtype:
    """The dtype whose base step suits a forward computing at precision ``eps``."""
    for dtype in (torch.float64, torch.float32):
        if eps <= 4 * torch.finfo(dtype).eps:
            return dtype
    return torch.float16
