"""``vmap_fallback``: no silent per-example loop (PyTorch's ``*_has_batch_rule`` tests).

When an op inside a Function (its forward, its vmap rule, its backward or jvp) has no
batching rule, ``torch.func.vmap`` does not fail: it runs the op once per batch element
(torch's "vmap fallback") and warns, when its fallback warning is on. The results are
right and the vmap checks pass; only the speed is lost. This check runs, per sample, vmap
of the Function, vmap of its vjp and vmap of its jvp (those it claims) with every argument
and every cotangent or tangent batched at 0, with torch's fallback warning turned on
(``torch._C._functorch._set_vmap_fallback_warning_enabled``; the previous setting, which
torch offers no getter for, is probed and restored). The results are compared with the
same loop references as the vmap checks; then a fallback, if torch reported one, fails the
case with a message starting ``performance:`` that names every op that fell back and under
which transform. It is a clearly labelled ``fail`` rather than a status of its own: the
report's grouping, expectations and exit codes then treat it as every other finding.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import Any

import torch

from harness.checks.catalogue import (
    CaseContext,
    CheckFailure,
    CheckSpec,
    Unsupported,
    get_check,
    register,
)
from harness.checks.compare import compare_outputs
from harness.checks.vmap import (
    FALLBACK_MARK,
    captured_fallback_warnings,
    lacks_batching_rule,
    needs_vmap_or_fallback,
    vmap_against_loop,
)
from harness.core.locations import describe_exception
from harness.core.options import Options
from harness.plans.batching import as_tuple, concrete_out_dims, loop_reference, vmapped
from harness.plans.composite import CompositePlan
from harness.plans.plan import ArgLayout, LevelPlan, Plan
from harness.plans.pytrees import FlatCall
from harness.plans.slices import build_batched_args, seeded_call

FALLBACK_REFERENCE = "no vmap fallback (torch's fallback warning on); loop references"

#: The op a fallback warning names: "... the batching rule for aten::histc. Please file ...".
_OP = re.compile(r"batching rule for (\S+?)\.?\s+Please")

_PROBE: Any = None


def _probe_op() -> Any:
    """An op with a CPU kernel and no batching rule: vmap runs it through the fallback."""
    global _PROBE
    if _PROBE is None:
        lib = torch.library.Library("afdb_harness_probe", "DEF")
        lib.define("fallback_probe(Tensor x) -> Tensor")
        lib.impl("fallback_probe", lambda x: x.clone(), "CompositeExplicitAutograd")
        _PROBE = (lib, torch.ops.afdb_harness_probe.fallback_probe.default)
    return _PROBE[1]


def fallback_warning_enabled() -> bool:
    """Whether torch's vmap fallback warning is on (torch has a setter only: a vmap of the
    probe op, which always falls back, tells)."""
    op = _probe_op()
    with captured_fallback_warnings() as lines:
        torch.func.vmap(op)(torch.zeros(2, 1))
    return bool(lines)


def fallback_ops(lines: list[str]) -> list[str]:
    """The ops torch's fallback warnings name, in order, each once."""
    ops: list[str] = []
    for line in lines:
        m = _OP.search(line)
        name = m.group(1) if m else line.strip()
        if name not in ops:
            ops.append(name)
    return ops


def _plans(layout: ArgLayout, options: Options) -> list[Plan | None]:
    if not layout.units():
        return []
    zero = layout.in_dims(layout.uniform(0))
    return [Plan((LevelPlan(options.batch_sizes[0], zero),), "fixed")]


def _run_same_randomness(ctx: CaseContext) -> None:
    """A random entry under ``randomness='same'`` against a loop reseeded to one seed per
    slice (the other modes are the vmap checks' business)."""
    plan = ctx.plan
    assert plan is not None
    fn = FlatCall(ctx.entry.call)
    seed = int(ctx.generator("rng").initial_seed())
    expected, returned_tuple = loop_reference(seeded_call(fn, seed), plan, ctx.slices)
    out_dims = concrete_out_dims(plan, expected, returned_tuple)
    args = build_batched_args(plan, ctx.slices)
    same = as_tuple(seeded_call(vmapped(fn, plan, out_dims, randomness="same"), seed)(*args))
    rtol, atol = ctx.tolerances
    problems = compare_outputs(
        same, expected, rtol=rtol, atol=atol, label=f"vmap {plan.id}, randomness='same'"
    )
    if problems:
        raise CheckFailure("; ".join(problems))


def _modes(ctx: CaseContext) -> list[tuple[str, Callable[[CaseContext], Any]]]:
    """The transforms this case runs: vmap, then vmap of vjp and of jvp where the entry claims
    them (each exactly as its own check runs it, on a plan batching everything at 0)."""
    entry = ctx.entry
    plan = ctx.plan
    assert plan is not None

    def plain(c: CaseContext) -> Any:
        return _run_same_randomness(c) if entry.caps.randomness else vmap_against_loop(c, "vmap")

    modes: list[tuple[str, Callable[[CaseContext], Any]]] = [("vmap", plain)]
    for name, extra in (("vmap_of_vjp", "cotangents"), ("vmap_of_jvp", "tangents")):
        spec = get_check(name)
        if spec.supported(entry) is not None:
            continue
        composite = CompositePlan(plan.levels, plan.strategy, extra, (0,))

        def run(c: CaseContext, spec: Any = spec, composite: Plan = composite) -> Any:
            return spec.run(dataclasses.replace(c, plan=composite, notes=c.notes))

        modes.append((name.replace("_of_", " of "), run))
    return modes


def run_vmap_fallback(ctx: CaseContext) -> str:
    plan = ctx.plan
    assert plan is not None
    set_warning = getattr(torch._C._functorch, "_set_vmap_fallback_warning_enabled")  # noqa: B009
    previous = fallback_warning_enabled()
    fell_back: dict[str, list[str]] = {}
    skipped: list[str] = []
    ran: list[str] = []
    first_error: BaseException | None = None
    set_warning(True)
    try:
        for name, run in _modes(ctx):
            own = name.replace(" of ", "_of_")
            with captured_fallback_warnings() as lines:
                try:
                    run(ctx)
                except Unsupported as e:
                    skipped.append(f"{name}: {e}")
                    continue
                except CheckFailure as e:
                    raise CheckFailure(
                        f"vmap_fallback {plan.id}: {name} does not match its loop reference "
                        f"(the {own} check reports it too): {e}"
                    ) from e
                except Exception as e:
                    # The transform itself fails: its own check reports it; this one says
                    # what it could not run.
                    first_error = first_error or e
                    skipped.append(f"{name} raised {describe_exception(e)} (see the {own} check)")
                    continue
            ran.append(name)
            for op in fallback_ops([ln for ln in lines if FALLBACK_MARK in ln]):
                fell_back.setdefault(op, []).append(name)
    finally:
        set_warning(previous)
    if not ran:
        if first_error is not None:
            raise first_error
        raise Unsupported("; ".join(skipped) or "no transform to run")
    if fell_back:
        parts = [
            f"{op} has no batch rule (under {', '.join(modes)})" for op, modes in fell_back.items()
        ]
        advice = (
            "register a rule with torch.library.register_vmap"
            if lacks_batching_rule(ctx.entry)
            else "use ops that have batching rules, or work around these in the vmap rule"
        )
        raise CheckFailure(
            f"performance: correct, but {'; '.join(parts)}: vmap runs "
            f"{'it' if len(fell_back) == 1 else 'them'} as a per-example Python loop "
            f"(torch's vmap fallback), so nothing is batched ({', '.join(ran)} matched the "
            f"loop references at {plan.id}); {advice}"
        )
    if skipped:
        ctx.notes.append("vmap_fallback: not run: " + "; ".join(skipped))
    return FALLBACK_REFERENCE


register(
    CheckSpec(
        "vmap_fallback",
        run_vmap_fallback,
        _plans,
        needs_vmap_or_fallback,
        "vmap",
        FALLBACK_REFERENCE,
        "vmap, vmap of vjp and vmap of jvp with torch's fallback warning on (PyTorch's "
        "*_has_batch_rule tests): fails ('performance: ...') naming every op vmap ran as a "
        "per-example loop",
    )
)
