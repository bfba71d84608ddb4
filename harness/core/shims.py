"""The suite's guarded routes around torch's first-use imports, installed and forbidden together.

``dynamo_shim`` keeps ``torch.func.vjp``'s backward from importing ``torch._dynamo``;
``grads_shim`` keeps ``torch.autograd.grad`` with ``grad_outputs`` from importing sympy.
Cases install both (idempotent); anything that compiles forbids both for the rest of the
process, so compiled code always runs torch's own functions.
"""

from __future__ import annotations

from harness.core import dynamo_shim, grads_shim

PATCHES = (dynamo_shim.PATCH, grads_shim.PATCH)


def install() -> None:
    for patch in PATCHES:
        patch.install()


def forbid() -> None:
    for patch in PATCHES:
        patch.forbid()


__all__ = ["PATCHES", "forbid", "install"]
