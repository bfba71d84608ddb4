"""The float32 leg of a float64 sample: ``jvp`` and ``vjp`` once more at float32.

Samples keep their own dtypes when the run fixes none (``afdb check``, ``harness.check``),
so a Function whose backward overflows only in float32 (a softmax without its max shift,
on logits of scale 60) passes every float64 case. For every sample whose floating tensors
are all float64, ``jvp`` and ``vjp`` get one more case each, ``.../s0/dtype=float32``
(a stable id of its own): the sample cast to float32, the transform at float32, against
the float64 reference (finite differences of the float64 forward at the float32 point,
or for ``gradient="custom"`` the eager backward at float64) with the dtype rule's
tolerance (``harness.checks.tolerances``).

The leg runs by default. A Function that refuses float32 (its plain call at float32
raises: an ``assert x.dtype == torch.float64``) gets ``unsupported`` with a note, not an
error. Declared dtypes override: ``dtypes=(torch.float64,)`` (CLI ``--dtypes float64``)
leaves the leg out, a declaration naming float32 keeps it. A run that fixes a dtype
(``--dtype``) casts every sample already and has no leg.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from autograd_function_db.entry import Entry, Sample
from harness.checks.catalogue import CaseContext, CheckFailure, Unsupported
from harness.core.locations import describe_exception
from harness.core.options import Options
from harness.plans.plan import DtypeLeg
from harness.plans.pytrees import map_leaves

#: The checks that get the leg, and its dtype.
LEG_CHECKS = ("jvp", "vjp")
LEG_DTYPE = torch.float32
LEG_NAME = "float32"


def _floating(args: Sequence[Any]) -> list[torch.Tensor]:
    out: list[torch.Tensor] = []
    for a in args:
        map_leaves(
            a,
            lambda _k, v: (
                out.append(v)
                if isinstance(v, torch.Tensor) and (v.is_floating_point() or v.is_complex())
                else None
            ),
        )
    return out


def dtype_legs(check: str, entry: Entry, sample: Sample, options: Options) -> list[DtypeLeg]:
    """The leg plans of one (check, sample): one float32 leg for a float64 sample of jvp or
    vjp in a run that keeps the samples' dtypes, unless the entry's declared dtypes leave
    float32 out."""
    if check not in LEG_CHECKS or options.dtype is not None:
        return []
    if entry.dtypes and LEG_DTYPE not in entry.dtypes:
        return []
    floating = _floating(sample.args)
    if not floating or any(t.dtype != torch.float64 for t in floating):
        return []
    return [DtypeLeg((), "dtype leg", LEG_NAME)]


#: How ``afdb check`` announces the leg where it runs (and the README and docs/cli.md).
LEG_ANNOUNCEMENT = (
    "float64 samples are also checked at float32 (the float32 leg of jvp and vjp): "
    "--dtypes float64 to skip"
)


def leg_runs(entry: Entry, samples: Sequence[Sample], options: Options) -> bool:
    """Whether the run has a float32 leg: some sample gets one for a selected leg check."""
    checks = [c for c in LEG_CHECKS if options.checks is None or c in options.checks]
    return any(dtype_legs(c, entry, s, options) for c in checks for s in samples)


def _cast(a: Any) -> Any:
    def one(_k: Any, v: Any) -> Any:
        if isinstance(v, torch.Tensor) and v.dtype == torch.float64:
            return v.detach().to(LEG_DTYPE)
        return v

    return map_leaves(a, one)


class CastSlices:
    """A slice source whose floating tensors come cast to the leg's dtype (fresh copies)."""

    def __init__(self, slices: Any) -> None:
        self._slices = slices
        self.views: dict[Any, Any] = {}

    def args(self, path: tuple[int, ...] = ()) -> tuple[Any, ...]:
        return tuple(_cast(a) for a in self._slices.args(path))

    def peek(self, path: tuple[int, ...]) -> tuple[Any, ...]:
        return self.args(path)

    def base_args(self, index: int) -> tuple[Any, ...]:
        return tuple(_cast(a) for a in self._slices.base_args(index))


LEG_WORDS = (
    "float32 leg (the float64 sample cast to float32, against the float64 reference with the "
    "float32 tolerance rule)"
)


def with_dtype_leg(run: Callable[[CaseContext], str | None]) -> Callable[[CaseContext], str | None]:
    """``run`` on the cast sample when the case is a leg; its messages say so."""

    def run_leg(ctx: CaseContext) -> str | None:
        if not isinstance(ctx.plan, DtypeLeg):
            return run(ctx)
        own = ctx.slices
        ctx.slices = CastSlices(ctx.slices)  # type: ignore[assignment]
        ctx.sample = Sample(tuple(_cast(a) for a in ctx.sample.args), ctx.sample.name)
        ctx.plan = None
        ctx.leg = LEG_DTYPE
        refused = _refuses(ctx.entry, ctx.slices)
        # a call that raises at the sample's own dtype too refuses nothing about float32: the
        # leg runs and reports the Function's error as its other cases do
        if refused and not _refuses(ctx.entry, own):
            raise Unsupported(
                f"{LEG_NAME} leg not run: the Function refuses {LEG_NAME} (its plain call at "
                f"{LEG_NAME} raised {refused}); declare the dtypes it supports "
                "(dtypes=(torch.float64,), --dtypes float64) to leave the leg out"
            )
        try:
            used = run(ctx)
        except CheckFailure as e:
            raise CheckFailure(f"{LEG_WORDS}: {e}") from None
        except Unsupported as e:
            raise Unsupported(f"{LEG_NAME} leg: {e}") from None
        ctx.notes.insert(0, LEG_WORDS)
        return used

    return run_leg


def _refuses(entry: Entry, slices: Any) -> str:
    """How the plain call on ``slices``' base arguments raised ("" when it did not)."""
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            entry.call(*slices.args())
    except Exception as e:
        return describe_exception(e)
    return ""
