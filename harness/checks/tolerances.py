"""Tolerances for derivatives computed in float32, bfloat16 or float16.

A derivative computed at a low precision is compared with a float64 reference (finite
differences, or eager autograd at float64). Its error is rounding, and rounding
scales with the dtype's machine epsilon and with the size of the values the
computation goes through, not with the size of each result element. The rule:

    |actual - reference| <= K * eps(dtype) * (|reference| + A * S)

* ``eps``: ``torch.finfo(dtype).eps`` of the result (2^-23 for float32, 2^-7 for bfloat16,
  2^-10 for float16).
* ``S``: the largest magnitude in the compared tensor (reference or actual), so a small
  element of a large gradient (a difference of large terms) is held to the rounding of
  the large ones.
* ``A``: the amplification of the inputs' rounding through the forward,
  ``max|inputs| / max|outputs|`` clamped to [1, 1000]: a normalisation of values around
  100 to values around 1 loses two digits in its first subtraction, and so do its
  derivatives.
* ``K = 80``, from a measurement: every correct entry of the database and every example
  passes at K = 8 at float32 (the largest need seen is about 6.5 eps, CubeGenerated's
  vjp; the test suite checks they all still pass at K / 10), while a wrong formula is off
  by O(1) relative, about 1e5 times the tolerance.
* A reference that had to be computed in the same low dtype (finite differences of a
  random Function, which must see the same draw as the call, so they run in its dtype)
  carries its own rounding divided by the step: K is multiplied by ``1 / step``.
* Both ``K * eps`` and ``K * eps * A`` are capped at 10%: past that no tolerance could
  tell a wrong formula (off by O(1)) from rounding, so bfloat16 and float16 derivatives
  that round worse than 10% fail rather than pass vacuously.

An entry that declares its own tolerances for the dtype keeps them as a floor. float64
results use the entry's float64 tolerances unchanged.
"""

from __future__ import annotations

import torch

#: The rule's constant (see the module docstring).
K = 80.0
#: Clamp of the amplification factor A.
MAX_AMPLIFICATION = 1000.0
#: Result dtypes the rule applies to.
LOW_PRECISION = (torch.float32, torch.float16, torch.bfloat16, torch.complex64)
#: Cap of the relative tolerance and of ``atol / S``: a tolerance past 10% of the values
#: could not tell a wrong formula from rounding (bfloat16 and float16 reach it first).
MAX_RELATIVE = 0.1
#: Multiplies every derived tolerance; the tests set it to 0.1 to prove a 10x margin.
MARGIN = 1.0


def applies(actual_dtype: torch.dtype, reference_dtype: torch.dtype) -> bool:
    """True when a low-precision result is compared with a float64 (complex128) reference."""
    return actual_dtype in LOW_PRECISION and reference_dtype in (torch.float64, torch.complex128)


def amplification(inputs: list[torch.Tensor], outputs: list[torch.Tensor]) -> float:
    """``max|inputs| / max|outputs|`` clamped to [1, MAX_AMPLIFICATION]."""

    def biggest(ts: list[torch.Tensor]) -> float:
        ts = [t.detach()._values() if t.layout == torch.sparse_coo else t for t in ts]
        vals = [float(t.detach().abs().max()) for t in ts if t.numel()]
        vals = [v for v in vals if v == v and v != float("inf")]
        return max(vals, default=0.0)

    x, y = biggest(inputs), biggest(outputs)
    if y <= 0.0:
        return 1.0 if x <= 0.0 else MAX_AMPLIFICATION
    return min(max(x / y, 1.0), MAX_AMPLIFICATION)


def factor(dtype: torch.dtype, *, reference_step: float | None = None) -> float:
    """``K * eps(dtype)`` (times ``1 / reference_step`` for a same-dtype FD reference)."""
    eps = torch.finfo(dtype).eps
    k = K / reference_step if reference_step else K
    return MARGIN * min(k * eps, MAX_RELATIVE)


def tolerances(
    actual: torch.Tensor,
    expected: torch.Tensor,
    *,
    amplification: float = 1.0,
    reference_step: float | None = None,
) -> tuple[float, float]:
    """``(rtol, atol)`` of the rule for this comparison (``|a - e| <= atol + rtol |e|``)."""
    f = factor(actual.dtype, reference_step=reference_step)
    scale = 0.0
    for t in (actual, expected):
        if t.numel():
            m = float(t.detach().abs().max())
            if m == m and m != float("inf"):
                scale = max(scale, m)
    return f, min(f * amplification, MARGIN * MAX_RELATIVE) * scale
