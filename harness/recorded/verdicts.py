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

from harness.core.results import BAD_STATUSES, CaseResult, RunResult
from harness.core.state_notes import verdict_note
from harness.recorded.entries import (
    CHECKED,
    NESTED_ONLY,
    NEVER_CALLED,
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


def note_never_differentiated(result: RunResult, recorded: Sequence[RecordedEntry]) -> int:
    """Prefix each failing autodiff case that names an input no recorded call
    differentiated: that no recorded call needs this gradient (the case stays failing: the
    gradient is still wrong, but the program may never ask for it). Returns how many."""
    never = {r.target: set(r.never_differentiated) for r in recorded if r.never_differentiated}
    noted = 0
    for case in result.cases:
        if case.status not in BAD_STATUSES or case.check in _BATCHING or case.entry not in never:
            continue
        hit = sorted(_inputs_named(case) & never[case.entry])
        if not hit:
            continue
        which = ", ".join(map(str, hit))
        word = "argument" if len(hit) == 1 else "arguments"
        case.message = (
            f"[{NEEDS_NO_GRADIENT}: {word} {which} never had requires_grad in the recorded "
            f"calls; if it is not meant to be differentiated, declare "
            f"'{case.entry} nondiff-args={','.join(map(str, hit))}'] {case.message}"
        )
        noted += 1
    return noted


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
        noted = verdict_note(cases)  # state it left changed, put back: a note, not a verdict
        if noted:
            text = f"{text}; {noted}"
        out.append(Verdict(r.target, "legacy" if r.legacy and not bad else word, text, bad))
    return out


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
    ):
        if counts[state]:
            parts.append(f"{counts[state]} {words}")
    never = [r for r in recorded if r.state == NEVER_CALLED and not r.call_count]
    if never:
        parts.append(f"{len(never)} never called")
    return "; ".join(parts)


def failing(found: Sequence[Verdict]) -> bool:
    return any(v.failing for v in found)
