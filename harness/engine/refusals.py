"""Torch refusing loudly is not a wrong answer: ``unsupported`` where the Function claims nothing.

Some exceptions are torch itself saying that it cannot do what a transform asks of the
Function's code: an op in the backward has no batching rule ("Batching rule not implemented
for aten::gather.out"), vmap cannot run an in-place op on an unbatched tensor ("vmap:
scatter_add_(self, ...) is not possible"), a batched value is written into an unbatched
``out=`` or in-place target ("output with shape [...] doesn't match the broadcast shape
[...]"), an ``out=`` op or a view modified in place cannot be differentiated again
("functions with out=... arguments don't support automatic differentiation"). Nothing
was computed wrong: the user of that transform gets that error, not a silent wrong answer.

So, where the transform is one the Function does not claim, the case is ``unsupported``,
naming the op and the Function's line:

* vmap (every check that runs the Function's code under ``torch.func.vmap``: the vmap
  family, ``vmap_of_autograd_grad``, ``jacrev``, ``jacfwd``): claimed by a ``vmap``
  staticmethod or ``generate_vmap_rule = True`` of a Function torch.func can transform
  (with ``setup_context``), or a custom op's ``register_vmap``. A legacy
  ``forward(ctx, ...)`` Function claims no vmap.
* double backward (the second-order checks): claimed only when declared
  (``double_backward=True`` given explicitly): the suite checks it by default, but a
  Function says nothing about it by its class.

The same refusal under a claimed transform stays the Function's ``error``.
"""

from __future__ import annotations

import linecache
import re
import traceback
from dataclasses import dataclass

from autograd_function_db.entry import VMAP_NONE, Entry
from harness.core.errors import FunctionRaised
from harness.core.locations import describe_exception, relative_file
from harness.core.textsafe import safe_str

#: Checks that run the Function's code (its vmap rule, backward or jvp) under torch.func.vmap.
VMAP_CHECKS = frozenset(
    {
        "vmap",
        "vmap_nested",
        "vmap_chunked",
        "vmap_hazard",
        "vmap_fallback",
        "contract",
        "grad_of_vmap",
        "jvp_of_vmap",
        "vmap_of_vjp",
        "vmap_of_jvp",
        "vmap_of_vjp_of_vjp",
        "vmap_of_jvp_of_vjp",
        "vmap_of_autograd_grad",
        "jacrev",
        "jacfwd",
    }
)
#: Checks that differentiate the Function's backward (second order).
DOUBLE_BACKWARD_CHECKS = frozenset(
    {"jvp_of_vjp", "vjp_of_vjp", "vmap_of_vjp_of_vjp", "vmap_of_jvp_of_vjp", "eager_vjp_of_vjp"}
)

VMAP = "vmap"
DOUBLE_BACKWARD = "double backward"


@dataclass(frozen=True)
class Signature:
    """One of torch's refusals: the capability it is about, its text, and what it means."""

    capability: str
    pattern: re.Pattern[str]
    #: The refusal in the suite's words; ``{op}`` is the op the pattern caught ("" if none).
    meaning: str
    #: How the Function's code can avoid it.
    fix: str


def _sig(capability: str, pattern: str, meaning: str, fix: str) -> Signature:
    return Signature(capability, re.compile(pattern), meaning, fix)


SIGNATURES = (
    _sig(
        VMAP,
        r"Batching rule not implemented for (aten::[\w.]+)",
        "`{op}` has no batching rule (an out= or view op torch's fallback cannot batch)",
        "call the op without out= (its functional form)",
    ),
    _sig(
        VMAP,
        r"vmap: ([\w ]+?)\(self, \*extra_args\) is not possible",
        "vmap cannot run the in-place `{op}` on an unbatched tensor with batched arguments",
        "use the out-of-place form of the op",
    ),
    _sig(
        VMAP,
        r"output with shape \[[^\]]*\] doesn't match the broadcast shape \[[^\]]*\]",
        "a batched value is written into an unbatched tensor (an in-place op or out=)",
        "build the result out of place instead of writing into a preallocated tensor",
    ),
    _sig(
        VMAP,
        r"vmap: It looks like you're calling \.item\(\) on a Tensor",
        "vmap cannot run `.item()`",
        "keep the value a tensor",
    ),
    _sig(
        VMAP,
        r"vmap: It looks like you're attempting to use a Tensor in some data-dependent "
        r"control flow",
        "vmap cannot run data-dependent control flow",
        "replace the branch with torch.where",
    ),
    _sig(
        VMAP,
        r"You are attempting to call Tensor\.requires_grad_\(\) \(or perhaps using "
        r"torch\.autograd\.functional\.\* APIs\) inside of a function being transformed",
        "torch.func cannot run eager autograd (requires_grad_(), torch.autograd.grad) inside "
        "a transformed function",
        "compute the gradient with torch.func.vjp in the backward, or without autograd",
    ),
    _sig(
        DOUBLE_BACKWARD,
        r"(\w+)\(\): functions with out=\.\.\. arguments don't support automatic differentiation",
        "`{op}` with out= cannot be differentiated (autograd refuses out= ops)",
        "call the op without out=",
    ),
    _sig(
        DOUBLE_BACKWARD,
        r"is a view and (?:its base or another view of its base has been|is being) modified "
        r"inplace|A view was created in no_grad mode and is being modified inplace",
        "a view is modified in place where autograd must differentiate it",
        "use out-of-place ops on views",
    ),
    _sig(
        DOUBLE_BACKWARD,
        r"a (?:view of a )?leaf Variable that requires grad is (?:being )?used in an in-place "
        r"operation",
        "an in-place write into a tensor that requires grad (one made with "
        "requires_grad=True, the backward's grad_output or a saved input)",
        "use out-of-place ops in backward",
    ),
    _sig(
        DOUBLE_BACKWARD,
        r"derivative for (\S+?)['\"]? is not implemented",
        "`{op}` has no derivative formula in torch",
        "use ops torch can differentiate, or a Function of its own for that step",
    ),
    _sig(
        DOUBLE_BACKWARD,
        r"Trying to use forward AD with (\S+) that does not support it",
        "`{op}` has no forward-mode derivative in torch",
        "use ops torch can differentiate in forward mode",
    ),
)


def _innermost_user_line(exc: BaseException) -> str:
    """`` at file.py:41 in backward: `torch.mul(g, c, out=out)` `` (the innermost frame of the
    Function's code), or "" when no frame is the user's."""
    from harness.engine.blame import is_harness, is_stdlib, is_torch

    for fr in reversed(traceback.extract_tb(exc.__traceback__)):
        name = fr.filename
        if is_torch(name) or is_stdlib(name) or is_harness(name) or name.startswith("<"):
            continue
        text = (linecache.getline(name, fr.lineno or 0) or "").strip()
        code = f": `{text[:120]}`" if text else ""
        return f" (at {relative_file(name)}:{fr.lineno} in {fr.name}{code})"
    return ""


def not_claimed(entry: Entry, capability: str) -> str:
    """Why ``entry`` does not claim ``capability`` ("" when it claims it)."""
    caps = entry.caps
    if capability == VMAP:
        if not caps.setup_context and entry.custom_op is None:
            return "a legacy forward(ctx, ...) Function claims no vmap support"
        if caps.vmap == VMAP_NONE and entry.custom_op is not None:
            return "the custom op claims no vmap support (no register_vmap rule)"
        if caps.vmap == VMAP_NONE:
            return (
                "the Function claims no vmap support (no vmap staticmethod, no generate_vmap_rule)"
            )
        return ""
    if capability == DOUBLE_BACKWARD:
        if caps.double_backward_declared:
            return ""
        return (
            "the Function does not claim double backward (declare double_backward=True to hold "
            "it to one)"
        )
    return ""


def _capabilities_of(check: str) -> tuple[str, ...]:
    found = []
    if check in VMAP_CHECKS:
        found.append(VMAP)
    if check in DOUBLE_BACKWARD_CHECKS:
        found.append(DOUBLE_BACKWARD)
    return tuple(found)


def refusal(entry: Entry, check: str, exc: BaseException) -> str:
    """The ``unsupported`` message when ``exc`` is torch refusing a transform ``check`` runs
    that ``entry`` does not claim; "" otherwise (the exception stays the Function's)."""
    capabilities = _capabilities_of(check)
    if not capabilities or not isinstance(exc, Exception):
        return ""
    original: BaseException = exc
    while isinstance(original, FunctionRaised):
        original = original.original
    text = safe_str(original)
    for sig in SIGNATURES:
        if sig.capability not in capabilities:
            continue
        m = sig.pattern.search(text)
        if m is None:
            continue
        why = not_claimed(entry, sig.capability)
        if not why:
            return ""
        op = m.group(1) if m.groups() else ""
        line = _innermost_user_line(exc)
        raised = describe_exception(original, limit=300)
        return (
            f"torch cannot run the Function's code under {sig.capability}: "
            f"{sig.meaning.format(op=op)}{line}. Not a wrong answer: {why}; to support it, "
            f"{sig.fix}. torch raised {raised}"
        )
    return ""
