"""Keep the first ``torch.autograd.grad`` with ``grad_outputs`` from importing sympy.

``torch.autograd.grad`` and ``torch.autograd.backward`` check each given gradient against
its output in ``torch.autograd._make_grads``, which imports
``torch.fx.experimental.symbolic_shapes`` (and sympy with it: about 0.4 s of CPU, a fifth
of ``import torch``) to compare the two shapes with ``sym_eq`` / ``expect_true``, so that
symbolic sizes compare without guarding. Every vjp check passes cotangents, so every
``afdb check`` paid that import although nothing in it has a symbolic size.

Symbolic sizes (``torch.SymInt``) are made by ``torch.fx.experimental.symbolic_shapes``'
shape environment, so while that module is absent from ``sys.modules`` no tensor of the
process can have one, and for plain ``int`` sizes ``sym_eq`` is tuple equality and
``expect_true`` returns its ``bool``. ``PATCH.install()`` then routes ``_make_grads``
through ``_make_grads_without_sympy``, which returns the given gradients unchanged only where
torch's function would: every gradient a tensor, every output a plain (not nested) tensor,
the sizes plain ints and equal, complex with complex. Anything else (a ``None`` gradient,
a mismatch that torch reports, a ``GradientEdge``, batched gradients, a symbolic size, or
once the module is imported by anything: dynamo, a compiled Function, the user) goes to
torch's own function, with its messages.

Narrow on purpose, as ``dynamo_shim``: installed only over a function with the
parameters it was written for; ``PATCH.forbid()`` (``afdb certify --compile`` calls it,
through ``shims.forbid``) removes
it for the rest of the process; ``AFDB_GRADS_SHIM=0`` in the environment keeps it out.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import torch
import torch.autograd

from harness.core.patching import GuardedPatch

#: The parameters of torch's ``_make_grads`` that the replacement was written for.
EXPECTED_PARAMETERS = ("outputs", "grads", "is_grads_batched")
SYMBOLIC_MODULE = "torch.fx.experimental.symbolic_shapes"


def _plain_sizes(shape: torch.Size) -> bool:
    return all(type(d) is int for d in shape)


def _unchanged(outputs: Sequence[Any], grads: Sequence[Any]) -> bool:
    """torch's ``_make_grads`` would return these gradients as they are, without error."""
    if len(outputs) != len(grads):
        return False
    for out, grad in zip(outputs, grads):
        if not isinstance(out, torch.Tensor) or not isinstance(grad, torch.Tensor):
            return False
        if out.is_nested or grad.is_nested:
            return False
        out_shape, grad_shape = out.shape, grad.shape
        if not (_plain_sizes(out_shape) and _plain_sizes(grad_shape)):
            return False
        if tuple(out_shape) != tuple(grad_shape):
            return False
        if out.dtype.is_complex != grad.dtype.is_complex:
            return False
    return True


def _make_grads_without_sympy(
    outputs: Sequence[Any], grads: Sequence[Any], is_grads_batched: bool
) -> tuple[Any, ...]:
    """torch's ``_make_grads``; without the sympy import where nothing can be symbolic."""
    original = PATCH.original
    assert original is not None
    if SYMBOLIC_MODULE in sys.modules or is_grads_batched or not _unchanged(outputs, grads):
        return original(outputs, grads, is_grads_batched=is_grads_batched)  # type: ignore[no-any-return]
    return tuple(grads)


def _autograd_module() -> Any:
    return torch.autograd


#: torch's ``_make_grads`` replaced, under the guards of ``GuardedPatch``.
PATCH = GuardedPatch(
    _autograd_module,
    "_make_grads",
    _make_grads_without_sympy,
    EXPECTED_PARAMETERS,
    "AFDB_GRADS_SHIM",
)

__all__ = ["PATCH"]
