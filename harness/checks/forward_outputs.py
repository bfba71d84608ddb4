"""Every output a vmapped forward returns, compared (issue 31, part 4).

``grad_of_vmap`` and ``jvp_of_vmap`` differentiate the outputs that carry gradients, but the
vmapped forward they run returns every output: each is compared with the loop over slices
(shapes, dtypes, values; integer and bool outputs exactly), so a rule that returns a wrong
non-differentiable output (a count of the wrong shape) fails there too. Where torch's
un-batching bug is what changed an output (``harness.checks.unbatching``), the case is
``xfail``. Checks whose transform never returns the non-differentiable outputs
(``vmap_of_vjp``, ``vmap_of_jvp``, the three-level checks) say so in a note.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from harness.checks import noise
from harness.checks.autodiff_refs import DiffView, Findings
from harness.checks.catalogue import CaseContext, TorchBug
from harness.checks.unbatching import unbatching_bug
from harness.plans.plan import Plan
from harness.plans.slices import build_batched_args


def note_left_out(ctx: CaseContext, check: str, view: DiffView) -> None:
    """Say which outputs a check that differentiates only the outputs that carry gradients
    does not compare, and where they are compared."""
    left = [view.out_name(j) for j in range(len(view.outputs)) if j not in view.outs]
    if left:
        ctx.notes.append(
            f"{check}: {', '.join(left)} not compared here (not differentiable: the transform "
            "never returns it); vmap, contract, grad_of_vmap and jvp_of_vmap compare it"
        )


def compare_forward(
    ctx: CaseContext,
    findings: Findings,
    label: str,
    view: DiffView,
    returned: Sequence[Any],
    expected: Sequence[Any],
    fn: Callable[..., Any],
    plan: Plan,
    only: Sequence[int] | None = None,
) -> bool:
    """Every output the vmapped forward returned (or those in ``only``), differentiable or
    not, against the loop over slices: shapes, dtypes and values (integer and bool outputs
    exactly). True when something differs (added to ``findings``)."""
    start = len(findings.problems)
    if len(returned) != len(expected):
        findings.add(
            f"{label}: the forward under vmap returned {len(returned)} outputs, the loop over "
            f"slices {len(expected)}"
        )
        return True
    compared = []
    for j, (a, e) in enumerate(zip(returned, expected)):
        if only is not None and j not in only:
            continue
        kind = "" if j in view.outs else " (not differentiable)"
        text = (
            f"{label}: {view.out_name(j)}{kind}, the forward under vmap vs loop over slices "
            "(reference)"
        )
        if not isinstance(e, torch.Tensor):
            if isinstance(a, torch.Tensor) or a != e:
                findings.add(f"{text}: got {a!r}, reference {e!r}")
            continue
        compared.append((text, a, e))
    for text, a, e in compared:
        findings.compare(text, a, e, e.dtype)
    noise.recheck_findings(
        ctx, findings, start, compared, lambda: noise.wide_loop(fn, plan, ctx.slices)
    )
    return len(findings.problems) > start


def forward_torch_bug(
    ctx: CaseContext,
    label: str,
    fn: Callable[..., Any],
    plan: Plan,
    out_dims: Sequence[Any],
    expected: Sequence[Any],
    findings: Findings,
) -> None:
    """Raise ``TorchBug`` (``xfail``) when the forward's outputs differ because of torch's
    un-batching bug (``harness.checks.unbatching``), not the Function."""
    message = unbatching_bug(
        fn,
        plan,
        out_dims,
        lambda: build_batched_args(plan, ctx.slices),
        expected,
        rtol=findings.rtol,
        atol=findings.atol,
        randomness=ctx.vmap_randomness,
    )
    if message:
        raise TorchBug(f"{label}: {message}")
