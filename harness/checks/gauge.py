"""The float64 reference must be the same function as the call it checks.

For a call in float32 (or another low dtype) finite differences differentiate a float64
copy of the sample. Where the float64 forward differs from the run-dtype forward beyond
the dtype's tolerance (the sign LAPACK picks for singular vectors or eigenvectors, an
argmax that ties in float32 and not in float64, a branch cut), the float64 copy is another
function and its finite differences the derivative of that function: a mismatch with them
says nothing about the Function. ``same_function`` notices it, once per case, before any
finite difference runs:

* the finite differences then run at the run dtype (each evaluation cast back to it, as for
  a random Function, with the tolerance widened for their step), when that is meaningful:
  two steps (the base one and half of it) give the same derivative within that tolerance
  (every Jacobian column, or a few random directions for a large input). The case says so in its message, and a mismatch with
  this reference is a ``fail`` like any other;
* otherwise (the run-dtype forward is not smooth there either) the case is ``unsupported``
  with the reason, e.g. "the float64 forward differs from float32 at output 0 (sign of
  singular vectors?)": never ``fail`` from the derivative of another function.
"""

from __future__ import annotations

import torch

from harness.checks import finite_diff as fd
from harness.checks import tolerances as dtype_tolerance
from harness.checks.autodiff_refs import (
    FULL_JACOBIAN_MAX,
    IDENTITY_DIRECTIONS,
    DiffView,
    attempt,
    random_like,
    restricted,
)
from harness.checks.catalogue import CaseContext, Unsupported
from harness.checks.references import jacobian_fits
from harness.core.locations import describe_exception

WIDE = (torch.float64, torch.complex128)
#: What the finite differences at the call's own dtype are called where they raise.
OWN_DTYPE_LABEL = "finite differences (reference, at the call's own dtype)"


def _differs(low: torch.Tensor, wide: torch.Tensor, amplification: float) -> str:
    """ "" when ``low`` (run dtype) matches ``wide`` (float64) within the dtype rule, else a
    guess at why: the same magnitudes with other signs, or something else."""
    if low.shape != wide.shape or low.numel() == 0:
        return ""
    rtol, atol = dtype_tolerance.tolerances(low, wide, amplification=amplification)
    a, e = low.detach().to(wide.dtype), wide.detach()
    if bool(torch.isclose(a, e, rtol=rtol, atol=atol, equal_nan=True).all()):
        return ""
    if bool(torch.isclose(a.abs(), e.abs(), rtol=rtol, atol=atol, equal_nan=True).all()):
        return "sign of singular vectors?"
    scale = float(e.abs().max()) or 1.0
    if bool(((a - e).abs() <= 0.01 * scale).all()) and bool((a.sign() == e.sign()).all()):
        return "a constant that depends on the dtype, as finfo(dtype).eps?"
    return "a tie, as of argmax, or a branch cut?"


def float64_differs(view: DiffView) -> str:
    """The reason when the float64 copy's forward is not the run-dtype forward ("" when it is,
    or when the call already computes in float64)."""
    low = [a for a in view.primals() if a.dtype not in WIDE]
    if not low or view.entry.caps.randomness:
        return ""
    args64 = view.args64()
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            wide = restricted(view.entry, args64, view.diff, view.outs)(*view.primals(args64))
    except Exception as e:
        # It ran at its own dtype (the view's outputs are that call's): the reference is
        # computed there, with that dtype's finite-difference error (issue 34 part 2).
        name = str(low[0].dtype).replace("torch.", "")
        return (
            f"the Function raises on the float64 copy of the sample ({describe_exception(e)}) "
            f"and runs at {name}"
        )
    outputs = [view.outputs[j] for j in view.outs]
    amp = dtype_tolerance.amplification(view.primals(), outputs)
    for j, o, w in zip(view.outs, outputs, wide):
        if not isinstance(o, torch.Tensor) or not isinstance(w, torch.Tensor):
            continue
        if o.dtype in WIDE:
            continue
        why = _differs(o, w, amp)
        if why:
            name = str(low[0].dtype).replace("torch.", "")
            return f"the float64 forward differs from {name} at {view.out_name(j)} ({why})"
    return ""


def _consistent(ctx: CaseContext, view: DiffView) -> bool:
    """Finite differences at the run dtype give one derivative for the base step and half of
    it (within the widened tolerance): every Jacobian column where the Jacobian is small, else
    a few random directions. A forward that jumps (a sign or a tie that flips) within a step
    gives differences that scale with 1 / step, and fails this."""
    args64 = view.args64()
    f = view.fd_fn(args64, view.diff, view.outs)
    primals = view.primals(args64)
    outs = [view.outputs[j] for j in view.outs]
    base = fd.base_step(outs, ctx.entry.tolerances.fd_step)
    amp = dtype_tolerance.amplification(view.primals(), outs)
    pairs: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []
    label = OWN_DTYPE_LABEL
    if view.columns() <= FULL_JACOBIAN_MAX and not view.is_complex and jacobian_fits(view):
        coarse = attempt(label, fd.jacobian, f, primals, step=base)
        fine = attempt(label, fd.jacobian, f, primals, step=base / 2)
        for o, crow, frow in zip(outs, coarse, fine):
            pairs += [(o, c, d) for c, d in zip(crow, frow)]
    else:
        gen = ctx.generator("gauge directions")
        for _ in range(IDENTITY_DIRECTIONS):
            t = random_like(gen, view.primals())
            coarse_t = attempt(label, fd.directional, f, primals, t, step=base)
            fine_t = attempt(label, fd.directional, f, primals, t, step=base / 2)
            pairs += list(zip(outs, coarse_t, fine_t))
    for o, c, d in pairs:
        if not (bool(torch.isfinite(c).all()) and bool(torch.isfinite(d).all())):
            return False
        low = d.to(o.dtype)
        rtol, atol = dtype_tolerance.tolerances(low, c, amplification=amp, reference_step=base)
        if not bool(torch.isclose(low.to(c.dtype), c, rtol=rtol, atol=atol).all()):
            return False
    return True


def same_function(ctx: CaseContext, view: DiffView, check: str) -> None:
    """Make the view's finite differences those of the function the case calls (see the
    module docstring): a note and run-dtype differences, or ``Unsupported``."""
    why = float64_differs(view)
    if not why:
        return
    view.run_dtype_fd = why
    dtype = str(next(a.dtype for a in view.primals() if a.dtype not in WIDE)).replace("torch.", "")
    if not _consistent(ctx, view):
        raise Unsupported(
            f"{why}: finite differences of the float64 copy would be the derivative of another "
            f"function, and at {dtype} they differ between two steps (the {dtype} forward is "
            f"not smooth there either), so {check} is not checked at {dtype}; check at float64 "
            "(--dtype float64) or choose samples away from the tie"
        )
    ctx.notes.append(
        f"{check}: {why}, so the finite differences ran at {dtype}, the function the call "
        "computes (tolerance widened for their step)"
    )
