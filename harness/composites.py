"""Autodiff composed with vmap: ``grad_of_vmap``, ``vmap_of_vjp``, ``vmap_of_jvp``.

Plans (``CompositePlan``): the Function's in_dims from the single-level plan strategy with
the cotangents/tangents batched at 0, then the extras at -1, the extras alone (arguments
unbatched: the vmap rule is not called), the arguments alone (extras unbatched) and one
nested plan. Ids read ``in_dims=(0,None),cotangents=0``. References are loops of
per-slice eager calls, which never run a vmap rule.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from .autodiff_refs import (
    COMPOSITE_PLAN_CAP,
    LOOP_JVP_REFERENCE,
    LOOP_VJP_REFERENCE,
    Findings,
    Watch,
    _all_outputs,
    attempt,
    diff_view,
    eager_jvp,
    eager_protocol,
    eager_vjp,
    random_like,
    restricted,
)
from .batching import (
    MID,
    ArgLayout,
    LevelPlan,
    Plan,
    SliceSource,
    as_tuple,
    build_batched_args,
    concrete_out_dims,
    loop_reference,
    nested_plans,
    normalize_dim,
    single_level_plans,
    slice_call_args,
    vmapped,
)
from .checks import (
    CaseContext,
    Unsupported,
)
from .options import Options

# --- autodiff composed with vmap -------------------------------------------------------------


@dataclass(frozen=True)
class CompositePlan(Plan):
    """A plan over the Function's arguments plus one batch dim per level for every extra
    argument (the cotangents or tangents), appended after the Function's arguments."""

    extra_name: str = "cotangents"
    extra_dims: tuple[int | None, ...] = ()

    @property
    def id(self) -> str:
        parts = Plan.id.fget(self).split("|")  # type: ignore[attr-defined]
        return "|".join(
            f"{p},{self.extra_name}={'None' if d is None else d}"
            for p, d in zip(parts, self.extra_dims)
        )

    def to_dict(self) -> dict[str, Any]:
        d = super().to_dict()
        d["id"] = self.id
        d["extra"] = {"name": self.extra_name, "in_dims": list(self.extra_dims)}
        return d

    def combined(self, n_extra: int) -> Plan:
        """The plan over (arguments..., extras...) that the batching helpers understand."""
        return Plan(
            tuple(
                dataclasses.replace(lv, in_dims=(*lv.in_dims, *([d] * n_extra)))
                for lv, d in zip(self.levels, self.extra_dims)
            ),
            self.strategy,
        )


class WithExtras:
    """A SliceSource look-alike: each slice's arguments followed by its own random extras."""

    def __init__(
        self, slices: SliceSource, make: Callable[[tuple[int, ...]], list[torch.Tensor]]
    ) -> None:
        self._slices = slices
        self._make = make
        self._cache: dict[tuple[int, ...], list[torch.Tensor]] = {}

    def args(self, path: tuple[int, ...] = ()) -> tuple[Any, ...]:
        key = tuple(path)
        while key and key[-1] == 0:
            key = key[:-1]
        if key not in self._cache:
            self._cache[key] = self._make(key)
        return (*self._slices.args(path), *(e.clone() for e in self._cache[key]))


def _composite_plans(extra_name: str) -> Callable[[ArgLayout, Options], list[Plan | None]]:
    def plans(layout: ArgLayout, options: Options) -> list[Plan | None]:
        units = layout.units()
        if not units:
            return []
        b = options.batch_sizes[0]
        cap = min(options.plan_cap, COMPOSITE_PLAN_CAP)
        zero = tuple(0 if r is not None else None for r in layout.ranks)
        none = tuple(None for _ in layout.ranks)
        candidates: list[Plan] = [
            CompositePlan(p.levels, p.strategy, extra_name, (0,))
            for p in single_level_plans(layout, b, cap=cap, seed=options.seed)
            if p.levels[0].out_dims != MID  # out_dims=-1 stays; the vmap checks cover the rest
        ]
        candidates += [
            CompositePlan((LevelPlan(b, zero),), "composite", extra_name, (-1,)),
            CompositePlan((LevelPlan(b, none),), "composite", extra_name, (0,)),
            CompositePlan((LevelPlan(b, zero),), "composite", extra_name, (None,)),
        ]
        nb = tuple(options.nested_batch_sizes)
        if len(nb) >= 2:
            candidates.append(
                CompositePlan(
                    tuple(LevelPlan(s, zero) for s in nb),
                    "nested-fixed",
                    extra_name,
                    (0,) * len(nb),
                )
            )
        out: list[Plan | None] = []
        seen: set[str] = set()
        for p in candidates:
            if p.id not in seen:
                seen.add(p.id)
                out.append(p)
        return out

    return plans


def _grad_of_vmap_plans(layout: ArgLayout, options: Options) -> list[Plan | None]:
    b = options.batch_sizes[0]
    cap = min(options.plan_cap, COMPOSITE_PLAN_CAP)
    plans: list[Plan | None] = list(single_level_plans(layout, b, cap=cap, seed=options.seed))
    nested = nested_plans(layout, options.nested_batch_sizes)
    if nested:
        plans.append(nested[0])
    return plans


def _extras_maker(
    ctx: CaseContext, kind: str, likes: Sequence[torch.Tensor]
) -> Callable[[tuple[int, ...]], list[torch.Tensor]]:
    return lambda key: random_like(ctx.generator(kind, key), likes)


def _run_composite(
    ctx: CaseContext,
    check: str,
    kind: str,
    likes: Sequence[torch.Tensor],
    actual_fn: Callable[..., tuple[Any, ...]],
    reference_fn: Callable[..., tuple[Any, ...]],
    names: Sequence[str],
    sides: str,
) -> None:
    plan = ctx.plan
    assert isinstance(plan, CompositePlan)
    findings = Findings.of(ctx)
    full = plan.combined(len(likes))
    source = WithExtras(ctx.slices, _extras_maker(ctx, kind, likes))
    expected, returned_tuple = loop_reference(reference_fn, full, source)  # type: ignore[arg-type]
    out_dims = concrete_out_dims(full, expected, returned_tuple)
    batched = build_batched_args(full, source)  # type: ignore[arg-type]
    label = f"{check} {plan.id}"
    n = len(ctx.sample.args)
    watch = Watch()
    for i, a in enumerate(batched):
        watch.add(f"input {i}" if i < n else f"batched {kind} {i - n}", a)
    actual = as_tuple(
        attempt(label, vmapped(actual_fn, full, out_dims, randomness=ctx.vmap_randomness), *batched)
    )
    watch.verify(label, findings, f"the Function must leave its inputs and {kind} unchanged")
    if len(actual) != len(expected):
        findings.add(f"{label}: {len(actual)} results, reference {len(expected)}")
    for nm, a, e in zip(names, actual, expected):
        findings.compare(f"{label}: {nm}, {sides}", a, e, e.dtype)
    findings.raise_if_any()


def run_vmap_of_vjp(ctx: CaseContext) -> str:
    view = diff_view(ctx)
    eager_protocol(ctx, view)
    entry = ctx.entry
    n = len(view.args)

    def actual(*a: Any) -> tuple[Any, ...]:
        f = restricted(entry, a[:n], view.diff, view.outs)
        vjp_fn = torch.func.vjp(f, *(a[i] for i in view.diff))[1]
        return tuple(vjp_fn(tuple(a[n:])))

    def reference(*a: Any) -> tuple[Any, ...]:
        return eager_vjp(entry, a[:n], view.diff, view.outs, list(a[n:]))

    _run_composite(
        ctx,
        "vmap_of_vjp",
        "cotangents",
        [view.outputs[j] for j in view.outs],
        actual,
        reference,
        [f"grad of input {i}" for i in view.diff],
        f"vmap of torch.func.vjp (the Function's backward under vmap) vs {LOOP_VJP_REFERENCE} (reference)",
    )
    return LOOP_VJP_REFERENCE


def run_vmap_of_jvp(ctx: CaseContext) -> str:
    view = diff_view(ctx)
    eager_protocol(ctx, view)
    entry = ctx.entry
    n = len(view.args)
    plan = ctx.plan
    assert isinstance(plan, CompositePlan)
    for lv, extra in zip(plan.levels, plan.extra_dims):
        batched_inplace = [
            i for i in entry.caps.inplace_args if i < n and lv.in_dims[i] is not None
        ]
        if batched_inplace and extra is None:
            raise Unsupported(
                f"argument {batched_inplace[0]} is modified in place (mark_dirty), so jvp must "
                "update its tangent in place; with the argument batched and the tangent not, "
                "vmap cannot write batched values into the unbatched tangent (torch's own "
                "in-place ops such as exp_ raise the same way)"
            )

    def actual(*a: Any) -> tuple[Any, ...]:
        f = restricted(entry, a[:n], view.diff, view.outs)
        result = torch.func.jvp(f, tuple(a[i] for i in view.diff), tuple(a[n:]))
        return (*result[0], *result[1])

    def reference(*a: Any) -> tuple[Any, ...]:
        return eager_jvp(entry, a[:n], view.diff, view.outs, list(a[n:]))

    _run_composite(
        ctx,
        "vmap_of_jvp",
        "tangents",
        view.primals(),
        actual,
        reference,
        [f"primal output {j}" for j in view.outs] + [f"tangent of output {j}" for j in view.outs],
        f"vmap of torch.func.jvp (the Function's jvp under vmap) vs {LOOP_JVP_REFERENCE} (reference)",
    )
    return LOOP_JVP_REFERENCE


def run_grad_of_vmap(ctx: CaseContext) -> str:
    view = diff_view(ctx)
    eager_protocol(ctx, view)
    entry = ctx.entry
    plan = ctx.plan
    assert plan is not None
    findings = Findings.of(ctx)
    fn = _all_outputs(entry)
    stacked, returned_tuple = loop_reference(fn, plan, ctx.slices)
    out_dims = concrete_out_dims(plan, stacked, returned_tuple)
    batched = build_batched_args(plan, ctx.slices)
    cots = random_like(ctx.generator("cotangents"), [stacked[j] for j in view.outs])

    def out_dim(level: int, j: int) -> int:
        od = out_dims[level]
        return od[j] if isinstance(od, tuple) else od

    def reference(level: int, path: tuple[int, ...], cs: list[torch.Tensor]) -> list[torch.Tensor]:
        if level == len(plan.levels):
            args = slice_call_args(plan, ctx.slices, path)
            return list(
                attempt(
                    "per-slice eager vjp (reference)",
                    eager_vjp,
                    entry,
                    args,
                    view.diff,
                    view.outs,
                    cs,
                )
            )
        lv = plan.levels[level]
        per = []
        for b in range(lv.batch_size):
            sliced = [
                c.select(normalize_dim(out_dim(level, j), c.dim()), b)
                for j, c in zip(view.outs, cs)
            ]
            per.append(reference(level + 1, (*path, b), sliced))
        result = []
        for m, i in enumerate(view.diff):
            parts = [p[m] for p in per]
            dim = lv.in_dims[i]
            if dim is None:
                result.append(torch.stack(parts).sum(0))
            else:
                result.append(torch.stack(parts, dim=normalize_dim(dim, parts[0].dim() + 1)))
        return result

    expected = reference(0, (), cots)
    label = f"grad_of_vmap {plan.id}"
    watch = Watch()
    for i, a in enumerate(batched):
        watch.add(f"input {i}", a)
    cot_in = [c.clone() for c in cots]
    for j, c in zip(view.outs, cot_in):
        watch.add(f"the cotangent of output {j}", c)
    vf = vmapped(fn, plan, out_dims, randomness=ctx.vmap_randomness)

    def f(*xs: Any) -> tuple[Any, ...]:
        call = list(batched)
        for i, x in zip(view.diff, xs):
            call[i] = x
        outs = vf(*call)
        return tuple(outs[j] for j in view.outs)

    _, vjp_fn = attempt(f"{label} forward", torch.func.vjp, f, *(batched[i] for i in view.diff))
    actual = attempt(label, vjp_fn, tuple(cot_in))
    watch.verify(label, findings, "inputs and cotangents must be left unchanged")
    for i, a, e in zip(view.diff, actual, expected):
        findings.compare(
            f"{label}: grad of input {i}, torch.func.vjp of vmap (the Function's vmap rule and "
            f"backward) vs {LOOP_VJP_REFERENCE} (reference; unbatched inputs summed over slices)",
            a,
            e,
            e.dtype,
        )
    findings.raise_if_any()
    return LOOP_VJP_REFERENCE
