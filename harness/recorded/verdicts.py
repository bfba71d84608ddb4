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

from harness.core.results import BAD_STATUSES, CaseResult, RunResult
from harness.recorded.entries import (
    CHECKED,
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
        hit = sorted(_inputs_named(case) & never[case.entry])
        if not hit:
            continue
        which = ", ".join(map(str, hit))
        word = "argument" if len(hit) == 1 else "arguments"
        text = f"{NEEDS_NO_GRADIENT}: {word} {which} never had requires_grad in the recorded calls"
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
    from harness.engine.cases import EntryData

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
            }[r.state]
            out.append(Verdict(r.target, r.state, text, False))
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
        if r.legacy:
            text = f"legacy: eager checks only, see {LEGACY_DOC}; {text}"
        text += _fixed_note(r)
        out.append(Verdict(r.target, "legacy" if r.legacy and not bad else word, text, bad))
    return out


def _fixed_note(r: RecordedEntry) -> str:
    """The arguments that stay as recorded in every batch slice (harness.recorded.samples)."""
    fixed = getattr(getattr(r.entry, "samples", None), "fixed_args", None)
    args = fixed() if callable(fixed) else []
    if not args:
        return ""
    which = ", ".join(map(str, args))
    word = "argument" if len(args) == 1 else "arguments"
    it = "it" if len(args) == 1 else "them"
    return f"; {word} {which} as recorded in every batch slice (no call differentiated {it})"


def summary_sentence(recorded: Sequence[RecordedEntry], found: Sequence[Verdict]) -> str:
    """ "11 Functions called by 240 tests; 9 checked (7 conform, 2 fail), 1 legacy ..."."""
    from harness.reports.grouping import plural

    by_target = {v.target: v for v in found}
    called = [r for r in recorded if r.call_count or r.state not in (NEVER_CALLED,)]
    places = {p for r in recorded for p in r.places}
    tests = all("::" in p for p in places) and places
    where = (
        f" by {plural(len(places), 'test')}"
        if tests
        else (f" from {plural(len(places), 'place')}" if places else "")
    )
    checked = [r for r in called if r.state == CHECKED and not r.legacy]
    legacy = [r for r in called if r.state == CHECKED and r.legacy]
    fail = sum(by_target[r.target].failing for r in checked)
    conform = sum(by_target[r.target].word == "conforms" for r in checked)
    other = len(checked) - fail - conform
    parts = [f"{plural(len(called), 'Function')} called{where}"]
    inner = [f"{conform} conform", f"{fail} fail"] + ([f"{other} nothing checked"] if other else [])
    parts.append(f"{len(checked)} checked ({', '.join(inner)})")
    if legacy:
        lfail = sum(by_target[r.target].failing for r in legacy)
        parts.append(
            f"{len(legacy)} legacy (eager checks only" + (f", {lfail} fail" if lfail else "") + ")"
        )
    counts = Counter(r.state for r in called)
    for state, words in (
        (NOT_RECORDABLE, "not recordable"),
        (NOT_IMPORTABLE, "not importable here"),
        (NESTED_ONLY, "only called inside another Function"),
        (NOT_CHECKABLE, "not checkable (sparse or quantized arguments)"),
    ):
        if counts[state]:
            parts.append(f"{counts[state]} {words}")
    never = [r for r in recorded if r.state == NEVER_CALLED and not r.call_count]
    if never:
        parts.append(f"{len(never)} never called")
    return "; ".join(parts)


def failing(found: Sequence[Verdict]) -> bool:
    return any(v.failing for v in found)
