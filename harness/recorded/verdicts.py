"""After a recorded check: one line per Function, the summary sentence, and the note on a
gradient that no recorded call needs.

The lines say what was checked against what was merely seen: a Function that was never
called, whose calls could not be recorded, or whose class cannot be imported here is
listed with that reason, never counted as conforming.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from harness.core.refused import FORWARD_MODE, VMAP, verdict_refusals
from harness.core.results import BAD_STATUSES, CaseResult, RunResult
from harness.core.state_notes import verdict_note
from harness.recorded.unchecked import with_reason
from harness.sources.recorded import (
    CHECKED,
    LIVE_ONLY,
    NESTED_ONLY,
    NEVER_CALLED,
    NOT_CHECKABLE,
    NOT_IMPORTABLE,
    NOT_RECORDABLE,
    RecordedEntry,
)

#: Where the legacy-style advice lives (a line per legacy Function points there).
LEGACY_DOC = "docs/legacy-and-custom-ops.md"
#: Checks about batching only: their messages name arguments, never gradients.
_BATCHING = frozenset(
    {"vmap", "vmap_nested", "vmap_chunked", "vmap_hazard", "vmap_fallback", "contract"}
)
_PASSING = re.compile(r"passing:(\s*\[[^\]]*\])+")
_INPUT = re.compile(r"\binput (\d+)\b")
NEEDS_NO_GRADIENT = "no recorded call needs this gradient"


@dataclass(frozen=True)
class Verdict:
    """One recorded Function's outcome: ``word`` is conforms / FAIL / legacy / ... ."""

    target: str
    word: str
    line: str
    failing: bool
    legacy: bool = False


def _inputs_named(case: CaseResult) -> set[int]:
    """The inputs a failing autodiff message names (its passing sub-checks left out)."""
    return {int(m) for m in _INPUT.findall(_PASSING.sub("", case.message))}


def note_never_differentiated(
    result: RunResult, recorded: Sequence[RecordedEntry], options: Any = None
) -> int:
    """Prefix each failing autodiff case that names an input no recorded call
    differentiated: that no recorded call needs this gradient (the case stays failing: the
    gradient is still wrong, but the program may never ask for it), and what the Function
    itself does with that input (``harness.recorded.hints``): ``nondiff-args=N`` is offered
    only where no recorded call, made with N requiring grad, got a gradient for it; a
    gradient that comes in some calls and not others, or a wrong one, is named as a bug
    that declaring it away would hide. Returns how many cases were noted."""
    from harness.recorded.hints import ALWAYS, NONE, gradient_presence

    never = {r.target: set(r.never_differentiated) for r in recorded if r.never_differentiated}
    entries = {r.target: r.entry for r in recorded if r.entry is not None}
    presence: dict[tuple[str, int], tuple[str, str]] = {}

    def found(target: str, i: int) -> tuple[str, str]:
        if (target, i) not in presence:
            presence[(target, i)] = _presence(entries.get(target), i, options, gradient_presence)
        return presence[(target, i)]

    noted = 0
    for case in result.cases:
        if case.status not in BAD_STATUSES or case.check in _BATCHING or case.entry not in never:
            continue
        named = _inputs_named(case)
        hit = sorted(named & never[case.entry])
        if not hit:
            continue
        which = ", ".join(map(str, hit))
        word = "argument" if len(hit) == 1 else "arguments"
        text = f"{NEEDS_NO_GRADIENT}: {word} {which} never had requires_grad in the recorded calls"
        others = sorted(named - never[case.entry])
        if others:  # the bracket speaks of `hit` only: say the rest fails regardless
            text = (
                f"the failing values include input{'s' if len(others) > 1 else ''} "
                f"{', '.join(map(str, others))}, which the recorded calls differentiate (the "
                f"rest of this note does not apply to {'them' if len(others) > 1 else 'it'}); "
                + text
            )
        kinds = {i: found(case.entry, i) for i in hit}
        offer = [i for i in hit if kinds[i][0] == NONE]
        for i in hit:
            kind, when = kinds[i]
            if kind == ALWAYS:
                text += (
                    f"; but the Function returns a gradient for argument {i} when asked, and "
                    f"this case finds it wrong: declaring nondiff-args={i} would hide the bug"
                )
            elif kind and kind != NONE:
                text += (
                    f"; but the Function returns a gradient for argument {i} {when}: a bug in "
                    f"its backward that declaring nondiff-args={i} would hide"
                )
        if offer:
            text += (
                f"; the Function returns no gradient for argument"
                f"{'s' if len(offer) > 1 else ''} {', '.join(map(str, offer))} in any recorded "
                f"call: if it is not meant to be differentiated, declare "
                f"'{case.entry} nondiff-args={','.join(map(str, offer))}'"
            )
        case.message = f"[{text}] {case.message}"
        noted += 1
    return noted


def _presence(entry: Any, i: int, options: Any, probe: Any) -> tuple[str, str]:
    """What the Function does with argument ``i`` on its recorded calls ('' if unknown)."""
    if entry is None:
        return "", ""
    try:
        return probe(entry, _unbatched(entry, options), i)  # type: ignore[no-any-return]
    except Exception:  # noqa: BLE001 - a probe that cannot run advises nothing
        return "", ""


def _unbatched(entry: Any, options: Any) -> tuple[Any, ...]:
    """The recorded calls as the check built its unbatched samples."""
    from harness.core.options import Options
    from harness.engine.sample_cache import EntryData

    return EntryData(entry, options if options is not None else Options(dtype=None)).base_samples()


#: Checks whose failure a surrogate gradient explains (a derivative against finite differences).
_DERIVATIVE = frozenset({"vjp", "jvp", "jacrev", "jacfwd", "eager_vjp", "eager_jvp"})


def surrogate_hints(
    result: RunResult | None, recorded: Sequence[RecordedEntry], options: Any = None
) -> dict[str, str]:
    """For each Function not declared custom that fails a first-order derivative check and
    whose forward is locally constant at every recorded call while its backward is not:
    the advice for its verdict line (``harness.recorded.hints``); it stays a failure."""
    from harness.recorded.hints import looks_like_surrogate, surrogate_hint

    failing = {
        c.entry
        for c in (result.cases if result is not None else ())
        if c.status in BAD_STATUSES and c.check in _DERIVATIVE
    }
    out = {}
    for r in recorded:
        if r.entry is None or r.target not in failing or r.entry.gradient == "custom":
            continue
        try:
            if looks_like_surrogate(r.entry, _unbatched(r.entry, options)):
                out[r.target] = surrogate_hint(r.target)
        except Exception:  # noqa: BLE001
            continue
    return out


def _fail_text(cases: Sequence[CaseResult]) -> str:
    from harness.reports.grouping import failure_groups, plural

    bad = [c for c in cases if c.status in BAD_STATUSES]
    checks = list(dict.fromkeys(c.check for c in bad))
    groups = failure_groups(cases)
    causes = "one root cause" if len(groups) == 1 else plural(len(groups), "root cause")
    shown = ", ".join(checks[:6]) + (", ..." if len(checks) > 6 else "")
    extra = ""
    unneeded = sum(NEEDS_NO_GRADIENT in c.message for c in bad)
    if unneeded:
        extra = f"; {unneeded} in a gradient no recorded call needs"
    return f"FAIL: {plural(len(bad), 'case')} in {shown} ({causes}){extra}"


def verdicts(result: RunResult | None, recorded: Sequence[RecordedEntry]) -> list[Verdict]:
    """One verdict per recorded Function, in the recording's order."""
    by_entry: dict[str, list[CaseResult]] = {}
    for c in result.cases if result is not None else ():
        by_entry.setdefault(c.entry, []).append(c)
    out = []
    for r in recorded:
        if r.state != CHECKED:
            text = {
                NEVER_CALLED: "never called",
                NOT_RECORDABLE: f"not recordable: {r.note}",
                NOT_IMPORTABLE: f"not checked: {r.note}",
                NESTED_ONLY: f"not checked: {r.note}",
                NOT_CHECKABLE: f"not checked: {r.note}",
                LIVE_ONLY: f"not checked here: {r.note}",
            }[r.state]
            out.append(Verdict(r.target, r.state, with_reason(text, r), False, r.legacy))
            continue
        cases = by_entry.get(r.target, [])
        bad = any(c.status in BAD_STATUSES for c in cases)
        checked = any(c.status not in ("unsupported", "skip") for c in cases)
        if bad:
            word, text = "FAIL", _fail_text(cases)
        elif not cases:
            word, text = "not run", "not run (not selected, or the run stopped first)"
        elif not checked:
            word, text = "nothing checked", "nothing checked: every case unsupported or skipped"
        else:
            counts = Counter(c.status for c in cases)
            word, text = "conforms", f"conforms ({counts['pass'] + counts['xfail']} cases)"
        refused = verdict_refusals(cases, (VMAP, FORWARD_MODE) if r.legacy else ())
        if refused:  # loud refusals of transforms it never claimed: named, never hidden
            text = f"{text}; {refused}"
        if r.legacy:
            text = f"legacy: eager checks only, see {LEGACY_DOC}; {text}"
        if r.inside:
            text = f"{text}; from its calls inside {', '.join(r.inside)}"
        if r.live_note:
            text = f"{text}; {r.live_note}"
        text += _fixed_note(r)
        noted = verdict_note(cases)  # state it left changed, put back: a note, not a verdict
        if noted:
            text = f"{text}; {noted}"
        out.append(Verdict(r.target, word, text, bad, r.legacy))
    return out


def _fixed_note(r: RecordedEntry) -> str:
    """The arguments that stay as recorded in every batch slice (harness.sources.recorded_samples)."""
    fixed = getattr(getattr(r.entry, "samples", None), "fixed_args", None)
    args = fixed() if callable(fixed) else []
    if not args:
        return ""
    which = ", ".join(map(str, args))
    word = "argument" if len(args) == 1 else "arguments"
    it = "it" if len(args) == 1 else "them"
    return (
        f"; {word} {which} as recorded in every batch slice (the forward refused {it} with "
        "distinct values)"
    )


#: Why a reached Function could not be checked, as the summary counts it.
_NOT_CHECKABLE = {
    NOT_RECORDABLE: "not recordable",
    NOT_IMPORTABLE: "not importable here",
    NESTED_ONLY: "only called inside another Function",
    NOT_CHECKABLE: "sparse or quantized arguments",
}


def summary_counts(recorded: Sequence[RecordedEntry], found: Sequence[Verdict]) -> dict:
    """Every Function reached, counted once: the numbers the summary sentence, the JSON
    report (``metadata.recorded``) and the Markdown report say."""
    by_target = {v.target: v for v in found}
    called = [r for r in recorded if r.state != NEVER_CALLED or r.call_count]
    places = {p for r in called for p in r.places}
    verdict = [by_target[r.target] for r in called if r.state == CHECKED]
    not_checkable = Counter(_NOT_CHECKABLE[r.state] for r in called if r.state in _NOT_CHECKABLE)
    never_called = [r for r in recorded if r.state == NEVER_CALLED and not r.call_count]
    counts: dict[str, Any] = {
        "functions": len(called),
        "places": len(places),
        "tests": bool(places) and all("::" in p for p in places),
        "conform": sum(v.word == "conforms" for v in verdict),
        "fail": sum(v.failing for v in verdict),
        "legacy_conform": sum(v.word == "conforms" and v.legacy for v in verdict),
        "legacy_fail": sum(v.failing and v.legacy for v in verdict),
        "nothing_checked": sum(v.word == "nothing checked" for v in verdict),
        "not_run": sum(v.word == "not run" for v in verdict),
        "live_only": sum(r.state == LIVE_ONLY for r in called),
        "not_checkable": dict(sorted(not_checkable.items())),
        "never_called": len(never_called),
    }
    counted = (
        counts["conform"]
        + counts["fail"]
        + counts["nothing_checked"]
        + counts["not_run"]
        + counts["live_only"]
        + sum(not_checkable.values())
    )
    counts["other"] = len(called) - counted  # none: every reached Function is counted once
    return counts


def _legacy_note(n: int, of: int) -> str:
    if not n:
        return ""
    return " (all legacy: eager checks only)" if n == of else f" ({n} legacy: eager checks only)"


def summary_sentence(recorded: Sequence[RecordedEntry], found: Sequence[Verdict]) -> str:
    """ "12 Functions called by 40 tests: 2 conform, 10 fail (all legacy: eager checks
    only), 1 not called": every Function reached counted once."""
    return sentence_of(summary_counts(recorded, found))


def sentence_of(counts: dict) -> str:
    """The summary sentence of ``summary_counts``' numbers."""
    from harness.reports.grouping import plural

    n = counts["places"]
    where = (
        f" by {plural(n, 'test')}"
        if counts["tests"]
        else (f" from {plural(n, 'place')}" if n else "")
    )
    parts = [
        f"{counts['conform']} conform" + _legacy_note(counts["legacy_conform"], counts["conform"]),
        f"{counts['fail']} fail" + _legacy_note(counts["legacy_fail"], counts["fail"]),
    ]
    if counts["nothing_checked"]:
        parts.append(f"{counts['nothing_checked']} nothing checked (every case skipped)")
    if counts["not_run"]:
        parts.append(f"{counts['not_run']} not run")
    if counts["live_only"]:
        parts.append(f"{counts['live_only']} live-only (need the recording process)")
    blocked = counts["not_checkable"]
    if blocked:
        why = ", ".join(f"{k} {w}" for w, k in blocked.items())
        parts.append(f"{sum(blocked.values())} not checkable ({why})")
    if counts.get("other"):
        parts.append(f"{counts['other']} other")
    if counts["never_called"]:
        parts.append(f"{counts['never_called']} not called")
    head = f"{plural(counts['functions'], 'Function')} called{where}"
    return f"{head}: {', '.join(parts)}"


def report_metadata(recorded: Sequence[RecordedEntry], found: Sequence[Verdict]) -> dict:
    """What the JSON and Markdown reports say of the recorded Functions: the summary's
    numbers, its sentence, and one line per Function."""
    counts = summary_counts(recorded, found)
    return {
        **counts,
        "sentence": sentence_of(counts),
        "verdicts": [{"target": v.target, "verdict": v.word, "line": v.line} for v in found],
    }


def failing(found: Sequence[Verdict]) -> bool:
    return any(v.failing for v in found)
