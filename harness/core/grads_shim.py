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
``expect_true`` returns its ``bool``. ``install`` then routes ``_make_grads`` through
``_make_grads_without_sympy``, which returns the given gradients unchanged only where
torch's function would: every gradient a tensor, every output a plain (not nested) tensor,
the sizes plain ints and equal, complex with complex. Anything else (a ``None`` gradient,
a mismatch that torch reports, a ``GradientEdge``, batched gradients, a symbolic size, or
once the module is imported by anything: dynamo, a compiled Function, the user) goes to
torch's own function, with its messages.

Narrow on purpose, as ``dynamo_shim``: installed only over a function with the
parameters it was written for; ``forbid()`` (``afdb certify --compile`` calls it) removes
it for the rest of the process; ``AFDB_GRADS_SHIM=0`` in the environment keeps it out.
"""

from __future__ import annotations

import inspect
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.autograd

#: The parameters of torch's ``_make_grads`` that the replacement was written for.
EXPECTED_PARAMETERS = ("outputs", "grads", "is_grads_batched")
SYMBOLIC_MODULE = "torch.fx.experimental.symbolic_shapes"

_original: Callable[..., Any] | None = None
_forbidden = os.environ.get("AFDB_GRADS_SHIM", "1") == "0"


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
    original = _original
    assert original is not None
    if SYMBOLIC_MODULE in sys.modules or is_grads_batched or not _unchanged(outputs, grads):
        return original(outputs, grads, is_grads_batched=is_grads_batched)  # type: ignore[no-any-return]
    return tuple(grads)


def compatible() -> bool:
    """torch's ``_make_grads`` (or the one ``install`` replaced) has the expected parameters."""
    fn = _original if _original is not None else getattr(torch.autograd, "_make_grads", None)
    if fn is None:
        return False
    try:
        names = tuple(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return False
    return names == EXPECTED_PARAMETERS


def installed() -> bool:
    return _original is not None and torch.autograd._make_grads is _make_grads_without_sympy


def install() -> bool:
    """Route ``_make_grads`` around the sympy import (module docstring); idempotent. False
    where it is forbidden or torch's function differs."""
    global _original
    if _forbidden:
        return False
    if _original is not None:  # installed (every case asks: no more than a look at a global)
        return True
    if not compatible():
        return False
    _original = torch.autograd._make_grads
    torch.autograd._make_grads = _make_grads_without_sympy
    return True


def uninstall() -> None:
    """Put torch's own ``_make_grads`` back (``install`` may add the shim again)."""
    global _original
    if _original is None:
        return
    if torch.autograd._make_grads is _make_grads_without_sympy:
        torch.autograd._make_grads = _original
    _original = None


def forbid() -> None:
    """Never install the shim again in this process (``afdb certify --compile``)."""
    global _forbidden
    _forbidden = True
    uninstall()


def forbidden() -> bool:
    return _forbidden


__all__ = ["compatible", "forbid", "forbidden", "install", "installed", "uninstall"]
