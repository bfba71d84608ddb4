"""The Python API: ``check(function, samples)`` and ``assert_conforms(...)``.

A user's Function becomes an ``Entry`` (capabilities read from the class,
overridable by keyword) and runs through the same runner as the database.
User samples are rarely hazard-free (3x3 rotations, pairs of points), so
unless the caller fixes batch sizes, the harness picks sizes that no sample
dimension uses and says so in the result.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import Any

import torch

from autograd_function_db.entry import (
    GRADIENT_DERIVATIVE,
    Entry,
    Tolerances,
)
from harness.core.errors import UsageError
from harness.core.options import DTYPES, Options
from harness.core.results import NOTHING_CHECKED_EXIT, CaseResult, RunResult
from harness.engine.isolation import DEFAULT_TIMEOUT_S
from harness.engine.metadata import run_metadata
from harness.engine.runner import run_entries
from harness.expectations import as_expectations
from harness.sources.batch_sizes import fitted_options
from harness.sources.entries import make_entry

#: ``prepare`` keywords that configure the run rather than describe the Function.
RUN_OPTIONS = frozenset(
    {
        "checks",
        "batch_sizes",
        "nested_batch_sizes",
        "seed",
        "dtype",
        "device",
        "tolerances",
        "timeout_s",
        "plan_cap",
        "hazard_probe",
    }
)


def target_fields(options: dict[str, Any]) -> dict[str, Any]:
    """The keywords that describe the Function (name, gradient, capabilities), for a repro target."""
    return {k: v for k, v in options.items() if k not in RUN_OPTIONS}


def check(
    function: Any,
    samples: Any,
    *,
    target: Any = None,
    expectations: Any = None,
    **options: Any,
) -> RunResult:
    """Run the checks on one Function in this process and return the results.

    ``options`` are ``prepare``'s keywords: ``checks``, ``batch_sizes``,
    ``nested_batch_sizes``, ``seed``, ``dtype``, ``device``, ``name``, ``gradient``
    ("derivative" or "custom"), ``tolerances``, ``timeout_s``, ``plan_cap``,
    ``hazard_probe`` (True adds the vmap_hazard pass), and
    capabilities that override what is read from the class (``inplace_args=(0,)``,
    ``nondiff_outputs=(1,)``, ``nondiff_args=(1, 2)`` (float arguments never
    differentiated: no tangent, cotangent or gradient for them), ``double_backward=False``,
    ``randomness=True``...), and ``dtypes=`` (``("float64",)``: the dtypes the Function
    supports; float64 samples get a float32 leg of jvp and vjp unless float32 is left out,
    ``harness.checks.dtype_leg``). ``function`` may also be a ``torch.library`` custom op.
    ``expectations`` is a path to an expectations file (or a parsed one).

    Never raises for a misbehaving Function (its cases get ``error``, ``fail`` or
    ``timeout``); raises ``UsageError`` for bad input (samples that raise or are
    empty, samples the Function raises for with no transform at all, a hazardous sample
    with fixed batch sizes, an unknown check).
    """
    entry, run_options = prepare(function, samples, **options)
    exps = as_expectations(expectations)
    if target is None:
        target = infer_target(function, samples, **target_fields(options))
    started = time.time()
    results: list[CaseResult] = []
    select = None
    if exps is not None:
        from harness.expectations import skip_result

        def select(case: Any) -> bool:
            skipped = skip_result(exps, case)
            if skipped is not None:
                results.append(skipped)
            return skipped is None

    run_entries([entry], run_options, target=target, select=select, collect=results)
    result = RunResult(
        results, run_metadata(run_options, started=started, source="user", target=str(target or ""))
    )
    if exps is not None:
        from harness.expectations import apply

        for r in result.cases:
            apply(exps, r)
        result.metadata["unmatched_expectations"] = [
            e.id for e in exps.unmatched([c.id for c in result.cases])
        ]
    return result


def prepare(
    function: Any,
    samples: Any,
    *,
    checks: Sequence[str] | None = None,
    batch_sizes: Sequence[int] | None = None,
    nested_batch_sizes: Sequence[int] | None = None,
    seed: int = 0,
    dtype: torch.dtype | str | None = None,
    device: str = "cpu",
    name: str | None = None,
    gradient: str = GRADIENT_DERIVATIVE,
    tolerances: Tolerances | None = None,
    timeout_s: float | None = DEFAULT_TIMEOUT_S,
    plan_cap: int = 16,
    hazard_probe: bool = False,
    **capabilities: Any,
) -> tuple[Entry, Options]:
    """The entry and options ``check`` runs with: samples validated, batch sizes chosen."""
    if isinstance(dtype, str):
        if dtype not in DTYPES:
            raise UsageError(f"unknown dtype {dtype!r}; use one of {', '.join(DTYPES)}")
        dtype = DTYPES[dtype]
    if checks is not None:
        from harness.checks.catalogue import check_names

        known = check_names()
        for c in checks:
            if c not in known:
                raise UsageError(f"unknown check {c!r}; known checks: {', '.join(known)}")
    entry = make_entry(
        function, samples, name=name, gradient=gradient, tolerances=tolerances, **capabilities
    )
    options = Options(
        checks=tuple(checks) if checks else None,
        seed=seed,
        dtype=dtype,
        device=device,
        timeout_s=timeout_s,
        plan_cap=plan_cap,
        hazard_probe=bool(hazard_probe),
    )
    if batch_sizes is not None:
        sizes = _sizes(batch_sizes, "batch_sizes")
        options = options.replace(batch_sizes=sizes)
    if nested_batch_sizes is not None:
        sizes = _sizes(nested_batch_sizes, "nested_batch_sizes")
        if len(set(sizes)) != len(sizes) or len(sizes) < 2:
            raise UsageError("nested batch sizes need two or more different sizes, e.g. (2, 3)")
        options = options.replace(nested_batch_sizes=sizes)
    options = fitted_options(  # samples that cannot call the Function: UsageError
        entry,
        options,
        fixed_single=batch_sizes is not None,
        fixed_nested=nested_batch_sizes is not None,
    )
    return entry, options


def _sizes(values: Any, what: str) -> tuple[int, ...]:
    if isinstance(values, int):
        values = (values,)
    try:
        sizes = tuple(int(b) for b in values)
    except (TypeError, ValueError):
        raise UsageError(f"{what} must be integers >= 2, got {values!r}") from None
    if not sizes or any(b < 2 for b in sizes):
        raise UsageError(
            f"{what} must be integers >= 2 (a batch of 1 hides batching bugs), got {list(sizes)}"
        )
    return sizes


def _importable(obj: Any) -> str | None:
    """``module:qualname`` (or ``path/file.py:qualname`` for __main__) when ``obj`` can be reimported."""
    import sys

    module = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None)
    if not module or not qualname or "<" in qualname:
        return None
    mod = sys.modules.get(module)
    if mod is None:
        return None
    if module == "__main__" or getattr(mod, "__spec__", None) is None:
        from harness.core.locations import portable_path

        path = getattr(mod, "__file__", None)
        return f"{portable_path(os.path.abspath(path))}:{qualname}" if path else None
    return f"{module}:{qualname}"


def infer_target(function: Any, samples: Any, **fields: Any) -> Any:
    """A TargetSpec for a Python-API call, so repro commands name the user's module; else None."""
    from harness.sources.target import TargetSpec

    target = _importable(function)
    if target is None:
        return None
    samples_spec = _importable(samples) if callable(samples) else None
    if samples_spec is None and not isinstance(samples, (list, tuple)):
        return None
    if samples_spec is None:
        return None  # literal sample lists cannot be named on a command line
    caps = {k: v for k, v in fields.items() if k not in ("name", "gradient")}
    return TargetSpec(
        target,
        samples_spec,
        gradient=fields.get("gradient") or GRADIENT_DERIVATIVE,
        capabilities=caps,
        name=fields.get("name"),
    )


def format_failures(result: RunResult, *, limit: int = 20) -> str:
    """The non-conforming cases as the CLI prints them: one block per root cause (its
    message first, then its checks, its first case ids and the command that reproduces
    one), at most ``limit`` blocks, then how many more."""
    from harness.reports.grouping import failure_groups, plural, terminal_lines

    if result.ok and result.nothing_checked and not result.metadata.get("interrupted"):
        return nothing_checked_message(result)
    bad = result.failures()
    groups = failure_groups(result.cases)
    entries = sorted({c.entry for c in bad})
    who = entries[0] if len(entries) == 1 else f"{len(entries)} entries"
    lines = [
        f"{who}: {len(bad)} of {plural(len(result.cases), 'case')} do not conform, "
        f"{plural(len(groups), 'root cause')}:"
    ]
    lines += terminal_lines(groups, limit=limit)
    lines.append(verdict_line(result))
    return "\n".join(lines)


def nothing_checked_message(result: RunResult) -> str:
    """Why a run that checked nothing does not conform: its reasons, most common first."""
    from collections import Counter

    if not result.cases:
        return "nothing checked: the run has no cases (the selected checks make none here)"
    reasons = Counter(c.message for c in result.cases)
    lines = [
        f"nothing checked: all {len(result.cases)} cases are unsupported or skipped, so the "
        "Function was not checked at all:"
    ]
    for message, n in reasons.most_common(5):
        lines.append(f"- {n} case(s): {message}")
    return "\n".join(lines)


LEGACY_NOTE = (
    "torch.func transforms (vmap, grad, jvp, vjp, jacrev, ...) are unsupported for {what} "
    "legacy forward(ctx, ...): to support them, move the ctx work out of forward into a "
    "@staticmethod setup_context(ctx, inputs, output) and add a vmap staticmethod or "
    "generate_vmap_rule = True (`afdb migrate TARGET` does it and verifies it against the "
    "original, docs/migrating.md); {eager}"
)
EAGER_CHECKS = ("eager_vjp", "eager_jvp", "eager_vjp_of_vjp")
EAGER_CHECKED = "eager autograd was checked instead ({checked})"
EAGER_NOT_RUN = "its eager autograd is checked by eager_vjp, eager_jvp and eager_vjp_of_vjp"


def _eager_words(result: RunResult, legacy: set[str]) -> str:
    """What the legacy note says of the eager checks: those that checked something, and
    those that did not (unsupported, skipped) apart; never a check that was not run."""
    from harness.core.results import NOT_CHECKED

    ran: dict[str, bool] = {}
    for c in result.cases:
        if c.check.startswith("eager_") and c.entry in legacy:
            ran[c.check] = ran.get(c.check, False) or c.status not in NOT_CHECKED
    checked = [c for c in ran if ran[c]]
    if not checked:
        if ran:  # every eager case unsupported or skipped
            return f"its eager checks ({', '.join(ran)}) checked nothing here (see their reasons)"
        return EAGER_NOT_RUN
    words = EAGER_CHECKED.format(checked=", ".join(checked))
    idle = [c for c in ran if not ran[c]]
    return words + (f"; {', '.join(idle)} checked nothing (see the reasons)" if idle else "")


def no_derivative_note(result: RunResult) -> str:
    """``no derivative checked (REASON)`` when the run checked something but every case of a
    check that differentiates was unsupported or skipped (integer-only samples); else ""."""
    from collections import Counter

    from harness.checks.catalogue import CHECKS
    from harness.core.results import NOT_CHECKED

    if result.nothing_checked:
        return ""
    ad = [
        c
        for c in result.cases
        if c.check in CHECKS and CHECKS[c.check].family in ("autodiff", "eager")
    ]
    if not ad or any(c.status not in NOT_CHECKED for c in ad):
        return ""
    reason = Counter(c.message.split("\n", 1)[0] for c in ad).most_common(1)[0][0]
    from harness.reports.grouping import clip_words

    return f"no derivative checked ({clip_words(reason, 160)})"


def implied_refusals(cases: Any) -> tuple[str, ...]:
    """The transforms a legacy ``forward(ctx, ...)`` Function's style already rules out (vmap,
    forward mode under torch.func): its verdict line need not name them."""
    from harness.checks.catalogue import LEGACY_FIX
    from harness.core.refused import FORWARD_MODE, LEGACY_CLAIMS_NO, VMAP

    legacy = any(c.message == LEGACY_FIX or LEGACY_CLAIMS_NO in c.message for c in cases)
    return (VMAP, FORWARD_MODE) if legacy else ()


def verdict_line(result: RunResult) -> str:
    """``PASS: 68 cases: 16 pass, 52 unsupported``, the transforms the Function refused loudly
    though it never claimed them (``double backward raises (...)``: ``harness.core.refused``),
    and ``; no derivative checked (...)``
    when no check that differentiates compared anything, and the global state the Function
    left changed (``harness.core.state_notes``: put back, a note, not a verdict)."""
    from harness.core.refused import verdict_refusals
    from harness.core.state_notes import verdict_note

    line = f"{result.verdict}: {result.summary_line()}"
    refused = verdict_refusals(result.cases, implied_refusals(result.cases))
    notes = [n for n in (refused, no_derivative_note(result), verdict_note(result.cases)) if n]
    return "; ".join([line, *notes])


def summary_notes(result: RunResult) -> list[str]:
    """One-line notes for the end of a run's summary: legacy Functions (what torch.func
    needs), custom ops torch.func refused, and a run that checked nothing."""
    from harness.checks.catalogue import LEGACY_FIX, TORCH_FUNC_REFUSAL

    notes = []
    legacy = sorted({c.entry for c in result.cases if c.message == LEGACY_FIX})
    if legacy:
        what = (
            "this Function's"
            if len({c.entry for c in result.cases}) == 1
            else f"{len(legacy)} Functions' ({', '.join(legacy[:5])}{', ...' if len(legacy) > 5 else ''})"
        )
        notes.append(LEGACY_NOTE.format(what=what, eager=_eager_words(result, set(legacy))))
    refused = sorted(
        {
            c.entry
            for c in result.cases
            if c.status == "unsupported" and TORCH_FUNC_REFUSAL in c.message
        }
    )
    if refused:
        notes.append(
            f"torch.func refused to differentiate {', '.join(refused[:5])}"
            f"{', ...' if len(refused) > 5 else ''} (no setup_context: a torch.library "
            "register_autograd rule in this torch); eager autograd was checked instead"
        )
    if result.ok and result.nothing_checked and not result.metadata.get("interrupted"):
        notes.append(
            "nothing checked: every case is unsupported or skipped, so this run does not "
            f"conform (exit {NOTHING_CHECKED_EXIT})"
        )
    return notes


def assert_conforms(function: Any, samples: Any, **options: Any) -> RunResult:
    """Run ``check`` and raise AssertionError with the failures grouped by root cause, each
    with its repro command (``format_failures``), or saying "nothing checked" when no case
    was checked (all unsupported or skipped)."""
    result = check(function, samples, **options)
    if not result.conforms:
        raise AssertionError(format_failures(result))
    return result
