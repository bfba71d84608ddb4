"""Regression diffs between two reports (say, two torch builds), keyed by case id.

Categories, each rendered (text, Markdown) grouped by root cause as a run's failures are
(``harness.reports.grouping``: one entry, one status change, one cause across checks;
``added`` and ``removed`` by entry and check); the JSON lists every case:

- regressed: ``pass`` before, ``fail``/``error``/``crash``/``timeout`` now (exit status 1);
- fixed: one of those (or ``xfail``) before, ``pass``/``xpass`` now;
- newly unsupported: any other status before, ``unsupported`` now;
- added / removed: case ids only in the new / only in the old report;
- changed messages: not conforming (or xfail, or unsupported) in both, with another status
  or message;
- other status changes: everything else that moved (``unsupported`` -> ``pass``, ...).

Messages are compared with their source locations normalised (``vmap.py:#``): the same
run in two virtual environments, on two machines or with torch's lines moved gives the
same text. A case whose message changed only there is unchanged; the diff says how many
such cases there were in one count line.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from harness.core.locations import normalise_locations
from harness.core.results import (
    CRASH,
    ERROR,
    FAIL,
    PASS,
    SCHEMA,
    STATUSES,
    TIMEOUT,
    UNSUPPORTED,
    XFAIL,
    XPASS,
    CaseResult,
    RunResult,
)
from harness.core.schema import ReportError, check_report, schema_version
from harness.core.textsafe import visible
from harness.reports.grouping import group_cases, plural
from harness.reports.report import clip, code_span, md_escape

BROKEN = frozenset({FAIL, ERROR, CRASH, TIMEOUT})
FAILING = BROKEN | {XFAIL, XPASS}

CATEGORIES = (
    ("regressed", "Regressed", "passed before, does not conform now"),
    ("fixed", "Fixed", "failed before, passes now"),
    ("newly_unsupported", "Newly unsupported", "ran before, unsupported now"),
    (
        "changed",
        "Changed failure messages",
        "not conforming (or unsupported) in both, with another status or message",
    ),
    ("other", "Other status changes", ""),
    ("added", "Added", "only in the new report"),
    ("removed", "Removed", "only in the old report"),
)

#: Metadata that makes two runs incomparable case by case when it differs.
COMPARABLE_KEYS = ("device", "dtype", "seed", "batch_sizes", "nested_batch_sizes", "chunk")


@dataclass
class Change:
    id: str
    entry: str
    check: str
    old_status: str | None
    new_status: str | None
    old_message: str = ""
    new_message: str = ""
    repro: str = ""
    #: The case as the report that explains the change has it (the new one, or the old one
    #: for a case fixed or removed): what the change is grouped by. Not in the JSON.
    case: CaseResult | None = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "case"}


@dataclass
class ReportDiff:
    old_meta: dict[str, Any]
    new_meta: dict[str, Any]
    regressed: list[Change] = field(default_factory=list)
    fixed: list[Change] = field(default_factory=list)
    newly_unsupported: list[Change] = field(default_factory=list)
    changed: list[Change] = field(default_factory=list)
    other: list[Change] = field(default_factory=list)
    added: list[Change] = field(default_factory=list)
    removed: list[Change] = field(default_factory=list)
    unchanged: int = 0
    #: Of the unchanged cases, those whose messages differ only in source locations.
    location_only: int = 0
    warnings: list[str] = field(default_factory=list)
    #: What was compared: entries and checks present in either report.
    entries: list[str] = field(default_factory=list)
    checks: list[str] = field(default_factory=list)

    def scope_line(self) -> str:
        return (
            f"compared {self.unchanged + sum(self.counts().values())} case ids over "
            f"{len(self.entries)} entries and {len(self.checks)} checks ({', '.join(self.checks)})"
        )

    @property
    def has_regressions(self) -> bool:
        return bool(self.regressed)

    def category(self, name: str) -> list[Change]:
        changes: list[Change] = getattr(self, name)
        return changes

    def counts(self) -> dict[str, int]:
        return {name: len(self.category(name)) for name, _, _ in CATEGORIES}

    @property
    def empty(self) -> bool:
        return not any(self.counts().values())

    def location_line(self) -> str:
        """The one line about messages that moved only in their source locations ('' if none)."""
        if not self.location_only:
            return ""
        return (
            f"{self.location_only} of the unchanged cases have messages that differ only in "
            "source locations (file paths, line numbers)"
        )

    def summary_line(self) -> str:
        if self.empty:
            return f"no change ({self.unchanged} cases with the same status and message)"
        parts = [
            f"{n} {label.lower()}"
            for (name, label, _), n in zip(CATEGORIES, self.counts().values())
            if n
        ]
        return ", ".join(parts) + f"; {self.unchanged} unchanged"

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "schema": "afdb-diff/1",
            "old": describe_run(self.old_meta),
            "new": describe_run(self.new_meta),
            "warnings": self.warnings,
            "counts": {
                **self.counts(),
                "unchanged": self.unchanged,
                "location_only": self.location_only,
            },
            "entries": self.entries,
            "checks": self.checks,
            **{name: [c.to_dict() for c in self.category(name)] for name, _, _ in CATEGORIES},
        }


def describe_run(md: dict[str, Any]) -> str:
    """One line naming the run a report came from (torch, device, dtype, suite version): the
    heading of each side of a diff and of each column of a matrix."""
    return (
        f"torch {md.get('torch_version', '?')} ({str(md.get('torch_git_version') or '')[:12] or 'no git hash'}), "
        f"{md.get('device', '?')}, {md.get('dtype', '?')}, suite {md.get('suite_version', '?')}"
        f"{' (' + md['suite_revision'] + ')' if md.get('suite_revision') else ''}"
    )


def same_message(old: str, new: str) -> bool:
    """Equal once source locations are normalised (see the module docstring)."""
    return old == new or normalise_locations(old) == normalise_locations(new)


def _classify(old: CaseResult, new: CaseResult) -> str | None:
    a, b = old.status, new.status
    if a == b and same_message(old.message, new.message):
        return None
    if a == PASS and b in BROKEN:
        return "regressed"
    if a in BROKEN | {XFAIL} and b in (PASS, XPASS):
        return "fixed"
    if b == UNSUPPORTED and a != UNSUPPORTED:
        return "newly_unsupported"
    if a in FAILING and b in FAILING:
        return "changed"
    if a == b:  # same non-failing status, another message (an unsupported reason, a note)
        return "changed" if a == UNSUPPORTED else None
    return "other"


def diff_results(old: RunResult, new: RunResult) -> ReportDiff:
    d = ReportDiff(dict(old.metadata), dict(new.metadata))
    old_by_id = {c.id: c for c in old.cases}
    new_by_id = {c.id: c for c in new.cases}
    for c in new.cases:
        before = old_by_id.get(c.id)
        if before is None:
            d.added.append(
                Change(c.id, c.entry, c.check, None, c.status, "", c.message, c.repro, c)
            )
            continue
        kind = _classify(before, c)
        if kind is None:
            d.unchanged += 1
            d.location_only += before.message != c.message
        else:
            d.category(kind).append(
                Change(
                    c.id,
                    c.entry,
                    c.check,
                    before.status,
                    c.status,
                    before.message,
                    c.message,
                    c.repro,
                    before if kind == "fixed" else c,
                )
            )
    for c in old.cases:
        if c.id not in new_by_id:
            d.removed.append(Change(c.id, c.entry, c.check, c.status, None, c.message, "", "", c))
    d.warnings = comparability_warnings(old.metadata, new.metadata)
    for c in [*old.cases, *new.cases]:
        if c.entry not in d.entries:
            d.entries.append(c.entry)
        if c.check not in d.checks:
            d.checks.append(c.check)
    return d


def comparability_warnings(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    out = []
    if old.get("suite_version") != new.get("suite_version"):
        out.append(
            f"suite versions differ (old {old.get('suite_version')}, new {new.get('suite_version')}):"
            " case ids and checks may have changed between them, so added, removed and changed"
            " cases may come from the suite, not from torch"
        )
    for key in COMPARABLE_KEYS:
        if old.get(key) != new.get(key):
            out.append(
                f"{key} differs (old {old.get(key)!r}, new {new.get(key)!r}): the runs test different things"
            )
    for label, md in (("old", old), ("new", new)):
        if md.get("interrupted"):
            out.append(
                f"the {label} report was interrupted: the cases it did not reach show as "
                f"{'removed' if label == 'new' else 'added'}"
            )
    return out


def diff_reports(old: Any, new: Any, old_path: str, new_path: str) -> ReportDiff:
    """Diff two parsed reports; refuse different schema versions and invalid reports."""
    versions = [schema_version(old), schema_version(new)]
    if versions[0] != versions[1] and all(isinstance(v, str) for v in versions):
        raise ReportError(
            f"{old_path} is {versions[0]!r} and {new_path} is {versions[1]!r}: reports of different "
            f"schema versions cannot be compared; run both with the same afdb version "
            f"(this one reads {SCHEMA!r})"
        )
    check_report(old, old_path)
    check_report(new, new_path)
    return diff_results(RunResult.from_json_dict(old), RunResult.from_json_dict(new))


# --- rendering ----------------------------------------------------------------------------


def _md(text: str, limit: int = 400) -> str:
    return md_escape(clip(text, limit))


def _grouped(changes: list[Change]) -> dict[tuple[str, str], list[Change]]:
    groups: dict[tuple[str, str], list[Change]] = {}
    for c in changes:
        groups.setdefault((c.entry, c.check), []).append(c)
    return groups


@dataclass(frozen=True)
class ChangeGroup:
    """Changes of one entry with one status change and one root cause (``harness.reports.
    grouping``: the message that explains them, across checks), in report order."""

    entry: str
    old_status: str | None
    new_status: str | None
    changes: tuple[Change, ...]

    @property
    def first(self) -> Change:
        return self.changes[0]

    @property
    def checks(self) -> list[str]:
        out: list[str] = []
        for c in self.changes:
            if c.check not in out:
                out.append(c.check)
        return out

    @property
    def repro(self) -> str:
        return next((c.repro for c in self.changes if c.repro), "")

    def headline(self) -> str:
        return f"{plural(len(self.changes), 'case')} in {', '.join(self.checks)}"

    def ids(self, shown: int = 3) -> tuple[list[str], int]:
        ids = [c.id for c in self.changes]
        return ids[:shown], max(0, len(ids) - shown)


def cause_groups(changes: list[Change]) -> list[ChangeGroup]:
    """``changes`` grouped by entry, status change and root cause, as a run's failures are
    (``group_cases``), in the order of each group's first change."""
    by_move: dict[tuple[str | None, str | None], list[Change]] = {}
    for c in changes:
        by_move.setdefault((c.old_status, c.new_status), []).append(c)
    place = {id(c): n for n, c in enumerate(changes)}
    out: list[ChangeGroup] = []
    for (old, new), moved in by_move.items():
        stand_ins = [c.case or _stand_in(c) for c in moved]
        change_of = {id(case): c for case, c in zip(stand_ins, moved)}
        for g in group_cases(stand_ins):
            members = tuple(sorted((change_of[id(k)] for k in g.cases), key=lambda c: place[id(c)]))
            out.append(ChangeGroup(members[0].entry, old, new, members))
    out.sort(key=lambda g: place[id(g.first)])
    return out


def _stand_in(c: Change) -> CaseResult:
    """A case for a change built without one (its id, check, status and message)."""
    status = c.new_status or c.old_status or ""
    message = c.new_message if c.new_status and c.new_message else c.old_message
    return CaseResult(c.id, c.entry, c.check, None, "", None, status, message)


def _status_counts(changes: list[Change], attr: str) -> str:
    counts = Counter(getattr(c, attr) for c in changes)
    return ", ".join(f"{counts[s]} {s}" for s in STATUSES if counts[s])


def to_markdown(d: ReportDiff, *, max_cases: int = 100, title: str | None = None) -> str:
    lines = [
        f"# {title or 'autograd-function-db regression report'}",
        "",
        f"- old: {_md(describe_run(d.old_meta))}",
        f"- new: {_md(describe_run(d.new_meta))}",
        f"- {md_escape(d.scope_line())}",
        "",
        f"**{'REGRESSED' if d.has_regressions else 'NO REGRESSION'}**: {d.summary_line()}",
    ]
    for w in d.warnings:
        lines += ["", f"> warning: {_md(w, 1000)}"]
    if d.location_line():
        lines += ["", md_escape(d.location_line()) + "."]
    lines += ["", "| category | cases |", "|---|---|"]
    lines += [f"| {label} | {len(d.category(name))} |" for name, label, _ in CATEGORIES]
    lines.append(f"| unchanged | {d.unchanged} |")
    for name, label, what in CATEGORIES:
        changes = d.category(name)
        if not changes:
            continue
        lines += ["", f"## {label} ({len(changes)})", ""]
        if what:
            lines += [f"{what.capitalize()}.", ""]
        groups = _grouped(changes)
        if name in ("added", "removed"):
            attr = "new_status" if name == "added" else "old_status"
            lines += ["| entry | check | cases | statuses |", "|---|---|---|---|"]
            for (entry, check), cs in groups.items():
                lines.append(
                    f"| {_md(entry)} | {_md(check)} | {len(cs)} | {_status_counts(cs, attr)} |"
                )
            continue
        shown = 0
        for g in cause_groups(changes):
            if shown >= max_cases:
                break
            shown += 1
            first = g.first
            lines += [
                f"### {_md(g.entry)}: {_md(g.headline())}, {g.old_status} -> {g.new_status}",
                "",
            ]
            if first.old_message and first.old_message != first.new_message:
                lines.append(f"- before: {_md(first.old_message)}")
            if first.new_message:
                lines.append(f"- now: {_md(first.new_message)}")
            ids, more = g.ids(5)
            lines.append(
                f"- {'case' if len(g.changes) == 1 else 'cases'}: "
                + ", ".join(code_span(i) for i in ids)
                + (f" and {more} more" if more else "")
            )
            if g.repro and g.new_status in FAILING:
                lines.append(f"- reproduce: {code_span(g.repro)}")
            lines.append("")
        rest = cause_groups(changes)[shown:]
        if rest:
            lines.append(
                f"... and {len(rest)} more root causes "
                f"({sum(len(g.changes) for g in rest)} cases; see `afdb diff --json`)"
            )
    text = "\n".join(lines).rstrip() + "\n"
    while "\n\n\n" in text:
        text = text.replace("\n\n\n", "\n\n")
    return text


def to_text(d: ReportDiff, *, max_cases: int = 30) -> str:
    """The terminal's diff; text from the reports shows its control characters as escapes."""
    lines = [f"old: {describe_run(d.old_meta)}", f"new: {describe_run(d.new_meta)}", d.scope_line()]
    lines += [f"warning: {w}" for w in d.warnings]
    for name, label, _ in CATEGORIES:
        changes = d.category(name)
        if not changes or name in ("added", "removed"):
            continue
        groups = cause_groups(changes)
        lines.append(
            f"{label} ({plural(len(changes), 'case')}, {plural(len(groups), 'root cause')}):"
        )
        for g in groups[:max_cases]:
            first = g.first
            if len(g.changes) == 1:
                lines.append(f"  {first.id}: {first.old_status} -> {first.new_status}")
            else:
                lines.append(
                    f"  {g.entry}: {g.headline()}, {g.old_status} -> {g.new_status} "
                    "(one root cause)"
                )
            if first.new_message and first.new_status in FAILING:
                lines.append(f"    {first.new_message.splitlines()[0][:300]}")
            if len(g.changes) > 1:
                ids, more = g.ids()
                lines.append(f"    cases: {', '.join(ids)}" + (f" and {more} more" if more else ""))
        if len(groups) > max_cases:
            rest = groups[max_cases:]
            lines.append(
                f"  ... {plural(len(rest), 'more root cause')} "
                f"({plural(sum(len(g.changes) for g in rest), 'case')})"
            )
    for name in ("added", "removed"):
        if d.category(name):
            lines.append(
                f"{name.capitalize()}: {len(d.category(name))} cases in "
                f"{len(_grouped(d.category(name)))} entry x check groups"
            )
    if d.location_line():
        lines.append(d.location_line())
    lines.append(f"{'REGRESSED' if d.has_regressions else 'NO REGRESSION'}: {d.summary_line()}")
    return "\n".join(visible(line, keep_newlines=False) for line in lines) + "\n"


def to_json(d: ReportDiff) -> str:
    return json.dumps(d.to_json_dict(), indent=1) + "\n"
