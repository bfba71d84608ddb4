"""Keep ``torch.func.vjp``'s backward from importing ``torch._dynamo`` when nothing compiles.

``torch.func.vjp`` (and ``grad``, ``jacrev``...) computes its backward in
``torch._functorch.eager_transforms._autograd_grad``, which enters
``torch._dynamo.compiled_autograd._disable()`` around ``torch.autograd.grad``. Reaching
that context imports all of ``torch._dynamo`` (with ``torch._inductor`` and sympy: about
840 modules, 0.8 s of CPU) on the first backward of a process, which is most of what a
small ``afdb check`` costs beyond importing torch.

Compiled autograd is enabled only through ``torch._dynamo`` (``compiled_autograd.enable``
or its config), so while ``torch._dynamo`` is absent from ``sys.modules`` it was never
enabled in this process and the context has nothing to turn off. ``PATCH.install()``
then routes ``_autograd_grad`` through ``_autograd_grad_without_dynamo``: the same computation, with
the one C-level effect of ``_disable`` kept (no autograd compiler during the call, the
previous one put back after). Once ``torch._dynamo`` is imported (a Function or backend
that compiles, ``afdb certify --compile``), every call goes to torch's own function again.

Narrow on purpose: installed only where torch's function has the signature it was written
for; ``PATCH.forbid()`` (``afdb certify --compile`` calls it, through ``shims.forbid``)
removes it for the rest of the process; ``AFDB_DYNAMO_SHIM=0`` in the environment keeps it out. One difference remains,
where ``torch._dynamo`` is first imported *inside* such a backward and a compiled function
with compiled autograd switched on runs within it: ``_disable``'s module flag
``active_disable_ctx`` would have been set, and is not (nothing in this suite does that).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any

import torch

from harness.core.patching import GuardedPatch

#: The parameters of torch's ``_autograd_grad`` that the replacement was written for.
EXPECTED_PARAMETERS = ("outputs", "inputs", "grad_outputs", "retain_graph", "create_graph")


def _dynamo_imported() -> bool:
    return "torch._dynamo" in sys.modules


def _module() -> Any:
    import torch._functorch.eager_transforms as eager_transforms

    return eager_transforms


def _set_compiler() -> Callable[..., Any] | None:
    c_dynamo = getattr(torch._C, "_dynamo", None)
    compiled = getattr(c_dynamo, "compiled_autograd", None)
    return getattr(compiled, "set_autograd_compiler", None)


def _autograd_grad_without_dynamo(
    outputs: Sequence[torch.Tensor],
    inputs: Sequence[torch.Tensor],
    grad_outputs: Sequence[torch.Tensor] | None = None,
    retain_graph: bool = False,
    create_graph: bool = True,
) -> tuple[torch.Tensor, ...]:
    """torch's ``_autograd_grad``: gradients of the outputs that require grad (zeros for
    inputs they do not reach); without ``torch._dynamo`` unless it is imported already."""
    original = PATCH.original
    assert original is not None
    if _dynamo_imported():  # it may have enabled compiled autograd: torch's own way
        return original(outputs, inputs, grad_outputs, retain_graph, create_graph)  # type: ignore[no-any-return]
    if grad_outputs is None:
        used = [o for o in outputs if o.requires_grad]
        cotangents: list[torch.Tensor] | None = None
    else:
        pairs = [(o, g) for o, g in zip(outputs, grad_outputs) if o.requires_grad]
        used = [o for o, _ in pairs]
        cotangents = [g for _, g in pairs]
    if not used:
        return tuple(torch.zeros_like(x) for x in inputs)
    set_compiler = _set_compiler()
    assert set_compiler is not None
    prior = set_compiler(None, False)  # what ``compiled_autograd._disable`` does in C
    try:
        grads = torch.autograd.grad(
            used,
            inputs,
            cotangents,
            retain_graph=retain_graph,
            create_graph=create_graph,
            allow_unused=True,
        )
    finally:
        set_compiler(*prior)
    return tuple(torch.zeros_like(x) if g is None else g for g, x in zip(grads, inputs))


#: torch's ``_autograd_grad`` replaced, under the guards of ``GuardedPatch``.
PATCH = GuardedPatch(
    _module,
    "_autograd_grad",
    _autograd_grad_without_dynamo,
    EXPECTED_PARAMETERS,
    "AFDB_DYNAMO_SHIM",
    precondition=lambda: _set_compiler() is not None,
)

__all__ = ["PATCH"]
