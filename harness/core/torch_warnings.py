"""torch's own deprecation warnings that the suite's use of torch sets off, kept from the user.

The first forward-mode dual tensor of a process (``torch.autograd.forward_ad.make_dual``,
which the suite's references and ``torch.func.jvp`` / ``jacfwd`` call) imports
``torch._decomp.decompositions_for_jvp``, which runs ``torch.jit.script`` on a few dozen
decompositions; each warns "`torch.jit.script` is deprecated" (a ``DeprecationWarning``
attributed to ``torch.jit._script``). Under a user's ``-W error::DeprecationWarning`` or
``filterwarnings = error`` that made a correct Function fail, and otherwise it filled the
user's pytest warnings summary.

A filter cannot tell those warnings from a Function's own ``torch.jit.script`` call (torch
attributes both to ``torch.jit._script``), so the suite takes that import itself, before a
case that uses forward mode, with exactly that warning ignored (``load_jvp_decompositions``).
Whatever a Function warns, ``torch.jit.script`` of its own included, stays its own, under
the filters the user set.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
import warnings

#: The module torch's first dual tensor imports (``forward_ad._maybe_load_decompositions``).
JVP_DECOMPOSITIONS = "torch._decomp.decompositions_for_jvp"
#: The warning its import raises once per decomposition it scripts.
SCRIPT_DEPRECATED = r"`torch\.jit\.script` is (deprecated|not supported)"


def load_jvp_decompositions() -> None:
    """Import what torch's first dual tensor would (the same condition as torch's), with
    torch's ``torch.jit.script`` deprecation ignored for that import only; idempotent."""
    if JVP_DECOMPOSITIONS in sys.modules:
        return
    if os.environ.get("PYTORCH_JIT", "1") != "1" or not __debug__:
        return  # torch does not import it either
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=SCRIPT_DEPRECATED, category=DeprecationWarning)
        # a failure here is met again by torch's own import, inside the case that reports it
        with contextlib.suppress(Exception):
            importlib.import_module(JVP_DECOMPOSITIONS)
