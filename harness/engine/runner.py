"""Running cases: one case in isolation (``run_case``), the cases of many entries (``run_entries``).

One entry's way through a run: its samples (``sample_cache.EntryData``), its cases
(``cases.enumerate_cases``), each case run here, and its record (``records``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from autograd_function_db.entry import Entry, Sample
from harness.checks.catalogue import (
    CaseContext,
    CheckFailure,
    NonFiniteSample,
    ReferenceRaised,
    TorchBug,
    Unsupported,
    get_check,
    staticmethods_called,
)
from harness.checks.double_backward_alone import double_backward_raises
from harness.checks.layouts import sparse_under_vmap, unbatchable_layout
from harness.checks.own_nonfinite import own_nonfinite, own_nonfinite_message
from harness.core import shims
from harness.core.errors import CaseTimeout
from harness.core.locations import describe_exception
from harness.core.options import Options
from harness.core.results import (
    CRASH,
    ERROR,
    FAIL,
    INTERNAL,
    PASS,
    TIMEOUT,
    UNSUPPORTED,
    XFAIL,
    CaseResult,
)
from harness.core.state_notes import RESTORED, case_note, left_changed
from harness.core.textsafe import cap, safe_repr, safe_str
from harness.core.torch_warnings import load_jvp_decompositions
from harness.engine import children
from harness.engine.blame import apply_note, blamed, blamed_reference, tripped_over
from harness.engine.case_state import (
    GlobalState,
    between_cases,
    case_ended,
    foreign_threads,
    forget_last_case,
    last_end,
    note_threads,
    restore_global_split,
    watch_thread_starts,
)
from harness.engine.cases import Case, enumerate_cases
from harness.engine.hangs import running_staticmethod, staticmethod_codes
from harness.engine.isolation import (
    TorchState,
    capture_output,
    describe_output,
    restore,
    time_limit,
    watch_user_interrupt,
)
from harness.engine.records import case_record, options_dtype, repro_command, samples_error
from harness.engine.refusals import refusal
from harness.engine.sample_cache import EntryData
from harness.engine.timeouts import (
    TimeoutLedger,
    crashed_message,
    hung_message,
    not_run_message,
)
from harness.plans.plan import DtypeLeg


def _raised(case: Case, e: BaseException) -> tuple[str, str]:
    """(status, message) for an exception the Function raised; formats it (its __str__ runs)."""
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


def _sample_args(data: EntryData, index: int | None) -> tuple[Any, ...]:
    """The arguments of the case's sample, () where they cannot be had (never raises)."""
    try:
        return tuple(data.base_samples()[index].args) if index is not None else ()
    except Exception:  # noqa: BLE001 - only asked to explain an exception already caught
        return ()


def _where(case: Case, message: str) -> str:
    """``message`` preceded by the check and plan it came from."""
    where = f"{case.check} {case.plan.id}" if case.plan else case.check
    return f"{where}: {message}"


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
    result, _last_hang.name = _run_case(data, case, target=target, watch_between=watch_between)
    return result


#: The staticmethod that was running when this thread's last ``run_case`` ran out of time
#: (``name``; None when it did not): ``run_noted`` reads it after calling ``run_case``
#: through this module, so that a wrapper of ``run_case`` (a benchmark's timer, a test's
#: interrupt) still wraps every case a run runs.
_last_hang = threading.local()


def _run_case(
    data: EntryData, case: Case, *, target: object = None, watch_between: bool = False
) -> tuple[CaseResult, str | None]:
    """``run_case``, and the Function's staticmethod that was running when the case ran out
    of time (None when it did not, or none of them was running)."""
    options = data.options
    spec = get_check(case.check)
    dtype = (
        case.plan.dtype
        if isinstance(case.plan, DtypeLeg)
        else options_dtype(options, _sample_of(data, case))
    )
    result = case_record(case, PASS, reference=spec.reference, dtype=dtype)
    if case.unsupported:
        result.status, result.message, result.reference = UNSUPPORTED, case.unsupported, ""
        return result, None
    shims.install()  # torch's first uses without dynamo and sympy, where safe (idempotent)
    if data.entry.caps.jvp:  # forward mode ahead: torch's import, without its deprecations
        load_jvp_decompositions()
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
    ctx: CaseContext | None = None  # made in the case; a refusal's evidence reads it
    with (
        watch_user_interrupt() as interrupt,
        capture_output() as printed,
        watch_thread_starts(),
        children.subreaper(),  # a daemon the case starts is orphaned to us, to be killed
    ):
        limit = time_limit(options.timeout_s)
        try:
            with limit:
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
                    layout = unbatchable_layout(case.plan, tuple(ctx.sample.args))
                    if layout and case.plan is not None:  # sparse data: vmap cannot batch it
                        raise Unsupported(f"{case.check} {case.plan.id}: {layout}")
                    try:
                        used = spec.run(ctx)
                    except NonFiniteSample as vacuous:
                        # the forward is finite here (checked above): non-finite references
                        # from the Function's own rules are its failure, not the sample's
                        found = own_nonfinite(ctx, case.check)
                        if not found:
                            raise
                        where = f"{case.check} {case.plan.id}" if case.plan else case.check
                        raise CheckFailure(
                            own_nonfinite_message(where, found, safe_str(vacuous))
                        ) from None
                    if used:
                        result.reference = used
                    if ctx.notes:
                        result.message = "; ".join(ctx.notes)
                except (
                    CheckFailure,
                    Unsupported,
                    TorchBug,
                    CaseTimeout,
                    NonFiniteSample,
                    ReferenceRaised,
                ):
                    raise
                except BaseException as e:
                    if isinstance(e, KeyboardInterrupt) and interrupt.seen:
                        raise
                    describing = True  # the Function's __str__ runs here, under the limit
                    # the layout's reason first: it names the argument torch cannot batch
                    refused = sparse_under_vmap(
                        case.plan, _sample_args(data, case.sample_index), e
                    ) or refusal(
                        data.entry, case.check, e, alone=lambda: double_backward_raises(ctx)
                    )
                    if refused:  # torch refusing a transform the Function never claimed
                        result.status, result.message = UNSUPPORTED, _where(case, refused)
                    else:
                        result.status, result.message = _raised(case, e)
                        if result.status == ERROR:  # torch's apply raised: name forward
                            result.message += apply_note(data.entry.function, e)
                    describing = False
        except CheckFailure as e:
            result.status, result.message = FAIL, safe_str(e)
        except Unsupported as e:
            result.status, result.message = UNSUPPORTED, safe_str(e)
        except TorchBug as e:  # recognised by its signature: torch's, not the Function's
            result.status, result.message = XFAIL, safe_str(e)
        except NonFiniteSample as e:
            where = f"{case.check} {case.plan.id}" if case.plan else case.check
            result.status, result.message = ERROR, f"{where}: {safe_str(e)}"
        except ReferenceRaised as e:
            where = f"{case.check} {case.plan.id}" if case.plan else case.check
            result.status, result.message = blamed_reference(e, where)
        except CaseTimeout:
            result.status, result.message = TIMEOUT, limit.message()
            if describing:
                result.message += (
                    "; it ran out while turning the Function's exception into text (its "
                    "__str__ or __repr__ does not return)"
                )
        finally:
            result.duration_s = time.perf_counter() - start
            # grad mode, the default dtype, inference mode, transform levels: all change
            # what the caller's next line computes, as do autocast, the default device,
            # modes, anomaly mode and deterministic algorithms (restore_global_split)
            changing = restore(state)
            global_changing, harmless = restore_global_split(global_state)
            changing += global_changing
            leaked = changing + harmless + limit.leaks
            killed = children.kill_new(processes)
            killed_text = children.describe(killed) if killed else ""
            if killed:
                leaked.append(killed_text)
            case_ended(state, global_state)  # what the restores just put back
            started = note_threads(case.id, threads)
    if limit.expired and result.status != TIMEOUT:
        # The limit was reached, whatever became of its CaseTimeout (a frame that wrapped
        # it, a Function that caught it): never ``internal``, never the Function's ``error``.
        result.status, result.message = TIMEOUT, limit.message()
        result.message += (
            "; the case did not end with its timeout (something caught it, or wrapped it in "
            "another exception) and finished late"
        )
    hung_in = None
    if result.status == TIMEOUT and limit.deadline is not None:
        hung_in = running_staticmethod(limit.deadline.stacks, staticmethod_codes(data.entry))
        if hung_in:
            result.message += f"; `{hung_in}` was running when the time ran out"
    if leaked and others and not killed:
        note = (
            "note: during this case the global state changed (" + "; ".join(leaked) + ") while "
            "threads started by earlier cases were running (" + ", ".join(others[:3]) + "), so "
            "this case is not blamed for it; restored before the next case"
        )
        result.message = f"{result.message}; {note}" if result.message else note
    elif leaked and result.status != TIMEOUT:
        restored = [p for p in leaked if p != killed_text]
        if result.status == INTERNAL:
            # The suite's own code failed on the state the Function left: the Function's.
            note = "the Function " + "; ".join(leaked) + f" ({RESTORED})"
            result.status, result.message = ERROR, tripped_over(note, result.message)
        else:
            # State that changes what the caller's next line computes (autocast, the default
            # dtype or device, grad or inference mode, modes, anomaly, deterministic
            # algorithms) fails the case: it breaks every line after it in a user's program.
            # Other state put back (threads, cwd, signal handlers) is the suite's hygiene: a
            # note, never the case's status. Child processes it had to kill are not state
            # put back: those stay the case's error.
            if changing:
                if result.status in (PASS, UNSUPPORTED):
                    result.status = FAIL
                statement = left_changed(changing)
                result.message = f"{result.message}; {statement}" if result.message else statement
                restored = [p for p in restored if p not in changing]
            if killed_text and result.status == PASS:
                result.status = ERROR
            parts = [case_note(restored)] if restored else []
            parts += [f"the Function {killed_text}"] if killed_text else []
            note = "; ".join(parts)
            if note:
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
        result.repro = cap(
            repro_command(case.id, options, target, message=result.message, check=case.check)
        )
    return result, hung_in


def timed_out_twice(
    data: EntryData, case: Case, ledger: TimeoutLedger, target: object = None
) -> CaseResult | None:
    """The record of a case not run because an earlier timeout says it would hang (else
    None): a staticmethod it calls did not return on its sample, or its (entry, check)
    timed out twice; or (``crash``) its (entry, check) killed its worker twice."""
    if case.unsupported:
        return None
    message = ""
    hung = ledger.hung_in(case.entry, case.sample_index)
    if hung:
        called = staticmethods_called(case.check, data.entry)
        name = next((n for n in hung if n in called), None)
        if name is not None:
            message = hung_message(name, case.sample_index, *hung[name])
    status = TIMEOUT
    if not message:
        ids = ledger.exhausted(case.entry, case.check, refresh=False)
        crashed = ledger.crashed_out(case.entry, case.check)
        if ids:
            message = not_run_message(ids)
        elif crashed:
            status, message = CRASH, crashed_message(crashed)
        else:
            return None
    options = data.options
    result = case_record(
        case,
        status,
        message,
        reference=get_check(case.check).reference,
        dtype=options_dtype(options, _sample_of(data, case)),
    )
    result.repro = cap(repro_command(case.id, options, target))
    return result


def run_noted(
    data: EntryData,
    case: Case,
    ledger: TimeoutLedger,
    *,
    target: object = None,
    watch_between: bool = False,
) -> CaseResult:
    """Run ``case`` unless an earlier timeout says it would hang (``timed_out_twice``), and
    note its timeout in ``ledger``, with the staticmethod that did not return."""
    skipped = timed_out_twice(data, case, ledger, target)
    if skipped is not None:
        return skipped
    _last_hang.name = None
    r = run_case(data, case, target=target, watch_between=watch_between)
    hung_in: str | None = getattr(_last_hang, "name", None)
    _last_hang.name = None
    ledger.note(r, hung_in, data.options.timeout_s or 0.0)
    return r


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
    ledger = TimeoutLedger()
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
            r = run_noted(data, case, ledger, target=target, watch_between=True)
            results.append(r)
            if progress:
                progress(r)
    return results


__all__ = ["CheckFailure", "run_case", "run_entries", "run_noted", "timed_out_twice"]
