"""The eager second-order check, ``eager_vjp_of_vjp``: eager double backward of a Function
torch.func cannot differentiate, against finite differences of its eager first-order vjp
(``harness.checks.eager`` registers it; its docstring says what each check compares)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from harness.checks import fd_error
from harness.checks import finite_diff as fd
from harness.checks.autodiff_refs import (
    FULL_JACOBIAN_MAX,
    IDENTITY_DIRECTIONS,
    DiffView,
    Findings,
    Watch,
    attempt,
    is_custom,
    random_like,
    restricted,
)
from harness.checks.catalogue import CaseContext, Unsupported
from harness.checks.gauge import same_function
from harness.checks.no_graph import no_graph_second_order
from harness.checks.references import fresh_leaves, identity_problems
from harness.checks.second_order import (
    eager_double_backward,
    eager_first_order,
    fd_double_backward,
    first_order_failure,
    follows_first_order,
    second_order_hint,
    second_order_setup,
)

EAGER_SECOND_ORDER_REFERENCE = "finite differences (float64) of the eager first-order vjp"


# --- eager_vjp_of_vjp ------------------------------------------------------------------------


def saved_non_inputs(view: DiffView) -> list[str]:
    """What the backward reads besides its inputs: the tensors it saved (from the ctx of one
    eager call) that are not one of the differentiable inputs, and tensors kept on the ctx as
    attributes. Empty when it saved inputs only (or nothing)."""
    with torch.enable_grad():
        leaves = fresh_leaves(view.args, view.diff, False)
        outs = restricted(view.entry, view.args, view.diff, view.outs)(*leaves)
    node = next(
        (o.grad_fn for o in outs if isinstance(o, torch.Tensor) and o.grad_fn is not None), None
    )
    if node is None:
        return []
    found = []
    try:
        saved = tuple(getattr(node, "saved_tensors", ()) or ())
    except RuntimeError:  # freed, or not readable: nothing can be said
        saved = ()
    for k, t in enumerate(saved):
        if not isinstance(t, torch.Tensor):
            continue
        if any(t is x for x in leaves):
            continue
        found.append(f"saved tensor {k} (shape {tuple(t.shape)}) is not an input")
    for name, value in sorted(vars(node).items()) if hasattr(node, "__dict__") else ():
        if isinstance(value, torch.Tensor) and not any(value is x for x in leaves):
            found.append(f"ctx.{name} holds a tensor that is not an input")
    return found


def _custom_second_order_reference(
    ctx: CaseContext, view: DiffView, primals: Sequence[torch.Tensor], w: Sequence[torch.Tensor]
) -> tuple[list[torch.Tensor] | None, Callable[..., Any]]:
    """gradient=custom: the gradient of ``h(x, c) = <g(x, c), w>`` by finite differences of the
    custom first-order map ``g`` (its full gradient when small, else None: the caller uses
    random directions), and ``h`` itself."""
    g = eager_first_order(view, view.args64())

    def h(*xc: Any) -> tuple[torch.Tensor]:
        value = fd.dot(g(*xc), w)
        setattr(h, fd_error.COMPUTES_IN, getattr(g, fd_error.COMPUTES_IN, ()))
        return (torch.as_tensor(value, dtype=torch.float64),)

    p64 = [fd.upcast(p) for p in primals]
    if sum(p.numel() for p in p64) > FULL_JACOBIAN_MAX:
        return None, h
    blocks = attempt(
        "finite differences of the eager vjp (reference)",
        fd.jacobian,
        h,
        p64,
        step=view.entry.tolerances.fd_step,
    )
    return [fd_error.reshaped(b, p.shape) for b, p in zip(blocks[0], p64)], h


def run_eager_vjp_of_vjp(ctx: CaseContext) -> str:
    view, xs, cots, names = second_order_setup(ctx)
    entry = ctx.entry
    custom = is_custom(entry)
    if custom:
        extra = saved_non_inputs(view)
        if extra:
            raise Unsupported(
                "gradient=custom and the backward reads more than its inputs ("
                + "; ".join(extra[:3])
                + "): finite differences of its first-order map would differentiate those "
                "tensors by the true derivative while eager double backward goes through the "
                "Function's own (custom) rule, so its second order has no independent eager "
                "reference; save the inputs and recompute in backward to have it checked"
            )
    if not custom:
        same_function(ctx, view, "eager_vjp_of_vjp")
    findings = Findings.derived(ctx, view)
    w = random_like(ctx.generator("outer cotangents"), xs)
    primals = [*xs, *cots]
    label = "eager_vjp_of_vjp (torch.autograd.grad of torch.autograd.grad with create_graph=True)"
    watch = Watch()
    for nm, p in zip(names, primals):
        watch.add(nm, p)
    actual = attempt(label, eager_double_backward, view, primals, w)
    watch.verify(label, findings, "backward must leave its inputs and grad_output unchanged")
    if custom:
        expected, h = _custom_second_order_reference(ctx, view, primals, w)
        if expected is None:
            gen = ctx.generator("second-order directions")
            p64 = [fd.upcast(p) for p in primals]
            directions = [random_like(gen, p64) for _ in range(IDENTITY_DIRECTIONS)]
            rhs = [
                fd_error.scalar(
                    attempt(
                        "finite differences of the eager vjp (reference)",
                        fd.directional,
                        h,
                        p64,
                        t,
                        step=entry.tolerances.fd_step,
                    )[0]
                )
                for t in directions
            ]
            identity_problems(label, findings, actual, directions, rhs, sum(p.numel() for p in p64))
            expected = None
    else:
        expected = fd_double_backward(view, primals, w, entry.tolerances.fd_step)
    if expected is not None:
        for nm, a, e in zip(names, actual, expected):
            findings.compare(
                f"{label}: d<vjp, w>/d {nm} vs {EAGER_SECOND_ORDER_REFERENCE} (reference)", a, e
            )
    hint = ""
    if findings.problems:
        case = "" if custom else first_order_failure(ctx, view, cots)
        if case:
            follows_first_order(findings, "eager_vjp_of_vjp", case.replace("/vjp/", "/eager_vjp/"))
        else:
            # a correct first order with no graph: double backward unsupported (or raises)
            no_graph_second_order(ctx, view, primals, findings)
            if expected is not None:
                hint = second_order_hint(entry, actual, expected)
    findings.raise_if_any(hint)
    return EAGER_SECOND_ORDER_REFERENCE
