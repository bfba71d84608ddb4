"""A Function's own non-finite values are its failure, not the sample's.

A comparison whose reference holds NaN or inf is vacuous (``NonFiniteSample``): that is the
sample's fault only where the Function's forward itself is non-finite there (the runner
checks the plain call first). Where the forward is finite at the sample but the Function's
own derivative rules are not (its backward overflows to NaN, its jvp divides by zero), the
loop references built from those rules and finite differences of its backward are
non-finite *because of the Function*: the case fails, naming the rule and where.

``own_nonfinite`` decides by the situation: it calls the Function's eager backward (and its
jvp, where it has one) at the case's sample once, with random cotangents and tangents, and
says which of them gives non-finite values ("" when none does: the sample is blamed, as
before, for a reference that differences into a non-finite region).
"""

from __future__ import annotations

import torch

from harness.checks.autodiff_refs import diff_view, random_like
from harness.checks.catalogue import CaseContext
from harness.checks.compare import SAMPLE_ADVICE, nonfinite_phrase
from harness.checks.references import eager_jvp, eager_vjp

#: Checks whose references are loops of the forward only: a non-finite loop is the forward's
#: own value at a batch slice (the sample's), never a derivative rule's.
FORWARD_ONLY = frozenset(
    {"vmap", "vmap_nested", "vmap_chunked", "vmap_hazard", "vmap_fallback", "contract"}
)


def _first_nonfinite(values: tuple[torch.Tensor, ...], names: list[str]) -> str:
    for name, v in zip(names, values):
        if isinstance(v, torch.Tensor):
            kinds = nonfinite_phrase(v.detach())
            if kinds:
                return f"{kinds} in {name}"
    return ""


def own_nonfinite(ctx: CaseContext, check: str) -> str:
    """Which of the Function's own derivative rules gives non-finite values at the case's
    sample where its forward is finite ("backward (NaN in the grad of input 0)"), or ""."""
    if check in FORWARD_ONLY:
        return ""
    try:
        view = diff_view(ctx)
    except Exception:  # noqa: BLE001 - nothing differentiable: nothing of its own to blame
        return ""
    found = []
    entry = view.entry
    gen = ctx.generator("non-finite rules")
    try:
        if entry.caps.backward:
            cots = random_like(gen, [view.outputs[j] for j in view.outs])
            grads = eager_vjp(entry, view.args, view.diff, view.outs, cots)
            where = _first_nonfinite(grads, [f"the grad of input {i}" for i in view.diff])
            if where:
                found.append(f"its backward gives {where}")
        if entry.caps.jvp:
            tangents = random_like(gen, view.primals())
            out = eager_jvp(entry, view.args, view.diff, view.outs, tangents)
            tangents_out = out[len(view.outs) :]
            where = _first_nonfinite(
                tangents_out, [f"the tangent of {view.out_name(j)}" for j in view.outs]
            )
            if where:
                found.append(f"its jvp gives {where}")
    except Exception:  # noqa: BLE001 - a rule that raises here is reported by its own check
        return ""
    return "; ".join(found)


def own_nonfinite_message(check: str, found: str, vacuous: str) -> str:
    """The failure of a case whose reference was non-finite because of the Function's own
    rules (``found``); ``vacuous`` is what the comparison said."""
    vacuous = vacuous.replace(": " + SAMPLE_ADVICE, "")
    return (
        f"{check}: the Function's own derivative is non-finite where its forward is finite at "
        f"this sample ({found}, with random cotangents and tangents): its failure, not the "
        f"sample's (this case's comparison was vacuous: {vacuous})"
    )
