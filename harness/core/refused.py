"""A transform the Function does not claim and refused loudly: one phrase, found again later.

A case that is ``unsupported`` because the Function raised under a transform it never
claimed (``harness.engine.refusals``), or because its backward builds no graph for double
backward (``harness.checks.second_order``), starts its message with one phrase:
``double backward raises (in-place write, dtcwt/lowlevel.py:289)``. The Function's verdict
line, the Markdown and the JSON reports name each such transform once (``verdict_refusals``),
so "conforms" never hides what a user of that transform gets.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

VMAP = "vmap"
FORWARD_MODE = "forward mode"
DOUBLE_BACKWARD = "double backward"
TRANSFORMS = (VMAP, FORWARD_MODE, DOUBLE_BACKWARD)

#: The verbs of the phrase: the Function raised, or it computed something torch cannot
#: differentiate again without saying so (a backward with no graph).
RAISES = "raises"
NO_GRAPH = "has no graph"

#: Why a legacy ``forward(ctx, ...)`` Function claims no vmap or forward mode (its style
#: already says so: its verdict line does not repeat it).
LEGACY_CLAIMS_NO = "a legacy forward(ctx, ...) Function claims no"

_PHRASE = re.compile(
    r"\b(" + "|".join(map(re.escape, TRANSFORMS)) + r") (" + RAISES + "|" + NO_GRAPH + r")"
    r" \(([^()]*)\)"
)


def _clean(text: str) -> str:
    return text.replace("(", "[").replace(")", "]").strip()


def refused_phrase(transform: str, verb: str, what: str, site: str = "") -> str:
    """``double backward raises (in-place write, lib.py:12)`` (no parentheses inside)."""
    inside = ", ".join(p for p in (_clean(what), _clean(site)) if p)
    return f"{transform} {verb} ({inside})"


def not_claimed_double_backward(entry: Any) -> str:
    """Why ``entry`` does not claim double backward ("" when it does: declared with
    ``double_backward=True`` or ``claims=double_backward``); the suite checks double backward
    by default, but a Function's class says nothing about it."""
    caps = entry.caps
    if getattr(caps, "double_backward_declared", False) or "double_backward" in tuple(
        getattr(caps, "claims", ())
    ):
        return ""
    return (
        "the Function does not claim double backward (declare claims=double_backward, or "
        "double_backward=True, to hold it to one)"
    )


def refused_in(message: str) -> str:
    """The phrase in one case's message ("" when it has none)."""
    m = _PHRASE.search(message or "")
    return m.group(0) if m else ""


def verdict_refusals(cases: Iterable[Any], implied: Iterable[str] = ()) -> str:
    """``double backward raises (in-place write, lib.py:289)`` for the ``unsupported`` cases of
    one Function, each distinct phrase once (at most 3 shown), leaving out the transforms its
    style already implies (``implied``: a legacy Function's vmap and forward mode)."""
    skip = set(implied)
    found: list[str] = []
    for c in cases:
        if getattr(c, "status", "") != "unsupported":
            continue
        m = _PHRASE.search(getattr(c, "message", "") or "")
        if m is None or m.group(1) in skip or m.group(0) in found:
            continue
        found.append(m.group(0))
    if not found:
        return ""
    return "; ".join(found[:3]) + (f"; {len(found) - 3} more" if len(found) > 3 else "")
