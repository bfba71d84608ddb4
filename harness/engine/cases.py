"""Cases and their records: what a run consists of, and the one place records are built.

Data flows one way: entry -> base samples -> plans -> cases -> results. A case is
identified by a stable, readable id (``NumpyMul/vmap/s0/in_dims=(0,None)``) from which the
same case can be rebuilt in another process (``find_case``). Every ``CaseResult`` of a
case is made by ``case_record``, whoever produces it (the runner, a worker pool that saw
the worker die, the expectations that skip it).
"""

from __future__ import annotations

import functools
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from autograd_function_db.entry import Entry, Sample
from harness.checks.catalogue import (
    check_names,
    get_check,
)
from harness.checks.compare import nonfinite_outputs
from harness.checks.dtype_leg import dtype_legs
from harness.core.locations import describe_exception
from harness.core.options import Options, dtype_name, sample_dtype_name
from harness.core.results import (
    ERROR,
    INTERNAL,
    CaseResult,
)
from harness.engine.blame import classify, internal_message
from harness.plans.plan import ArgLayout, Plan
from harness.plans.pytrees import leaves
from harness.plans.slices import SliceSource, sample_seed


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


class EntryData:
    """One entry's samples for a run: the base samples and cached per-slice draws."""

    def __init__(self, entry: Entry, options: Options) -> None:
        self.entry = entry
        self.options = options
        self._draw = functools.lru_cache(maxsize=256)(self._draw_uncached)
        self._nonfinite: dict[int, str] = {}
        self._slices: dict[int, SliceSource] = {}
        self._base_seed: int | None = None
        # recorded samples: the base slice is the call as made (harness.recorded.samples)
        tell = getattr(entry.samples, "slice_seeds", None)
        if callable(tell):
            tell(self.seed_parts)

    def _draw_uncached(self, seed: int) -> tuple[Sample, ...]:
        return tuple(self.entry.make_samples(seed, self.options.dtype, self.options.device))

    @property
    def seed_parts(self) -> tuple[object, ...]:
        return (self.options.seed, self.entry.name)

    def base_samples(self) -> tuple[Sample, ...]:
        if self._base_seed is None:
            self._base_seed = sample_seed(*self.seed_parts, "slice", ())
        return self._draw(self._base_seed)

    def slices(self, sample_index: int) -> SliceSource:
        """The sample's slice source, shared by its cases: it hands out copies only, so a
        Function that modifies its inputs never changes what a later case receives."""
        if sample_index not in self._slices:
            self._slices[sample_index] = SliceSource(self._draw, sample_index, self.seed_parts)
        return self._slices[sample_index]

    def nonfinite(self, sample_index: int) -> str:
        """The advice when every comparison of this sample would be vacuous ("" if none):
        its tensors have no elements, or the plain call on it gives NaN or inf (NaN matches
        NaN) or outputs without elements. None of its cases may pass. A call that raises is
        left to the checks, which report it.
        """
        if sample_index not in self._nonfinite:
            sample = self.base_samples()[sample_index]
            self._nonfinite[sample_index] = empty_sample(sample) or _nonfinite_call(
                self.entry, sample
            )
        return self._nonfinite[sample_index]


#: The advice for a sample whose tensors have no elements.
EMPTY_SAMPLE = (
    "the sample has no elements: every comparison would pass (there is nothing to compare); "
    "give every floating tensor of it at least one element"
)
EMPTY_OUTPUTS = (
    "the Function's outputs on this sample have no elements: every comparison would pass "
    "(there is nothing to compare); choose a sample whose outputs have elements"
)


def _tensors(tree: Any) -> list[torch.Tensor]:
    return [v for _, v in leaves(tree) if isinstance(v, torch.Tensor)]


def _floating_first(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """The floating (complex) tensors when there are any (those are compared), else all."""
    floating = [t for t in tensors if t.is_floating_point() or t.is_complex()]
    return floating or tensors


def empty_sample(sample: Sample) -> str:
    """``EMPTY_SAMPLE`` when the sample's (floating) tensors all have no elements, else ""."""
    tensors = _floating_first([t for a in sample.args for t in _tensors(a)])
    return EMPTY_SAMPLE if tensors and all(t.numel() == 0 for t in tensors) else ""


def _nonfinite_call(entry: Entry, sample: Sample) -> str:
    args = [a.detach().clone() if isinstance(a, torch.Tensor) else a for a in sample.args]
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            out = entry.call(*args)
    except Exception:
        return ""
    outputs = _floating_first(_tensors(out))
    if outputs and all(t.numel() == 0 for t in outputs):
        return EMPTY_OUTPUTS
    return nonfinite_outputs(out)


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


def repro_command(
    case_id_: str, options: Options, target: object = None, message: str = "", check: str = ""
) -> str:
    """The ``afdb repro`` command that writes a standalone script for this case.

    ``message`` and ``check``: a failing case's, so the command names the sub-check it
    failed (``--sub-check 'input 1 alone, all outputs'``) where only some failed.

    ``target`` is a user target (an object with ``cli_args()``, e.g. a
    ``harness.targets.TargetSpec``, so TARGET, --samples and declared capabilities
    come back), a plain string (``--target``), or None for a database entry.
    """
    cmd = ["afdb", "repro", case_id_]
    cli_args = getattr(target, "cli_args", None)
    if callable(cli_args):
        cmd += list(cli_args())
    elif target:
        cmd += ["--target", str(target)]
    from harness.core.repro_scope import SUB_CHECKS, failing_sub_check

    sub = failing_sub_check(message, check) if message and check in SUB_CHECKS else ""
    if sub:
        cmd += ["--sub-check", sub]
    cmd += ["--seed", str(options.seed)]
    cmd += ["--dtype", dtype_name(options.dtype)]
    defaults = Options()
    if options.device != defaults.device:
        cmd += ["--device", options.device]
    if options.plan_cap != defaults.plan_cap:
        cmd += ["--plan-cap", str(options.plan_cap)]
    if not callable(cli_args) and not options.batch_size_note:
        if options.batch_sizes != defaults.batch_sizes:
            cmd += ["--batch-size", ",".join(map(str, options.batch_sizes))]
        if options.nested_batch_sizes != defaults.nested_batch_sizes:
            cmd += ["--nested-batch-sizes", ",".join(map(str, options.nested_batch_sizes))]
    return " ".join(shlex.quote(c) for c in cmd)


def options_dtype(options: Options, sample: Sample | Sequence[Sample] | None = None) -> str:
    """The dtype a case runs at: the run's, or with samples' own dtypes the sample's (for a
    case of no one sample, those of all the entry's samples)."""
    if options.dtype is None and sample is not None:
        samples = [sample] if isinstance(sample, Sample) else list(sample)
        return sample_dtype_name([a for s in samples for a in s.args])
    return dtype_name(options.dtype)


def case_record(case: Case, status: str, message: str = "", **fields: Any) -> CaseResult:
    """A result record for ``case`` (every producer of records builds them here)."""
    return CaseResult(
        id=case.id,
        entry=case.entry,
        check=case.check,
        sample=case.sample_index,
        sample_name=case.sample_name,
        plan=case.plan.to_dict() if case.plan is not None else None,
        status=status,
        message=message,
        **fields,
    )


def samples_error(entry_name: str, exc: BaseException) -> CaseResult:
    """The record of an entry whose samples could not be built (no case of it can run)."""
    record = CaseResult(
        id=f"{entry_name}/samples",
        entry=entry_name,
        check="samples",
        sample=None,
        sample_name="",
        plan=None,
        status=ERROR,
        message=f"could not build the samples: {describe_exception(exc)}",
    )
    blame = classify(exc)
    if blame.internal:
        record.status = INTERNAL
        record.message = internal_message(blame.where, f"samples: {describe_exception(exc)}")
    return record


def find_case(entry: Entry, options: Options, wanted: str) -> tuple[EntryData, Case]:
    data = EntryData(entry, options)
    for case in enumerate_cases(data):
        if case.id == wanted:
            return data, case
    raise KeyError(f"no case {wanted!r} for entry {entry.name} with these options")


def all_case_ids(entries: Sequence[Entry], options: Options) -> list[str]:
    return [c.id for e in entries for c in enumerate_cases(EntryData(e, options))]
