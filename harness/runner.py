"""From entries to cases to results: enumerate, run one case in isolation, run many.

Data flows one way: entry -> base samples -> plans -> cases -> results. A case
is identified by a stable, readable id (``NumpyMul/vmap/s0/in_dims=(0,None)``)
from which the same case can be rebuilt in another process.
"""

from __future__ import annotations

import functools
import shlex
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from autograd_function_db.entry import Entry, Sample

from .batching import ArgLayout, Plan, SliceSource, derive_seed
from .checks import CaseContext, CheckFailure, Unsupported, check_names, get_check
from .isolation import (
    CaseTimeout,
    TorchState,
    capture_output,
    describe_exception,
    describe_output,
    restore,
    time_limit,
)
from .options import Options, dtype_name, sample_dtype_name
from .results import (
    ERROR,
    FAIL,
    PASS,
    TIMEOUT,
    UNSUPPORTED,
    CaseResult,
)


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

    def _draw_uncached(self, seed: int) -> tuple[Sample, ...]:
        return tuple(self.entry.make_samples(seed, self.options.dtype, self.options.device))

    @property
    def seed_parts(self) -> tuple[object, ...]:
        return (self.options.seed, self.entry.name)

    def base_samples(self) -> tuple[Sample, ...]:
        return self._draw(derive_seed(*self.seed_parts, "slice", ()))

    def slices(self, sample_index: int) -> SliceSource:
        return SliceSource(self._draw, sample_index, self.seed_parts)


def selected_checks(options: Options) -> list[str]:
    names = list(options.checks) if options.checks else check_names()
    for n in names:
        get_check(n)  # raises KeyError naming the known checks
    return names


def enumerate_cases(data: EntryData) -> list[Case]:
    entry, options = data.entry, data.options
    cases: list[Case] = []
    samples: tuple[Sample, ...] | None = None
    dtype_reason = ""
    if entry.dtypes and options.dtype is not None and options.dtype not in entry.dtypes:
        declared = ", ".join(str(d).replace("torch.", "") for d in entry.dtypes)
        dtype_reason = (
            f"the entry declares dtypes {declared}, not {str(options.dtype).replace('torch.', '')}"
        )
    for check in selected_checks(options):
        spec = get_check(check)
        reason = dtype_reason or spec.supported(entry)
        if reason:
            cases.append(
                Case(case_id(entry.name, check), entry.name, check, None, "", None, reason)
            )
            continue
        if samples is None:
            samples = data.base_samples()
        for i, sample in enumerate(samples):
            layout = ArgLayout.of(sample, entry.linked_args)
            for plan in spec.plans(layout, options):
                cases.append(
                    Case(
                        case_id(entry.name, check, i, plan), entry.name, check, i, sample.name, plan
                    )
                )
    return cases


def repro_command(case_id_: str, options: Options, target: object = None) -> str:
    """The ``afdb repro`` command that writes a standalone script for this case.

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
    return CaseResult(
        id=f"{entry_name}/samples",
        entry=entry_name,
        check="samples",
        sample=None,
        sample_name="",
        plan=None,
        status=ERROR,
        message=f"could not build the samples: {describe_exception(exc)}",
    )


def _sample_of(data: EntryData, case: Case) -> Sample | Sequence[Sample] | None:
    """The case's base sample (all of them for an entry-level case) when they can be drawn,
    for the dtype in its record."""
    if data.options.dtype is not None:
        return None
    try:
        samples = data.base_samples()
        return samples if case.sample_index is None else samples[case.sample_index]
    except Exception:
        return None


def run_case(data: EntryData, case: Case, *, target: object = None) -> CaseResult:
    """Run one case; never raises. Leaked global state is reported and restored."""
    options = data.options
    spec = get_check(case.check)
    result = case_record(
        case, PASS, reference=spec.reference, dtype=options_dtype(options, _sample_of(data, case))
    )
    if case.unsupported:
        result.status, result.message, result.reference = UNSUPPORTED, case.unsupported, ""
        return result
    state = TorchState.capture()
    start = time.perf_counter()
    with capture_output() as printed:
        try:
            with time_limit(options.timeout_s):
                assert case.sample_index is not None
                ctx = CaseContext(
                    entry=data.entry,
                    case_id=case.id,
                    sample_index=case.sample_index,
                    sample=data.base_samples()[case.sample_index],
                    plan=case.plan,
                    slices=data.slices(case.sample_index),
                    options=options,
                )
                used = spec.run(ctx)
                if used:
                    result.reference = used
                if ctx.notes:
                    result.message = "; ".join(ctx.notes)
        except CheckFailure as e:
            result.status, result.message = FAIL, str(e)
        except Unsupported as e:
            result.status, result.message = UNSUPPORTED, str(e)
        except CaseTimeout as e:
            result.status, result.message = TIMEOUT, str(e)
        except SystemExit as e:
            result.status = ERROR
            result.message = f"the Function called sys.exit({e.code!r}): {describe_exception(e)}"
        except Exception as e:
            where = f"{case.check} {case.plan.id}" if case.plan else case.check
            result.status = ERROR
            result.message = f"{where}: the Function raised {describe_exception(e)}"
        finally:
            result.duration_s = time.perf_counter() - start
            leaked = restore(state)
    if leaked and result.status != TIMEOUT:
        note = "the Function " + "; ".join(leaked) + " (restored before the next case)"
        if result.status == PASS:
            result.status = ERROR
        result.message = f"{result.message}; {note}" if result.message else note
    output_note = describe_output(printed, result.status)
    if output_note:
        result.message = f"{result.message}\n{output_note}" if result.message else output_note
    if result.status not in (PASS, UNSUPPORTED):
        result.repro = repro_command(case.id, options, target)
    return result


def run_entries(
    entries: Iterable[Entry],
    options: Options,
    *,
    select: Callable[[Case], bool] | None = None,
    progress: Callable[[CaseResult], None] | None = None,
    target: object = None,
    collect: list[CaseResult] | None = None,
) -> list[CaseResult]:
    """Run every case of every entry in this process, in order.

    Results are appended to ``collect`` (a fresh list by default) as they come, so
    a caller interrupted half way still holds the cases done so far.
    """
    results: list[CaseResult] = collect if collect is not None else []
    for entry in entries:
        data = EntryData(entry, options)
        try:
            cases = enumerate_cases(data)
        except Exception as e:
            r = samples_error(entry.name, e)
            results.append(r)
            if progress:
                progress(r)
            continue
        for case in cases:
            if select is not None and not select(case):
                continue
            r = run_case(data, case, target=target)
            results.append(r)
            if progress:
                progress(r)
    return results


def find_case(entry: Entry, options: Options, wanted: str) -> tuple[EntryData, Case]:
    data = EntryData(entry, options)
    for case in enumerate_cases(data):
        if case.id == wanted:
            return data, case
    raise KeyError(f"no case {wanted!r} for entry {entry.name} with these options")


def all_case_ids(entries: Sequence[Entry], options: Options) -> list[str]:
    return [c.id for e in entries for c in enumerate_cases(EntryData(e, options))]


__all__ = [
    "Case",
    "CheckFailure",
    "EntryData",
    "all_case_ids",
    "case_id",
    "enumerate_cases",
    "find_case",
    "run_case",
    "run_entries",
]
