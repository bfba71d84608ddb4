"""Arguments whose layout torch.func.vmap cannot batch (sparse tensors passed as data).

A recorded call may pass a sparse COO matrix that no call differentiates: every check
takes it as recorded. Stacking equal copies of it along a batch dim gives a sparse tensor
that vmap cannot treat as batched (functorch's batching rules take strided tensors), so a
plan that batches such an argument is ``unsupported``, naming it; the plans that hold it
unbatched (``None``) check the Function with it as usual. Where the Function raises under
one of those plans (its operations on the sparse argument meet batched tensors: torch has
no batching rule for most sparse kernels), the case is ``unsupported`` too, naming the
argument and the exception: the checks without vmap take the argument as recorded.
"""

from __future__ import annotations

from typing import Any

import torch

from harness.plans.plan import Plan
from harness.plans.pytrees import leaves


def _batched(dims: Any) -> bool:
    if dims is None:
        return False
    if isinstance(dims, tuple | list):
        return any(_batched(d) for d in dims)
    if isinstance(dims, dict):
        return any(_batched(d) for d in dims.values())
    return True


def unbatchable_layout(plan: Plan | None, args: tuple[Any, ...]) -> str:
    """Why ``plan`` cannot batch one of ``args`` ('' when it can): an argument holding a
    tensor of a layout other than strided that some level batches."""
    if plan is None:
        return ""
    for j, arg in enumerate(args):
        kinds = [
            str(v.layout).removeprefix("torch.")
            for _, v in leaves(arg)
            if isinstance(v, torch.Tensor) and v.layout != torch.strided
        ]
        if not kinds:
            continue
        for level in plan.levels:
            if j < len(level.in_dims) and _batched(level.in_dims[j]):
                return (
                    f"argument {j} is a {kinds[0]} tensor, which torch.func.vmap cannot "
                    f"batch, and this plan batches it (in_dims {level.in_dims[j]}); the "
                    "plans that hold it unbatched check the Function with it"
                )
    return ""


def _layouts(args: tuple[Any, ...]) -> list[tuple[int, str]]:
    return [
        (j, str(v.layout).removeprefix("torch."))
        for j, arg in enumerate(args)
        for _, v in leaves(arg)
        if isinstance(v, torch.Tensor) and v.layout != torch.strided
    ]


def sparse_under_vmap(plan: Any, args: tuple[Any, ...], exc: BaseException) -> str:
    """Why a case whose Function raised under vmap is ``unsupported`` ('' when it is the
    Function's error): a case with a plan (a vmap) whose arguments hold a sparse tensor."""
    if plan is None or not isinstance(exc, Exception):
        return ""
    found = _layouts(args)
    if not found:
        return ""
    j, kind = found[0]
    from harness.core.locations import describe_exception

    return (
        f"the Function raised under torch.func.vmap ({describe_exception(exc, limit=200)}) "
        f"and argument {j} is a {kind} tensor: torch has no batching rule for most "
        "operations on sparse tensors, so this check cannot run with it (the checks "
        "without vmap take it as recorded)"
    )
