"""Plans per check for 1 to 8 tensor arguments: the strategy before pairwise plans vs now.

``python -m benchmarks.plan_counts`` prints the Markdown table in the README;
``benchmarks/test_bench_plans.py`` times plan generation and records the counts.
Every argument is a 2-d tensor, so each takes one of None, 0, 1 (interior), -1.
The old strategy is kept here only for the comparison: exhaustive up to the cap,
then a fixed "covering" set (all at 0 / interior / -1, each argument alone at each
position with the others at 0) topped up with seeded random plans to the cap; the
composite checks ran it at a cap of 8 and never paired "A at an interior or last
dim" with "B unbatched" once the fixed set filled the cap.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable
from typing import Any

from harness.checks.composites import _composite_plans, _grad_of_vmap_plans, _jvp_of_vmap_plans
from harness.core.options import Options
from harness.plans.plan import ArgLayout, Plan, nested_plans, single_level_plans, unit_choices

ARGS = range(1, 9)


def old_single_level(layout: ArgLayout, cap: int = 16, seed: int = 0) -> int:
    """The number of single-level plans of the previous ("covering") strategy."""
    units = layout.units()
    per_unit = [unit_choices(layout, u) for u in units]
    combos = []
    for pick in itertools.product(*per_unit):
        a: dict[Any, Any] = {}
        for part in pick:
            a.update(part)
        if any(v is not None for v in a.values()):
            combos.append(layout.in_dims(a))
    if len(combos) <= cap:
        return len(combos) + 2
    zero = layout.uniform(0)
    base = [zero]
    for k in (1, 2, 3):
        alt: dict[Any, Any] = {}
        for options in per_unit:
            alt.update(options[min(k, len(options) - 1)])
        base.append(alt)
    for options in per_unit:
        base += [{**zero, **opt} for opt in options]
    chosen: list[Any] = []
    for a in base:
        dims = layout.in_dims(a)
        if dims in combos and dims not in chosen:
            chosen.append(dims)
    rest = [c for c in combos if c not in chosen]
    random.Random(seed).shuffle(rest)
    chosen += rest[: max(0, cap - len(chosen))]
    return len(chosen) + 2  # + out_dims=-1 and an interior out_dims


def old_nested(layout: ArgLayout) -> int:
    """The previous nested strategy: the fixed set only."""
    return sum(1 for p in nested_plans(layout) if p.strategy == "nested-fixed")


def old_composite(layout: ArgLayout) -> int:
    """Previous composite plans: old single level at cap 8 (less the interior out_dims),
    extras at -1, extras alone, arguments alone, one nested plan."""
    return old_single_level(layout, cap=8) - 1 + 4


def counts(n: int) -> dict[str, tuple[int, int]]:
    """(old, new) plans per check for ``n`` 2-d tensor arguments."""
    layout = ArgLayout(tuple([2] * n))
    o = Options()

    def new(fn: Callable[[ArgLayout, Options], list[Plan | None]]) -> int:
        return len(fn(layout, o))

    return {
        "vmap": (old_single_level(layout), len(single_level_plans(layout))),
        "vmap_nested": (old_nested(layout), len(nested_plans(layout))),
        "contract": (
            old_single_level(layout) + old_nested(layout),
            len(single_level_plans(layout)) + len(nested_plans(layout)),
        ),
        "grad_of_vmap": (old_single_level(layout, cap=8) + 1, new(_grad_of_vmap_plans)),
        "jvp_of_vmap": (0, new(_jvp_of_vmap_plans)),
        "vmap_of_vjp / vmap_of_jvp": (old_composite(layout), new(_composite_plans("x"))),
    }


def table() -> str:
    rows = {n: counts(n) for n in ARGS}
    checks = list(rows[1])
    lines = [
        "| check (old -> new plans) | "
        + " | ".join(f"{n} arg" + ("s" if n > 1 else "") for n in ARGS)
        + " |",
        "|---" * (len(ARGS) + 1) + "|",
    ]
    for c in checks:
        cells = []
        for n in ARGS:
            old, new = rows[n][c]
            cells.append(f"{old} -> {new}" if old else f"new: {new}")
        lines.append(f"| {c} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table())
