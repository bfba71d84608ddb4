"""Plans of the checks that batch extra arguments beside the Function's: autodiff composed
with vmap (``grad_of_vmap``, ``jvp_of_vmap``, ``vmap_of_vjp``, ``vmap_of_jvp``) and three
transforms (``vmap_of_vjp_of_vjp``, ``vmap_of_jvp_of_vjp``), and the slices they read.

* ``CompositePlan`` (``vmap_of_vjp``, ``vmap_of_jvp``): the cotangents or tangents are one
  more unit at None, 0 or -1 in the covering array, so every pair of (argument position,
  argument position) and (argument position, extras position) occurs; then out_dims=-1 and
  one nested plan. Ids read ``in_dims=(0,None),cotangents=0``.
* ``grad_of_vmap`` and ``jvp_of_vmap`` take the single-level strategy (exhaustive up to the
  composite cap, pairwise beyond) and one nested plan.
* ``GroupsPlan`` (three transforms): the Function's units at None, 0 or -1 and each group of
  extras as one more unit at None or 0. Ids read
  ``in_dims=(0,),cotangents=None,outer_cotangents=0``.
* ``WithExtras``: a slice source whose slices are the sample's followed by their own extras;
  ``stacked_extra`` and ``loop_of_grads`` stack per-slice extras and grads as a plan
  batches them (``grad_of_vmap``'s batched cotangents and loop reference).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from harness.core.options import Options
from harness.plans.plan import (
    MID,
    ArgLayout,
    LevelPlan,
    Plan,
    any_batched,
    choose_rows,
    nested_plans,
    normalize_dim,
    single_level_plans,
    unique_plans,
    unit_choices,
)
from harness.plans.slices import PlanSlices, SliceSource

#: Composite checks: cap on the primal in_dims plans (before the tangent-only/primal-only ones).
COMPOSITE_PLAN_CAP = 8

#: Positions of the extras (cotangents or tangents): all of them share one batch dim per level.
EXTRA_CHOICES: tuple[int | None, ...] = (None, 0, -1)

#: Positions of a group of extras in the three-level plans (PyTorch's tests batch an
#: argument at 0 or not at all; -1 for the extras is vmap_of_vjp's and vmap_of_jvp's).
GROUP_CHOICES: tuple[int | None, ...] = (None, 0)


@dataclass(frozen=True)
class CompositePlan(Plan):
    """A plan over the Function's arguments plus one batch dim per level for every extra
    argument (the cotangents or tangents), appended after the Function's arguments."""

    extra_name: str = "cotangents"
    extra_dims: tuple[int | None, ...] = ()

    def _make_id(self) -> str:
        parts = self._levels_id().split("|")
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


@dataclass(frozen=True)
class GroupsPlan(Plan):
    """A plan over the Function's arguments plus, per level, one batch dim for each group of
    extra arguments (appended after the Function's arguments, group after group)."""

    extra_names: tuple[str, ...] = ()
    #: Per level: one batch dim (or None) per group.
    extra_dims: tuple[tuple[int | None, ...], ...] = ()

    def _make_id(self) -> str:
        parts = self._levels_id().split("|")
        return "|".join(
            p
            + "".join(
                f",{nm}={'None' if d is None else d}" for nm, d in zip(self.extra_names, dims)
            )
            for p, dims in zip(parts, self.extra_dims)
        )

    def to_dict(self) -> dict[str, Any]:
        d = super().to_dict()
        d["id"] = self.id
        d["extras"] = [
            {"name": nm, "in_dims": [dims[g] for dims in self.extra_dims]}
            for g, nm in enumerate(self.extra_names)
        ]
        return d

    def combined(self, sizes: Sequence[int]) -> Plan:
        """The plan over (arguments..., group 0..., group 1...) the batching helpers read."""
        return Plan(
            tuple(
                dataclasses.replace(
                    lv,
                    in_dims=(*lv.in_dims, *(d for d, k in zip(dims, sizes) for _ in range(k))),
                )
                for lv, dims in zip(self.levels, self.extra_dims)
            ),
            self.strategy,
        )


def with_extra_dims(plan: Plan, extra_dims: Callable[[LevelPlan], Sequence[int | None]]) -> Plan:
    """``plan`` over (arguments..., extras...): each level's in_dims followed by
    ``extra_dims(level)`` (grad_of_vmap's cotangents, jvp_of_vmap's tangents)."""
    return Plan(
        tuple(
            dataclasses.replace(lv, in_dims=(*lv.in_dims, *extra_dims(lv))) for lv in plan.levels
        ),
        plan.strategy,
    )


# --- plan generation ----------------------------------------------------------------------


def composite_plans(extra_name: str) -> Callable[[ArgLayout, Options], list[Plan | None]]:
    """The Function's units and the extras as one more unit, in a strength-2 covering array
    (exhaustive under the cap): every pair of positions of two arguments, or of an argument
    and the extras, occurs in some plan. Then out_dims=-1 and one nested plan."""

    def plans(layout: ArgLayout, options: Options) -> list[Plan | None]:
        units = layout.units()
        if not units:
            return []
        b = options.batch_sizes[0]
        cap = min(options.plan_cap, COMPOSITE_PLAN_CAP)
        per_unit = [unit_choices(layout, u) for u in units]
        sizes = [*(len(c) for c in per_unit), len(EXTRA_CHOICES)]
        rows, strategy = choose_rows(sizes, cap, options.seed, any_batched)
        candidates: list[Plan] = []
        for row in rows:
            assignment: dict[Any, Any] = {}
            for options_, r in zip(per_unit, row):
                assignment.update(options_[r])
            candidates.append(
                CompositePlan(
                    (LevelPlan(b, layout.in_dims(assignment)),),
                    strategy,
                    extra_name,
                    (EXTRA_CHOICES[row[-1]],),
                )
            )
        zero = layout.in_dims(layout.uniform(0))
        candidates.append(CompositePlan((LevelPlan(b, zero, -1),), strategy, extra_name, (0,)))
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
        return list(unique_plans(candidates))

    return plans


def grad_of_vmap_plans(layout: ArgLayout, options: Options) -> list[Plan | None]:
    """The single-level plans under the composite cap, then the first nested plan."""
    b = options.batch_sizes[0]
    cap = min(options.plan_cap, COMPOSITE_PLAN_CAP)
    plans: list[Plan | None] = list(single_level_plans(layout, b, cap=cap, seed=options.seed))
    nested = nested_plans(layout, options.nested_batch_sizes)
    if nested:
        plans.append(nested[0])
    return plans


def jvp_of_vmap_plans(layout: ArgLayout, options: Options) -> list[Plan | None]:
    """As grad_of_vmap, without the interior out_dims (the vmap checks cover it)."""
    return [
        p
        for p in grad_of_vmap_plans(layout, options)
        if p is not None and all(lv.out_dims != MID for lv in p.levels)
    ]


def end_choices(choices: list[dict[Any, Any]]) -> list[dict[Any, Any]]:
    """A unit's positions without the interior one (None, 0, -1): the interior positions are
    the vmap and two-level checks' (each torch.func level sees the same batched tensor)."""
    return [c for c in choices if all(d in (None, 0, -1) for d in c.values())]


def groups_plans(names: tuple[str, ...]) -> Callable[[ArgLayout, Options], list[Plan | None]]:
    """The Function's units (None, 0, -1) and one unit per group of extras (None, 0) in a
    strength-2 covering array (exhaustive under the cap); out_dims 0 (the other out_dims
    are the vmap and two-level checks')."""

    def plans(layout: ArgLayout, options: Options) -> list[Plan | None]:
        units = layout.units()
        if not units:
            return []
        b = options.batch_sizes[0]
        cap = min(options.plan_cap, COMPOSITE_PLAN_CAP)
        per_unit = [end_choices(unit_choices(layout, u)) for u in units]
        sizes = [*(len(c) for c in per_unit), *(len(GROUP_CHOICES) for _ in names)]
        rows, strategy = choose_rows(sizes, cap, options.seed, any_batched)
        candidates: list[Plan] = []
        for row in rows:
            assignment: dict[Any, Any] = {}
            for choices, r in zip(per_unit, row):
                assignment.update(choices[r])
            extras = tuple(GROUP_CHOICES[r] for r in row[len(per_unit) :])
            level = LevelPlan(b, layout.in_dims(assignment))
            candidates.append(GroupsPlan((level,), strategy, names, (extras,)))
        return list(unique_plans(candidates))

    return plans


# --- grad_of_vmap's loop reference ------------------------------------------------------


def loop_of_grads(
    plan: Plan,
    diff: Sequence[int],
    grads: Callable[[tuple[int, ...]], Sequence[torch.Tensor]],
    level: int = 0,
    path: tuple[int, ...] = (),
) -> list[torch.Tensor]:
    """The per-slice grads of the differentiated inputs stacked at their in_dims, level by
    level; an input a level leaves unbatched gets the sum over that level's slices."""
    if level == len(plan.levels):
        return list(grads(path))
    lv = plan.levels[level]
    per = [loop_of_grads(plan, diff, grads, level + 1, (*path, b)) for b in range(lv.batch_size)]
    result = []
    for m, i in enumerate(diff):
        parts = [p[m] for p in per]
        dim = lv.in_dims[i]
        if dim is None:
            result.append(torch.stack(parts).sum(0))
        else:
            result.append(torch.stack(parts, dim=normalize_dim(dim, parts[0].dim() + 1)))
    return result


def stacked_extra(
    source: WithExtras,
    index: int,
    plan: Plan,
    out_dims: Sequence[Any],
    j: int,
    level: int = 0,
    path: tuple[int, ...] = (),
) -> torch.Tensor:
    """The slices' extra at ``index`` (of the source's arguments) stacked level by level at
    output ``j``'s out_dim: the batched cotangent of that output."""
    if level == len(plan.levels):
        return source.peek(path)[index]  # type: ignore[no-any-return]
    parts = [
        stacked_extra(source, index, plan, out_dims, j, level + 1, (*path, b))
        for b in range(plan.levels[level].batch_size)
    ]
    od = out_dims[level]
    dim = od[j] if isinstance(od, tuple) else od
    return torch.stack(parts, dim=normalize_dim(dim, parts[0].dim() + 1))


# --- the slices with their extras ---------------------------------------------------------


class WithExtras:
    """A SliceSource look-alike: each slice's arguments followed by its own random extras.

    One is kept per sample and kind of extras (``harness.checks.composites.extras_source``),
    so like a ``SliceSource`` it keeps what the sample's cases share: the extras drawn per
    slice path, plan readers, per-slice call arguments and stacks (each handed out as a
    copy), and the per-slice outputs of the eager references (``PlanSlices.outputs_kept``)."""

    def __init__(
        self, slices: SliceSource, make: Callable[[tuple[int, ...]], list[torch.Tensor]]
    ) -> None:
        self._slices = slices
        self._make = make
        self._cache: dict[tuple[int, ...], list[torch.Tensor]] = {}
        self._peeked: dict[tuple[int, ...], tuple[Any, ...]] = {}
        #: Plan readers (``PlanSlices.of``): the loop and the batched call of a case share one.
        self._readers: dict[str, PlanSlices] = {}
        #: Per-slice call arguments and reference outputs (see ``SliceSource``).
        self._call_slices: dict[tuple[Any, ...], dict[tuple[int, ...], tuple[Any, ...]]] = {}
        self._slice_outputs: dict[tuple[Any, ...], dict[tuple[int, ...], Any]] = {}
        self._n_args = len(slices.peek(()))
        self._stacks = getattr(slices, "stacks", None)
        self._extra_stacks: dict[tuple[Any, ...], torch.Tensor] = {}

    def _extras(self, path: tuple[int, ...]) -> list[torch.Tensor]:
        key = tuple(path)
        while key and key[-1] == 0:
            key = key[:-1]
        if key not in self._cache:
            self._cache[key] = self._make(key)
        return self._cache[key]

    def args(self, path: tuple[int, ...] = ()) -> tuple[Any, ...]:
        return (*self._slices.args(path), *(e.clone() for e in self._extras(path)))

    def stacks(self, index: int) -> dict[tuple[Any, ...], torch.Tensor] | None:
        """The source's kept stacks for the Function's arguments, this one's for the extras."""
        if index >= self._n_args:
            return self._extra_stacks
        return self._stacks(index) if self._stacks is not None else None

    def peek(self, path: tuple[int, ...]) -> tuple[Any, ...]:
        """The cached arguments and extras at ``path``, only to be read (see
        ``SliceSource.peek``): nothing is copied for a caller that wants one leaf."""
        key = tuple(path)
        both = self._peeked.get(key)
        if both is None:
            both = self._peeked[key] = (*self._slices.peek(path), *self._extras(path))
        return both
