"""Case enumeration: what a run consists of.

Data flows one way: entry -> base samples (``sample_cache``) -> plans -> cases (here) ->
results (``runner``, recorded by ``records``). A case is identified by a stable, readable id
(``NumpyMul/vmap/s0/in_dims=(0,None)``) from which the same case can be rebuilt in another
process (``find_case``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from autograd_function_db.entry import Entry, Sample
from harness.checks.catalogue import check_names, get_check
from harness.checks.dtype_leg import dtype_legs
from harness.core.options import Options
from harness.engine.sample_cache import EntryData
from harness.plans.plan import ArgLayout, Plan


@dataclass(frozen=True)
class Case:
    id: str
    entry: str
    check: str
    sample_index: int | None
    sample_name: str
    plan: Plan | None
    unsupported: str = ""


def case_id(
    entry: str, check: str, sample_index: int | None = None, plan: Plan | None = None
) -> str:
    parts = [entry, check]
    if sample_index is not None:
        parts.append(f"s{sample_index}")
    if plan is not None:
        parts.append(plan.id)
    return "/".join(parts)


def selected_checks(options: Options) -> list[str]:
    names = list(options.checks) if options.checks else check_names()
    for n in names:
        get_check(n)  # raises KeyError naming the known checks
    return names


#: Plans already generated, by plan generator, layout and options (see ``_plans``).
_PLANS: dict[tuple[Any, ...], tuple[Plan | None, ...]] = {}
_PLANS_MAX = 4096


def _plans(spec: Any, layout: ArgLayout, options: Options) -> tuple[Plan | None, ...]:
    """``spec.plans(layout, options)``, generated once per distinct layout: generation is a
    deterministic function of the two (samples of many entries share a layout), and plans
    are frozen, so every case of that layout can share them."""
    key = (spec.plans, repr(layout), options)
    try:
        plans = _PLANS.get(key)
    except TypeError:  # options with an unhashable field: generate every time
        return tuple(spec.plans(layout, options))
    if plans is None:
        if len(_PLANS) >= _PLANS_MAX:
            _PLANS.pop(next(iter(_PLANS)))
        plans = _PLANS[key] = tuple(spec.plans(layout, options))
    return plans


def enumerate_cases(data: EntryData) -> list[Case]:
    entry, options = data.entry, data.options
    cases: list[Case] = []
    samples: tuple[Sample, ...] | None = None
    layouts: list[ArgLayout] = []
    dtype_reason = ""
    if entry.dtypes and options.dtype is not None and options.dtype not in entry.dtypes:
        declared = ", ".join(str(d).replace("torch.", "") for d in entry.dtypes)
        dtype_reason = (
            f"the entry declares dtypes {declared}, not {str(options.dtype).replace('torch.', '')}"
        )
    for check in selected_checks(options):
        spec = get_check(check)
        if spec.by_default is not None and not spec.by_default(entry):
            continue  # the eager checks of a Function torch.func differentiates: no case
        reason = dtype_reason or spec.supported(entry)
        if reason:
            cases.append(
                Case(case_id(entry.name, check), entry.name, check, None, "", None, reason)
            )
            continue
        if samples is None:
            samples = data.base_samples()
            layouts = [ArgLayout.of(sample, entry.linked_args) for sample in samples]
        for i, (sample, layout) in enumerate(zip(samples, layouts)):
            plans: list[Plan | None] = list(_plans(spec, layout, options))
            plans += dtype_legs(check, entry, sample, options)
            for plan in plans:
                cases.append(
                    Case(
                        case_id(entry.name, check, i, plan),
                        entry.name,
                        check,
                        i,
                        sample.name,
                        plan,
                        # a plan generated only to say why it is not run (the hazard probe's
                        # memory budget)
                        getattr(plan, "skipped", ""),
                    )
                )
    return cases


def find_case(entry: Entry, options: Options, wanted: str) -> tuple[EntryData, Case]:
    data = EntryData(entry, options)
    for case in enumerate_cases(data):
        if case.id == wanted:
            return data, case
    raise KeyError(f"no case {wanted!r} for entry {entry.name} with these options")


def all_case_ids(entries: Sequence[Entry], options: Options) -> list[str]:
    return [c.id for e in entries for c in enumerate_cases(EntryData(e, options))]
