"""Case records: the one place a case's ``CaseResult`` is built, whoever produces it (the
runner, a worker pool that saw its worker die, the expectations that skip it), and the
``afdb repro`` command a record carries.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from typing import Any

from autograd_function_db.entry import Sample
from harness.core.locations import describe_exception, user_frame_from_dump
from harness.core.options import Options, dtype_name, sample_dtype_name
from harness.core.repro_scope import SUB_CHECKS, failing_sub_check
from harness.core.results import CRASH, ERROR, INTERNAL, TIMEOUT, CaseResult
from harness.engine.blame import classify, internal_message
from harness.engine.cases import Case
from harness.engine.isolation import DEFAULT_TIMEOUT_S


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


def not_made_record(case_id: str, entry: str, why: str) -> CaseResult:
    """The record of a case a worker could not make again (its entry, made again by
    re-running the tests, lacks it): an ``error`` "not run", with why."""
    parts = case_id.split("/")
    return CaseResult(
        id=case_id,
        entry=entry,
        check=parts[1] if len(parts) > 1 else "",
        sample=None,
        sample_name="",
        plan=None,
        status=ERROR,
        message=f"not run: {why}",
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


#: How a pool that saw its worker's exit status tells ``death_record`` the signal (a line
#: of its faults text: ``signal_line``).
SIGNAL_MARK = "afdb: the worker was ended by signal "


def signal_line(status: int) -> str:
    """The faults line for a worker's ``os.waitpid`` status ('' when no signal ended it)."""
    import os
    import signal

    if not os.WIFSIGNALED(status):
        return ""
    number = os.WTERMSIG(status)
    try:
        name = signal.Signals(number).name
    except ValueError:
        name = f"signal {number}"
    return f"{SIGNAL_MARK}{name}\n"


def death_record(case: Case, faults: str, options: Options) -> CaseResult:
    """A ``crash`` (or watchdog ``timeout``) record for a case whose worker died."""
    status = CRASH
    frame = user_frame_from_dump(faults)
    where = f" (at {frame})" if frame else ""
    if "Timeout (" in faults:
        status = TIMEOUT
        limit = options.timeout_s or DEFAULT_TIMEOUT_S
        message = (
            f"the case ran past its {limit:g} s limit without returning to Python (a hang in "
            f"native code, or signals blocked); its worker was killed{where}"
        )
    elif "Fatal Python error" in faults:
        first = next(
            (line for line in faults.splitlines() if "Fatal Python error" in line), "a fatal error"
        )
        message = f"the Function killed its process: {first.strip()}{where}"
    elif SIGNAL_MARK in faults:
        name = faults.split(SIGNAL_MARK, 1)[1].split()[0]
        message = (
            f"the Function's process was killed by {name}"
            + (" (kill -9, or the out-of-memory killer)" if name == "SIGKILL" else "")
            + "; the run went on in a fresh worker"
        )
    else:
        message = (
            "the Function ended its process without a fault report: os._exit, or a signal the "
            "fault handler cannot catch (SIGKILL: kill -9, or the out-of-memory killer); the "
            "run went on in a fresh worker"
        )
    return case_record(case, status, message, dtype=options_dtype(options))


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
