"""Which reference a custom-gradient first-order result is held to (``gradient="custom"``).

A custom backward is checked against eager autograd of the same Function; a jvp must follow
that backward (forward and reverse mode agree: ``<jvp(t), c> = <t, vjp(c)>``, so ``jacfwd``
and ``jacrev`` give one Jacobian), unless the Function declares ``jvp=true-derivative``,
where the jvp is checked against finite differences instead. ``either_reference`` is the
general rule other custom-mode checks use (a result passes when it matches one of several
references, and the case says which).
"""

from __future__ import annotations

from harness.checks import finite_diff as fd
from harness.checks.autodiff_refs import EAGER_CUSTOM_REFERENCE, Findings
from harness.checks.catalogue import CaseContext

FORWARD_DERIVATIVE_WHY = {
    fd.FD_REFERENCE: "gradient=custom: a jvp that is the true derivative is accepted",
    EAGER_CUSTOM_REFERENCE: "gradient=custom: a jvp that follows the custom backward is accepted",
}
FORWARD_DERIVATIVE_NEITHER = (
    "gradient=custom: the forward derivative (jvp) matches neither finite differences "
    "(the true derivative) nor the custom backward's Jacobian"
)


FORWARD_REVERSE_DISAGREE = (
    "forward and reverse mode disagree: the jvp matches finite differences (the true "
    "derivative) but not the custom backward's Jacobian, so <jvp(t), c> != <t, vjp(c)> and "
    "jacfwd and jacrev give different Jacobians of the same Function; make the jvp follow the "
    "backward's rule, or declare jvp=true-derivative if forward mode is meant to differ"
)
DECLARED_TRUE_DERIVATIVE = (
    "declared jvp=true-derivative: the jvp is checked against finite differences only "
    "(forward and reverse mode differ by design)"
)


def forward_derivative(
    ctx: CaseContext, check: str, by_name: dict[str, Findings], contract: Findings
) -> str:
    """``gradient="custom"``, first order (``jvp``, ``jacfwd``, ``eager_jvp``): the jvp must
    follow the custom backward (the transpose identity ``<jvp(t), c> = <t, vjp(c)>`` holds
    for every Function, whatever its rule), unless the entry declares
    ``jvp=true-derivative``, where it must be the true derivative (finite differences)."""
    fd_found = by_name.get(fd.FD_REFERENCE)
    rule_found = by_name.get(EAGER_CUSTOM_REFERENCE)
    if ctx.entry.caps.jvp_true_derivative and fd_found is not None:
        ctx.notes.append(f"{check}: {DECLARED_TRUE_DERIVATIVE}")
        contract.raise_if_any()
        fd_found.raise_if_any()
        return fd.FD_REFERENCE
    if fd_found is None or rule_found is None or not rule_found.problems:
        return either_reference(ctx, check, by_name, contract)
    if fd_found.problems or (fd_found.fd_excluded and not fd_found.fd_compared):
        return either_reference(ctx, check, by_name, contract)  # neither: says so
    contract.raise_if_any()
    rule_found.problems.insert(0, f"{check}: {FORWARD_REVERSE_DISAGREE}")
    rule_found.raise_if_any()
    return ""


def either_reference(
    ctx: CaseContext,
    check: str,
    by_name: dict[str, Findings],
    contract: Findings,
    *,
    what: str = "the Function's forward derivative",
    why: dict[str, str] | None = None,
    neither: str = FORWARD_DERIVATIVE_NEITHER,
) -> str:
    """``gradient="custom"``: a result passes when it matches **either** reference in
    ``by_name`` (first order: finite differences, for a true-derivative jvp, or the custom
    backward's Jacobian, for a jvp that follows the custom rule); the case says which.
    ``contract`` holds the problems that fail the case whichever reference."""
    why = FORWARD_DERIVATIVE_WHY if why is None else why
    contract.raise_if_any()
    vacuous: Findings | None = None  # a reference that compared nothing (all not comparable)
    for name, found in by_name.items():
        if not found.problems:
            if found.fd_excluded and not found.fd_compared:
                vacuous = vacuous or found
                continue
            found.settle()
            reason = f" ({why[name]})" if name in why else ""
            ctx.notes.append(f"{check}: {what} matches {name}{reason}")
            return name
    if vacuous is not None:
        vacuous.settle()  # raises Unsupported: nothing was comparable
    merged = Findings(contract.rtol, contract.atol)
    tagged = [found.problems for found in by_name.values()]
    merged.problems = [p for ps in tagged for p in ps[:2]] + [p for ps in tagged for p in ps[2:]]
    for found in by_name.values():
        for h in [*found.hints, found.fd_note()]:
            merged.hint(h)
    merged.hint(neither)
    merged.raise_if_any()
    return ""
