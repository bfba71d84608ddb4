"""Which cases ``afdb repro`` writes a short plain-torch script for, told by check and plan.

``harness.repro.minimal`` writes the short script; the reports (which never import it) use
``has_minimal_script`` to make a group's ``reproduce:`` line name a case with a short
script when the group has one (a ``contract`` case or a float32 leg gets the full
self-checking script, hundreds of lines). A Function can still refuse the short form
(container arguments, samples without a seed, ...): ``afdb repro`` then says so.
"""

from __future__ import annotations

import re
from typing import Any

VMAP_FAMILY = ("vmap", "vmap_nested", "vmap_chunked", "vmap_hazard")
FIRST_ORDER = ("jvp", "vjp", "jacrev", "jacfwd")
COMPOSITES = ("grad_of_vmap", "jvp_of_vmap", "vmap_of_vjp", "vmap_of_jvp")
#: The eager checks of a Function torch.func cannot differentiate (a legacy one).
EAGER = ("eager_vjp", "eager_jvp")
MINIMAL_CHECKS = frozenset((*VMAP_FAMILY, *FIRST_ORDER, *COMPOSITES, *EAGER))


def has_minimal_script(check: str, plan: dict[str, Any] | None) -> bool:
    """Whether a case of ``check`` at ``plan`` (a report's plan dict) has a short script:
    a check it covers, one vmap level at most, and not a dtype leg."""
    if check not in MINIMAL_CHECKS:
        return False
    plan = plan or {}
    return not plan.get("dtype") and len(plan.get("levels") or []) <= 1


#: The checks whose failing sub-check the minimal script can make (``--sub-check``).
SUB_CHECKS = frozenset(("vjp", "jvp", "eager_vjp", "eager_jvp"))

_FAILING = re.compile(r"failing sub-checks: ((?:\[[^\]]*\]\s*)+)")
_HOW = re.compile(r"\((torch\.func\.vjp|torch\.autograd\.grad)[,)]")


def failing_sub_check(message: str, check: str) -> str:
    """The first sub-check a case failed when others passed ('' when all failed, or the
    message names none), with ``(torch.autograd.grad)`` when only that way failed it."""
    m = _FAILING.search(message)
    if not m:
        return ""
    names = re.findall(r"\[([^\]]*)\]", m.group(1))
    if any(n in ("all inputs, all outputs", "all inputs") for n in names):
        return ""  # the case's main call fails: no sub-check needed
    name = names[0]
    if check == "vjp":
        hows = {
            h.group(1) for h in re.finditer(re.escape(f"vjp: {name} ") + r"\(([^,)]*)", message)
        }
        if hows == {"torch.autograd.grad"}:
            name += " (torch.autograd.grad)"
    return name
