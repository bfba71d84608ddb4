"""A loud refusal of a transform the Function does not claim is ``unsupported``, not a failure.

The rule is decided by the situation, never by the exception's text: when the Function's
code raises (its own exception, not the suite's: ``harness.engine.blame``) in a check that
runs it under a transform the Function does not claim, nothing was computed wrong; the
user of that transform gets that error, not a silent wrong answer. The case is
``unsupported``, its message starts with ``double backward raises (WHAT, file.py:LINE)``
(``harness.core.refused``: the verdict line names it), then the exception and the
Function's line. Which transforms a Function claims:

* vmap (every check that runs the Function's code under ``torch.func.vmap``: the vmap
  family, ``vmap_of_autograd_grad``, ``jacrev``, ``jacfwd``): a ``vmap`` staticmethod or
  ``generate_vmap_rule = True`` of a Function torch.func can transform (with
  ``setup_context``), or a custom op's ``register_vmap``; or the declaration
  ``claims=vmap``. A legacy ``forward(ctx, ...)`` Function claims no vmap.
* forward mode (the checks that run its jvp, or forward-mode AD through it): a ``jvp``
  staticmethod of a Function torch.func can transform (a legacy Function's jvp is claimed
  for eager forward mode, ``eager_jvp``, only); or ``claims=jvp``.
* double backward (the second-order checks): only when declared (``double_backward=True``
  given explicitly, or ``claims=double_backward``): the suite checks it by default, but a
  Function says nothing about it by its class.

Which transform the raise was under is read from the Function's staticmethod that raised
(the outermost of its frames): a raise in ``jvp``, ``vmap`` or ``forward`` is not one of
double backward, even in a check that also differentiates the backward. A raise under
claimed transforms only stays the Function's ``error``. Torch's known
refusals (``SIGNATURES``) only word the message better (what it means, how to fix it).
"""

from __future__ import annotations

import linecache
import re
import traceback
from collections.abc import Callable
from dataclasses import dataclass

from autograd_function_db.entry import VMAP_NONE, Entry
from harness.core.errors import FunctionRaised
from harness.core.locations import describe_exception, relative_file
from harness.core.refused import (
    DOUBLE_BACKWARD,
    FORWARD_MODE,
    LEGACY_CLAIMS_NO,
    RAISES,
    VMAP,
    not_claimed_double_backward,
    refused_phrase,
)
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
#: Checks that run the Function's jvp, or forward-mode AD through its code.
FORWARD_CHECKS = frozenset(
    {
        "jvp",
        "jvp_of_vmap",
        "vmap_of_jvp",
        "jvp_of_vjp",
        "vmap_of_jvp_of_vjp",
        "jacfwd",
        "eager_jvp",
    }
)
#: Checks that differentiate the Function's backward (second order).
DOUBLE_BACKWARD_CHECKS = frozenset(
    {"jvp_of_vjp", "vjp_of_vjp", "vmap_of_vjp_of_vjp", "vmap_of_jvp_of_vjp", "eager_vjp_of_vjp"}
)

#: The declaration words (``claims=vmap,jvp,double_backward``) and the transform each claims.
CLAIMS = {"vmap": VMAP, "jvp": FORWARD_MODE, "double_backward": DOUBLE_BACKWARD}


@dataclass(frozen=True)
class Signature:
    """One of torch's known refusals: the capability it is about, its text, what it means."""

    capability: str
    pattern: re.Pattern[str]
    #: A few words for the verdict line ("in-place write").
    short: str
    #: The refusal in the suite's words; ``{op}`` is the op the pattern caught ("" if none).
    meaning: str
    #: How the Function's code can avoid it.
    fix: str


def _sig(capability: str, pattern: str, short: str, meaning: str, fix: str) -> Signature:
    return Signature(capability, re.compile(pattern), short, meaning, fix)


SIGNATURES = (
    _sig(
        VMAP,
        r"Batching rule not implemented for (aten::[\w.]+)",
        "no batching rule",
        "`{op}` has no batching rule (an out= or view op torch's fallback cannot batch)",
        "call the op without out= (its functional form)",
    ),
    _sig(
        VMAP,
        r"vmap: ([\w ]+?)\(self, \*extra_args\) is not possible",
        "in-place op on an unbatched tensor",
        "vmap cannot run the in-place `{op}` on an unbatched tensor with batched arguments",
        "use the out-of-place form of the op",
    ),
    _sig(
        VMAP,
        r"output with shape \[[^\]]*\] doesn't match the broadcast shape \[[^\]]*\]",
        "batched value written into an unbatched tensor",
        "a batched value is written into an unbatched tensor (an in-place op or out=)",
        "build the result out of place instead of writing into a preallocated tensor",
    ),
    _sig(
        VMAP,
        r"vmap: It looks like you're calling \.item\(\) on a Tensor",
        ".item[]",
        "vmap cannot run `.item()`",
        "keep the value a tensor",
    ),
    _sig(
        VMAP,
        r"vmap: It looks like you're attempting to use a Tensor in some data-dependent "
        r"control flow",
        "data-dependent control flow",
        "vmap cannot run data-dependent control flow",
        "replace the branch with torch.where",
    ),
    _sig(
        VMAP,
        r"You are attempting to call Tensor\.requires_grad_\(\) \(or perhaps using "
        r"torch\.autograd\.functional\.\* APIs\) inside of a function being transformed",
        "eager autograd inside",
        "torch.func cannot run eager autograd (requires_grad_(), torch.autograd.grad) inside "
        "a transformed function",
        "compute the gradient with torch.func.vjp in the backward, or without autograd",
    ),
    _sig(
        DOUBLE_BACKWARD,
        r"(\w+)\(\): functions with out=\.\.\. arguments don't support automatic differentiation",
        "out= op",
        "`{op}` with out= cannot be differentiated (autograd refuses out= ops)",
        "call the op without out=",
    ),
    _sig(
        DOUBLE_BACKWARD,
        r"is a view and (?:its base or another view of its base has been|is being) modified "
        r"inplace|A view was created in no_grad mode and is being modified inplace",
        "view modified in place",
        "a view is modified in place where autograd must differentiate it",
        "use out-of-place ops on views",
    ),
    _sig(
        DOUBLE_BACKWARD,
        r"a (?:view of a )?leaf Variable that requires grad is (?:being )?used in an in-place "
        r"operation",
        "in-place write",
        "an in-place write into a tensor that requires grad (one made with "
        "requires_grad=True, the backward's grad_output or a saved input)",
        "use out-of-place ops in backward",
    ),
    _sig(
        DOUBLE_BACKWARD,
        r"derivative for (\S+?)['\"]? is not implemented",
        "no derivative formula",
        "`{op}` has no derivative formula in torch",
        "use ops torch can differentiate, or a Function of its own for that step",
    ),
    _sig(
        DOUBLE_BACKWARD,
        r"Trying to use forward AD with (\S+) that does not support it",
        "no forward-mode derivative",
        "`{op}` has no forward-mode derivative in torch",
        "use ops torch can differentiate in forward mode",
    ),
)

#: How a Function can support a transform, when torch's refusal is none of the known ones.
_FIXES = {
    VMAP: "give the Function a setup_context and a vmap rule (or generate_vmap_rule = True) "
    "and keep its code to torch ops vmap can batch",
    FORWARD_MODE: "give the Function a jvp staticmethod (and a setup_context) that torch.func "
    "can run",
    DOUBLE_BACKWARD: "write the backward with differentiable torch ops (no numpy, no "
    "in-place writes, no no_grad), or mark it @once_differentiable so misuse raises at once",
}


def _short(exc: BaseException) -> str:
    """``RuntimeError: Can't call numpy[] on Tensor that...``: the exception in a few words."""
    lines = safe_str(exc).strip().splitlines()
    first = lines[0] if lines else ""
    if len(first) > 48:
        first = first[:48].rsplit(" ", 1)[0] + "..."
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


def _staticmethod_codes(entry: Entry) -> set[tuple[str, str]]:
    """(file, name) of the Function class's own staticmethods (wherever its file is: PyTorch's
    own database lives under torch/)."""
    from harness.core.locations import STATICMETHODS

    found = set()
    for name in STATICMETHODS:
        fn = getattr(getattr(entry, "function", None), name, None)
        fn = getattr(fn, "__wrapped__", fn)  # @once_differentiable
        code = getattr(fn, "__code__", None)
        if code is not None:
            found.add((code.co_filename, code.co_name))
    return found


def _user_frame(exc: BaseException, entry: Entry | None = None) -> traceback.FrameSummary | None:
    """The Function's own frame: the outermost of its staticmethods (backward, vmap, jvp,
    forward) in the traceback, else the innermost frame that is the user's; None if none is."""
    from harness.core.locations import STATICMETHODS
    from harness.engine.blame import is_harness, is_stdlib, is_torch

    own = _staticmethod_codes(entry) if entry is not None else set()
    for fr in traceback.extract_tb(exc.__traceback__):
        if (fr.filename, fr.name) in own:
            return fr
    frames = [
        fr
        for fr in traceback.extract_tb(exc.__traceback__)
        if not (
            is_torch(fr.filename)
            or is_stdlib(fr.filename)
            or is_harness(fr.filename)
            or fr.filename.startswith("<")
        )
    ]
    for fr in frames:
        if fr.name in STATICMETHODS:
            return fr
    return frames[-1] if frames else None


def _site(fr: traceback.FrameSummary | None) -> str:
    return f"{relative_file(fr.filename)}:{fr.lineno}" if fr is not None else ""


def _line_text(fr: traceback.FrameSummary | None) -> str:
    """`` (at file.py:41 in backward: `torch.mul(g, c, out=out)`)``, "" without a frame."""
    if fr is None:
        return ""
    text = (linecache.getline(fr.filename, fr.lineno or 0) or "").strip()
    code = f": `{text[:120]}`" if text else ""
    return f" (at {_site(fr)} in {fr.name}{code})"


def claims(entry: Entry) -> frozenset[str]:
    """The transforms ``entry`` was declared to claim (``claims=``)."""
    return frozenset(CLAIMS[c] for c in getattr(entry.caps, "claims", ()) if c in CLAIMS)


def not_claimed(entry: Entry, capability: str, check: str = "") -> str:
    """Why ``entry`` does not claim ``capability`` ("" when it claims it)."""
    caps = entry.caps
    if capability in claims(entry):
        return ""
    if capability == VMAP:
        if not caps.setup_context and entry.custom_op is None:
            return f"{LEGACY_CLAIMS_NO} vmap support"
        if caps.vmap == VMAP_NONE and entry.custom_op is not None:
            return "the custom op claims no vmap support (no register_vmap rule)"
        if caps.vmap == VMAP_NONE:
            return (
                "the Function claims no vmap support (no vmap staticmethod, no generate_vmap_rule)"
            )
        return ""
    if capability == FORWARD_MODE:
        if not caps.setup_context and entry.custom_op is None and check != "eager_jvp":
            return f"{LEGACY_CLAIMS_NO} forward mode under torch.func"
        if not caps.jvp:
            return "the Function claims no forward mode (no jvp staticmethod)"
        return ""
    if capability == DOUBLE_BACKWARD:
        return not_claimed_double_backward(entry)
    return ""


def capabilities_of(check: str) -> tuple[str, ...]:
    """The transforms ``check`` runs the Function's code under, beyond first-order reverse."""
    found = []
    if check in VMAP_CHECKS:
        found.append(VMAP)
    if check in FORWARD_CHECKS:
        found.append(FORWARD_MODE)
    if check in DOUBLE_BACKWARD_CHECKS:
        found.append(DOUBLE_BACKWARD)
    return tuple(found)


def refusal(
    entry: Entry,
    check: str,
    exc: BaseException,
    alone: Callable[[], bool | None] | None = None,
) -> str:
    """The ``unsupported`` message when the Function raised ``exc`` in ``check``, which runs
    it under a transform ``entry`` does not claim; "" otherwise (the exception stays the
    Function's ``error``, or the suite's ``internal``).

    ``alone`` says whether the Function's double backward raises by itself at the case's
    sample (``harness.checks.double_backward_alone``): in a check that also runs a transform
    the Function claims, a raise is a refusal of double backward only where it does."""
    from harness.engine.blame import classify

    if not isinstance(exc, Exception) or classify(exc).internal:
        return ""
    fr = _user_frame(exc, entry)
    capabilities = capabilities_of(check)
    if fr is not None and fr.name in ("jvp", "vmap", "forward", "setup_context"):
        # raised by a staticmethod other than backward: not in the double backward the check
        # also runs (a jvp's in-place tangent update under vmap is about vmap, forward mode)
        capabilities = tuple(c for c in capabilities if c != DOUBLE_BACKWARD)
    unclaimed = [(c, why) for c in capabilities if (why := not_claimed(entry, c, check))]
    if not unclaimed:
        return ""
    if (
        [c for c, _ in unclaimed] == [DOUBLE_BACKWARD]
        and len(capabilities) > 1  # composed with a transform the Function claims
        and alone is not None
        and alone() is False  # double backward alone runs: the claimed transform raised
    ):
        return ""
    original: BaseException = exc
    while isinstance(original, FunctionRaised):
        original = original.original
    text = safe_str(original)
    known = next(
        (
            (sig, m)
            for sig in SIGNATURES
            if any(sig.capability == c for c, _ in unclaimed)
            and (m := sig.pattern.search(text)) is not None
        ),
        None,
    )
    if known is not None:
        sig, m = known
        capability = sig.capability
        why = dict(unclaimed)[capability]
        short = sig.short
        op = m.group(1) if m.groups() else ""
        meaning = f"torch cannot run the Function's code under {capability}: " + sig.meaning.format(
            op=op
        )
        fix = sig.fix
    else:
        capability, why = unclaimed[0]
        short = _short(original)
        meaning = f"the Function raised under {capability}"
        fix = _FIXES[capability]
    raised = describe_exception(original, limit=300)
    phrase = refused_phrase(capability, RAISES, short, _site(fr))
    return (
        f"{phrase}: {meaning}{_line_text(fr)}. Not a wrong answer: {why}; to support it, "
        f"{fix}. torch raised {raised}"
    )
