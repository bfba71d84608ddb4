"""From entries to cases to results: enumerate, run one case in isolation, run many.

Data flows one way: entry -> base samples -> plans -> cases -> results. A case
is identified by a stable, readable id (``NumpyMul/vmap/s0/in_dims=(0,None)``)
from which the same case can be rebuilt in another process.
"""

from __future__ import annotations

import functools
import shlex
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from autograd_function_db.entry import Entry, Sample

from . import children
from .blame import blamed, blamed_reference, classify, internal_message
from .case_state import (
    GlobalState,
    between_cases,
    case_ended,
    foreign_threads,
    forget_last_case,
    last_end,
    note_threads,
    restore_global,
    watch_thread_starts,
)
from .checks import (
    CaseContext,
    CheckFailure,
    NonFiniteSample,
    ReferenceRaised,
    Unsupported,
    check_names,
    get_check,
)
from .compare import nonfinite_outputs
from .isolation import (
    CaseTimeout,
    TorchState,
    capture_output,
    describe_exception,
    describe_output,
    restore,
    time_limit,
    watch_user_interrupt,
)
from .options import Options, dtype_name, sample_dtype_name
from .plans import ArgLayout, Plan
from .results import (
    ERROR,
    FAIL,
    INTERNAL,
    PASS,
    TIMEOUT,
    UNSUPPORTED,
    CaseResult,
)
from .slices import SliceSource, sample_seed
from .textsafe import cap, safe_str


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
        """The advice when the plain call on this sample gives NaN or inf ("" when finite).

        Every comparison of such a sample is vacuous (NaN matches NaN), so none of its cases
        may pass. A call that raises is left to the checks, which report it.
        """
        if sample_index not in self._nonfinite:
            self._nonfinite[sample_index] = _nonfinite_call(
                self.entry, self.base_samples()[sample_index]
            )
        return self._nonfinite[sample_index]


def _nonfinite_call(entry: Entry, sample: Sample) -> str:
    args = [a.detach().clone() if isinstance(a, torch.Tensor) else a for a in sample.args]
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            out = entry.call(*args)
    except Exception:
        return ""
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
            for plan in _plans(spec, layout, options):
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


def _raised(case: Case, e: BaseException) -> tuple[str, str]:
    """(status, message) for an exception the Function raised; formats it (its __str__ runs)."""
    from .textsafe import cap, safe_repr

    if isinstance(e, SystemExit):
        code = cap(safe_repr(e.code), 200)
        return ERROR, f"the Function called sys.exit({code}): {describe_exception(e)}"
    where = f"{case.check} {case.plan.id}" if case.plan else case.check
    if isinstance(e, KeyboardInterrupt):
        return ERROR, (
            f"{where}: the Function raised KeyboardInterrupt itself (no Ctrl-C was pressed): "
            f"{describe_exception(e)}"
        )
    if not isinstance(e, Exception):
        return ERROR, (
            f"{where}: the Function raised {describe_exception(e)} (a BaseException, not an "
            "Exception)"
        )
    return blamed(e, where)  # the suite's own bug is ``internal``, never the Function's


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


def run_case(
    data: EntryData, case: Case, *, target: object = None, watch_between: bool = False
) -> CaseResult:
    """Run one case; never raises (but for the user's own Ctrl-C). Leaked state is put back.

    ``watch_between``: nothing but cases runs in this thread between two calls (a run, a
    worker), so state that changed since the previous case ended was changed by something
    else (a thread a Function started): put back, and said so without blaming this case.
    """
    options = data.options
    spec = get_check(case.check)
    result = case_record(
        case, PASS, reference=spec.reference, dtype=options_dtype(options, _sample_of(data, case))
    )
    if case.unsupported:
        result.status, result.message, result.reference = UNSUPPORTED, case.unsupported, ""
        return result
    drifted = between_cases() if watch_between else []
    # Nothing changed since the previous case ended: the state it ended with (after its
    # restore) is the state now, captured already.
    last = last_end() if watch_between and not drifted else None
    if last is not None:
        state, global_state = last
    else:
        state = TorchState.capture()
        global_state = GlobalState.capture()
    threads = set(threading.enumerate())
    others = foreign_threads(case.id)  # alive now: earlier cases' threads may act during this one
    # The previous case of this run ended in this thread and left no thread running: no
    # process can have started since its end scan.
    processes = children.at_case_start(nothing_ran_since=last is not None and not others)
    start = time.perf_counter()
    describing = False
    with (
        watch_user_interrupt() as interrupt,
        capture_output() as printed,
        watch_thread_starts(),
    ):
        try:
            with time_limit(options.timeout_s):
                try:
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
                    nonfinite = data.nonfinite(case.sample_index)
                    if nonfinite:
                        raise NonFiniteSample(nonfinite)
                    used = spec.run(ctx)
                    if used:
                        result.reference = used
                    if ctx.notes:
                        result.message = "; ".join(ctx.notes)
                except (CheckFailure, Unsupported, CaseTimeout, NonFiniteSample, ReferenceRaised):
                    raise
                except BaseException as e:
                    if isinstance(e, KeyboardInterrupt) and interrupt.seen:
                        raise
                    describing = True  # the Function's __str__ runs here, under the limit
                    result.status, result.message = _raised(case, e)
                    describing = False
        except CheckFailure as e:
            result.status, result.message = FAIL, safe_str(e)
        except Unsupported as e:
            result.status, result.message = UNSUPPORTED, safe_str(e)
        except NonFiniteSample as e:
            where = f"{case.check} {case.plan.id}" if case.plan else case.check
            result.status, result.message = ERROR, f"{where}: {safe_str(e)}"
        except ReferenceRaised as e:
            where = f"{case.check} {case.plan.id}" if case.plan else case.check
            result.status, result.message = blamed_reference(e, where)
        except CaseTimeout as e:
            result.status, result.message = TIMEOUT, str(e)
            if describing:
                result.message += (
                    "; it ran out while turning the Function's exception into text (its "
                    "__str__ or __repr__ does not return)"
                )
        finally:
            result.duration_s = time.perf_counter() - start
            leaked = restore(state)
            leaked += restore_global(global_state)
            killed = children.kill_new(processes)
            if killed:
                leaked.append(children.describe(killed))
            case_ended(state, global_state)  # what the restores just put back
            started = note_threads(case.id, threads)
    if leaked and others and not killed:
        note = (
            "note: during this case the global state changed (" + "; ".join(leaked) + ") while "
            "threads started by earlier cases were running (" + ", ".join(others[:3]) + "), so "
            "this case is not blamed for it; restored before the next case"
        )
        result.message = f"{result.message}; {note}" if result.message else note
    elif leaked and result.status != TIMEOUT:
        note = "the Function " + "; ".join(leaked) + " (restored before the next case)"
        if result.status == PASS:
            result.status = ERROR
        result.message = f"{result.message}; {note}" if result.message else note
    elif killed:
        result.message += "; " + children.describe(killed)
    if started:
        note = (
            f"note: the Function left {len(started)} thread(s) running ({', '.join(started[:3])}); "
            "state they change later is put back and reported without blaming later cases"
        )
        result.message = f"{result.message}; {note}" if result.message else note
    if drifted:
        note = (
            "note: between the previous case and this one, something other than a case (a "
            "thread a Function started?) " + "; ".join(drifted) + "; put back before this case "
            "ran, which is not blamed for it"
        )
        result.message = f"{result.message}; {note}" if result.message else note
    output_note = describe_output(printed, result.status)
    if output_note:
        result.message = f"{result.message}\n{output_note}" if result.message else output_note
    result.message = cap(result.message)
    if result.status not in (PASS, UNSUPPORTED):
        result.repro = cap(repro_command(case.id, options, target))
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
    forget_last_case()  # state changed before this run started is the caller's business
    for entry in entries:
        data = EntryData(entry, options)
        try:
            with watch_user_interrupt() as interrupt:
                cases = enumerate_cases(data)
        except BaseException as e:  # the samples callable is the user's code, as the Function
            if isinstance(e, KeyboardInterrupt) and interrupt.seen:
                raise
            r = samples_error(entry.name, e)
            results.append(r)
            if progress:
                progress(r)
            continue
        for case in cases:
            if select is not None and not select(case):
                continue
            r = run_case(data, case, target=target, watch_between=True)
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
