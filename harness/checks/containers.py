"""Outputs inside containers: floating tensors a Function returns nested in a dict or list.

``autograd.Function`` tracks only the tensors it returns directly (one tensor, or the
elements of a returned tuple). A tensor nested in a dict, a list or a tuple inside the
return value is not recorded: it does not require grad, eager autograd and torch.func
alike treat it as a constant, and every gradient through it is silently zero. So a
floating leaf nested in a container is a finding of its own, reported once per check
family (``vmap``, ``autodiff``): in the family's first case, the first case the run
enumerates for the first sample whose outputs show it. The family's other cases keep
their own verdicts (vmap of a dict output is fine; the autodiff checks find no
differentiable output). An output the Function declares non-differentiable
(``nondiff_outputs``, by its top-level position) is not a finding.

A vmap rule that returns a dict of out_dims for such outputs is legal and stays so:
only the forward's return is looked at.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.utils._pytree as pytree

from autograd_function_db.entry import Entry
from harness.checks.catalogue import CaseContext, add_case_guard, check_names, get_check
from harness.plans.plan import ArgLayout

WHY = (
    "autograd.Function does not track tensors inside containers, so their gradients are "
    "silently zero; return them as a tuple"
)
#: At most this many nested leaves are named in the message.
MAX_NAMED = 4
_KIND: dict[type, str] = {dict: "dict", list: "list", tuple: "tuple"}


def _nested(value: Any, name: str, kind: str, found: list[tuple[str, str]]) -> None:
    """Append (name, innermost container kind) for every floating leaf below ``value``."""
    if isinstance(value, torch.Tensor):
        if kind and (value.is_floating_point() or value.is_complex()):
            found.append((name, kind))
        return
    if type(value) in _KIND:
        items = value.items() if type(value) is dict else enumerate(value)
        for key, item in items:
            path = pytree.keystr((pytree.MappingKey(key),)) if type(value) is dict else f"[{key}]"
            _nested(item, name + path, _KIND[type(value)], found)


def nested_outputs(out: Any, nondiff: Sequence[int] = ()) -> list[tuple[str, str]]:
    """(name, container kind) of every floating tensor nested in a container of ``out``, the
    value a Function's forward returned: ``output 0['cos']`` for a returned dict, ``output
    0[1]`` for a returned list, ``output 1['var']`` for a dict inside a returned tuple."""
    found: list[tuple[str, str]] = []
    top = out if type(out) is tuple else (out,)
    for k, value in enumerate(top):
        if k not in nondiff:
            _nested(value, f"output {k}", "", found)
    return found


def finding(found: Sequence[tuple[str, str]]) -> str:
    """The message: ``output 0['cos'] is inside a dict: autograd.Function does not ...``."""
    named = [f"{name} is inside a {kind}" for name, kind in found[:MAX_NAMED]]
    more = len(found) - len(named)
    return ", ".join(named) + (f" (and {more} more)" if more > 0 else "") + f": {WHY}"


def _sample_finding(entry: Entry, args: Sequence[Any]) -> str:
    """The finding for one sample's arguments ("" when none, or when the call raises: the
    checks report that)."""
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            out = entry.call(*args)
    except Exception:
        return ""
    found = nested_outputs(out, entry.caps.nondiff_outputs)
    return finding(found) if found else ""


def _kept(ctx: CaseContext, key: Any, compute: Callable[[], Any]) -> Any:
    kept = getattr(ctx.slices, "views", None)
    if kept is None:
        return compute()
    if key not in kept:
        kept[key] = compute()
    return kept[key]


def _first_case(ctx: CaseContext, family: str) -> tuple[str, Any] | None:
    """(check, plan) of the family's first case for this sample in the run's order, None
    when the family runs no case for it."""
    names = list(ctx.options.checks) if ctx.options.checks else check_names()
    for name in names:
        spec = get_check(name)
        if spec.family != family or spec.supported(ctx.entry):
            continue
        plans = spec.plans(ArgLayout.of(ctx.sample, ctx.entry.linked_args), ctx.options)
        if plans:
            return name, plans[0]
    return None


def container_finding(ctx: CaseContext, check: str, family: str) -> str:
    """The finding when this case is where its family reports it, else ""."""
    text = _kept(ctx, ("nested outputs",), lambda: _sample_finding(ctx.entry, ctx.slices.args()))
    if not text:
        return ""
    base = getattr(ctx.slices, "base_args", None)
    if base is not None:  # an earlier sample that shows it reports it
        for index in range(ctx.sample_index):

            def earlier_finding(i: int = index) -> str:
                return _sample_finding(ctx.entry, base(i))

            if _kept(ctx, ("nested outputs", index), earlier_finding):
                return ""
    first = _kept(ctx, ("first case", family, ctx.options), lambda: _first_case(ctx, family))
    if first is None:
        return ""
    name, plan = first
    same_plan = (plan is None and ctx.plan is None) or (
        plan is not None and ctx.plan is not None and plan.id == ctx.plan.id
    )
    return text if name == check and same_plan else ""


add_case_guard(container_finding)
