"""Does the Function's double backward raise by itself, with no other transform around it?

A check that composes a transform the Function claims (its vmap rule, its jvp) with double
backward, which it does not claim, can raise for either reason. Only where the eager double
backward alone raises at the same sample is the raise a refusal of double backward
(``unsupported``); where it runs, the raise comes from the claimed transform (a vmap rule's
wrong ``out_dims`` reaching the backward as a mis-shaped gradient) and stays the Function's
``error``. Decided by the situation: the eager double backward is run once, never matched
against a message.
"""

from __future__ import annotations

import torch

from harness.checks.autodiff_refs import diff_view, random_like
from harness.checks.catalogue import CaseContext
from harness.checks.references import eager_vjp


def double_backward_raises(ctx: CaseContext | None) -> bool | None:
    """True when the eager double backward raises at the case's sample, False when it runs,
    None when it cannot be tried (no context, nothing differentiable, no backward)."""
    if ctx is None:
        return None
    try:
        view = diff_view(ctx)
    except Exception:  # noqa: BLE001 - nothing differentiable: no evidence either way
        return None
    entry = view.entry
    if not entry.caps.backward:
        return None
    gen = ctx.generator("double backward alone")
    try:
        with torch.enable_grad():
            args = list(view.args)
            for i in view.diff:
                args[i] = args[i].detach().clone().requires_grad_(True)
            cots = [
                c.detach().requires_grad_(True)
                for c in random_like(gen, [view.outputs[j] for j in view.outs])
            ]
            grads = eager_vjp(entry, args, view.diff, view.outs, cots, create_graph=True)
            ws = random_like(gen, list(grads))
            total = sum((g * w).sum() for g, w in zip(grads, ws) if g.requires_grad)
            if isinstance(total, torch.Tensor) and total.requires_grad:
                torch.autograd.grad(total, [args[i] for i in view.diff] + cots, allow_unused=True)
    except Exception:  # noqa: BLE001 - the evidence sought: double backward raises alone
        return True
    return False
