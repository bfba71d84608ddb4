"""What the cases of a run will need from torch, loaded once before workers are forked.

torch loads parts of itself on first use: the first ``torch.autograd.grad`` with
``grad_outputs`` imports ``torch.fx.experimental.symbolic_shapes`` (and sympy with it,
about 0.4 s of CPU) unless ``harness.core.grads_shim`` keeps it out, the first
forward-mode dual tensor compiles the JIT decompositions of
``torch._decomp.decompositions_for_jvp`` (about 0.2 s), and ``torch.func.vjp``'s backward
imports ``torch._dynamo`` (about 1 s) unless ``harness.core.dynamo_shim`` keeps it out (and
so does the first call of one of torch's Python references under a transform). A
forked worker inherits what its parent loaded; what the parent did not load, every worker
loads again. ``warm_for(cases)`` takes each first use once in the parent, for the kinds of
checks among the cases (a run of vmap checks only loads nothing), with tiny float64
tensors and no random draws; a failure here is ignored (the cases report their own).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch

from harness.core import shims
from harness.core.torch_warnings import load_jvp_decompositions

#: Checks whose references or transforms run forward-mode AD (dual tensors).
FORWARD_CHECKS = frozenset({"jvp", "jvp_of_vmap", "vmap_of_jvp", "jvp_of_vjp", "jacfwd"})
#: Checks that differentiate a Function's backward or jvp again (a transform over it).
SECOND_ORDER_CHECKS = frozenset({"jvp_of_vjp", "vjp_of_vjp"})


def _ones() -> torch.Tensor:
    return torch.ones(1, dtype=torch.float64)


def _backward() -> None:
    """The first eager backward with cotangents, and torch.func.vjp's backward."""
    with torch.enable_grad():
        x = _ones().requires_grad_(True)
        torch.autograd.grad(torch.sin(x), x, _ones())
    vjp_fn = torch.func.vjp(torch.sin, _ones())[1]
    vjp_fn(_ones())


def _forward() -> None:
    """The first dual tensor, and torch.func.jvp."""
    import torch.autograd.forward_ad as fwAD

    load_jvp_decompositions()  # what the dual tensor imports, without torch's deprecations
    with fwAD.dual_level():
        fwAD.make_dual(_ones(), _ones())
    torch.func.jvp(torch.sin, (_ones(),), (_ones(),))


def _compile() -> None:
    import torch._dynamo  # noqa: F401 (what every compiled case imports first)


def _refs() -> None:
    """An op torch runs through a Python reference under a transform (``t * 2`` under
    ``torch.func.jvp``): the first call of a ``torch._disable_dynamo`` reference imports
    ``torch._dynamo``, shim or not, as a backward like ``grad * 6 * x`` under a
    second-order transform does."""
    torch.func.jvp(lambda t: t * 2, (_ones(),), (_ones(),))


def needs(checks: Iterable[str], workers: int = 1) -> list[str]:
    """The first uses the checks will take: "backward", "forward", "compile", and "refs"
    (the ``torch._dynamo`` import of torch's Python references, about 1 s) where two or
    more workers would each take it: forward-mode or second-order checks make it likely
    (the database's and PyTorch's entries do), not certain, so one worker (``afdb check``'s
    default) takes it itself, only if a case needs it."""
    from harness.checks.catalogue import CHECKS, check_names

    check_names()  # the catalogue is filled on first use
    wanted: list[str] = []
    for name in set(checks):
        spec = CHECKS.get(name)
        family = spec.family if spec is not None else ""
        if family == "autodiff" or name.startswith("compiled_") or name.endswith("_of_compiled"):
            wanted.append("backward")
        if name in FORWARD_CHECKS or "jvp" in name:
            wanted.append("forward")
        if name.startswith("compiled_") or name.endswith("_of_compiled"):
            wanted.append("compile")
        if workers >= 2 and (name in FORWARD_CHECKS or name in SECOND_ORDER_CHECKS):
            wanted.append("refs")
    return [w for w in ("backward", "forward", "compile", "refs") if w in wanted]


_WARMERS: dict[str, Callable[[], None]] = {
    "backward": _backward,
    "forward": _forward,
    "compile": _compile,
    "refs": _refs,
}


def warm(kinds: Iterable[str]) -> list[str]:
    """Take the first uses named (see ``needs``); returns those that ran without error."""
    shims.install()  # the backward the cases take: the shims', unless they are forbidden
    done = []
    for kind in kinds:
        try:
            _WARMERS[kind]()
        except Exception:
            continue
        done.append(kind)
    return done


def warm_for(cases: Iterable[Any], workers: int = 1) -> list[str]:
    """``warm(needs(...))`` for the checks of ``cases`` (objects with a ``check`` name)."""
    return warm(needs((c.check for c in cases), workers))


__all__ = ["FORWARD_CHECKS", "SECOND_ORDER_CHECKS", "needs", "warm", "warm_for"]
