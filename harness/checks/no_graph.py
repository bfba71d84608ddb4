"""Double backward through a backward that builds no graph: not supported, not a wrong answer.

A backward that computes its gradient outside autograd (under ``no_grad``, through numpy,
from detached copies) gives a first-order gradient with no graph at all under
``create_graph=True``: torch then reads every second derivative through it as 0. That is
double backward not supported (``unsupported``, with the hint to mark the backward
``@once_differentiable``), unless the Function claims double backward. A first-order
gradient *with* a graph (to any input, or to the cotangent, which requires grad here)
whose second derivatives are wrong stays a failure.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from autograd_function_db.entry import Entry
from harness.checks.autodiff_refs import DiffView, Findings
from harness.checks.catalogue import CaseContext, Unsupported
from harness.checks.references import eager_vjp


def graphless_first_order(view: DiffView, primals: Sequence[torch.Tensor]) -> bool:
    """True when the eager first-order gradient, taken with ``create_graph=True`` from inputs
    and a cotangent that all require grad, carries no graph at all (to no input, not to the
    cotangent): the backward computed it outside autograd (``no_grad``, numpy, detached
    copies), so every second derivative through it reads as 0."""
    n = len(view.diff)
    try:
        with torch.enable_grad():
            leaves = [p.detach().clone().requires_grad_(True) for p in primals]
            call = list(view.args)
            for i, x in zip(view.diff, leaves):
                call[i] = x
            first = eager_vjp(view.entry, call, view.diff, view.outs, leaves[n:], create_graph=True)
    except Exception:  # noqa: BLE001 - a backward that raises here is reported by the check
        return False
    return not any(isinstance(g, torch.Tensor) and g.requires_grad for g in first)


def _backward_site(entry: Entry) -> str:
    """``lib.py:12`` where the Function's backward is defined ("" when unknown)."""
    from harness.core.locations import relative_file

    fn = getattr(getattr(entry, "function", None), "backward", None)
    fn = getattr(fn, "__wrapped__", fn)
    code = getattr(fn, "__code__", None)
    if code is None:
        return ""
    return f"{relative_file(code.co_filename)}:{code.co_firstlineno}"


#: The advice for a backward that builds no graph.
ONCE_DIFFERENTIABLE_HINT = (
    "mark the backward @once_differentiable (torch.autograd.function.once_differentiable) so "
    "that differentiating it again raises instead of silently dropping the term from a loss, "
    "or compute it with differentiable torch ops"
)


def no_graph_second_order(
    ctx: CaseContext, view: DiffView, primals: Sequence[torch.Tensor], findings: Findings
) -> None:
    """A failed second-order case whose backward builds no graph under ``create_graph=True``:
    double backward is not supported, so ``Unsupported`` naming the backward, with the hint to
    mark it ``@once_differentiable``; where the Function claims double backward (declared) it
    stays a failure, with the same hint. A first-order gradient *with* a graph (to any input
    or to the cotangent) whose second derivatives are wrong is left failing."""
    if not findings.problems or not graphless_first_order(view, primals):
        return
    from harness.core.refused import (
        DOUBLE_BACKWARD,
        NO_GRAPH,
        not_claimed_double_backward,
        refused_phrase,
    )

    what = (
        "under create_graph=True the Function's first-order gradient carries no graph, neither "
        "to the inputs nor to the cotangent (its backward computes outside autograd: no_grad, "
        "numpy or detached tensors), so every second derivative through it reads as 0"
    )
    why = not_claimed_double_backward(ctx.entry)
    if not why:
        findings.hint(f"{what}; {ONCE_DIFFERENTIABLE_HINT}")
        return
    phrase = refused_phrase(
        DOUBLE_BACKWARD, NO_GRAPH, "backward computed outside autograd", _backward_site(ctx.entry)
    )
    raise Unsupported(
        f"{phrase}: {what} (first mismatch: {findings.problems[0][:400]}). Not a wrong answer "
        f"of a transform the Function claims: {why}; {ONCE_DIFFERENTIABLE_HINT}"
    )
