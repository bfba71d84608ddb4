"""Regression matrices: many reports (say, one per torch version) side by side, keyed by case id.

The wpt.fyi view of ``afdb diff``: one table with a column per run, labelled with the torch
version and device of its report's metadata, and a row per root cause of the cases whose
status is not the same in every run (a case missing from a run counts as its own status,
``absent``). Cases with one status everywhere are only counted.

Rows group as ``afdb diff`` groups its changes (``harness.reports.grouping``): one entry, one
status in each column, one root cause across checks, the cause taken from the worst of the
row's statuses (the newest run among equals). Groups come worst first: by the worst status
in the row (crash, internal, error, fail/timeout, xpass, absent, unsupported, xfail/skip),
then by how many runs do not conform, then by size, then in report order.

Rendered as Markdown, HTML (autoescaped, no text from a report is markup) and JSON
(``afdb-matrix/1``: every case of every group, with its status and message per run).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.core.results import (
    BAD_STATUSES,
    CRASH,
    ERROR,
    FAIL,
    INTERNAL,
    PASS,
    SCHEMA,
    SKIP,
    TIMEOUT,
    UNSUPPORTED,
    XFAIL,
    XPASS,
    CaseResult,
    RunResult,
)
from harness.core.schema import ReportError, check_report, schema_version
from harness.core.textsafe import visible
from harness.reports.diff import comparability_warnings, describe_run
from harness.reports.grouping import group_cases, plural
from harness.reports.html import CSP, colour_of
from harness.reports.report import clip, code_span, md_escape

#: A case that one run does not have.
ABSENT = "absent"
#: How bad each status is in a row (higher is worse); ``absent`` sits in the middle.
SEVERITY = {
    CRASH: 8,
    INTERNAL: 8,
    ERROR: 7,
    FAIL: 6,
    TIMEOUT: 6,
    XPASS: 5,
    ABSENT: 4,
    UNSUPPORTED: 3,
    XFAIL: 2,
    SKIP: 1,
    PASS: 0,
}


@dataclass(frozen=True)
class Run:
    label: str
    metadata: dict[str, Any]
    path: str = ""

    def describe(self) -> str:
        return describe_run(self.metadata)


@dataclass(frozen=True)
class MatrixRow:
    """One case id: its status and message in each run (``absent`` and "" where missing)."""

    id: str
    entry: str
    check: str
    statuses: tuple[str, ...]
    messages: tuple[str, ...]
    repro: str = ""


@dataclass(frozen=True)
class MatrixGroup:
    """Rows of one entry with the same statuses in every run and one root cause."""

    entry: str
    statuses: tuple[str, ...]
    #: The message that explains the group: its first row's, in the column ``worst`` names
    #: (the worst status of a case the run has).
    cause: str
    worst: int
    rows: tuple[MatrixRow, ...]

    @property
    def checks(self) -> list[str]:
        out: list[str] = []
        for r in self.rows:
            if r.check not in out:
                out.append(r.check)
        return out

    @property
    def repro(self) -> str:
        return next((r.repro for r in self.rows if r.repro), "")

    @property
    def first(self) -> MatrixRow:
        return self.rows[0]

    def headline(self) -> str:
        return f"{plural(len(self.rows), 'case')} in {', '.join(self.checks)}"

    def column_messages(self) -> list[str]:
        """The first row's message in each run ("" where it passed or is absent)."""
        return [
            "" if s in (PASS, ABSENT) else m
            for s, m in zip(self.first.statuses, self.first.messages)
        ]

    def sort_key(self) -> tuple[int, int, int]:
        broken = sum(s in BAD_STATUSES for s in self.statuses)
        worst = max(SEVERITY.get(s, 4) for s in self.statuses)
        return (-worst, -broken, -len(self.rows))


@dataclass
class Matrix:
    runs: list[Run]
    groups: list[MatrixGroup] = field(default_factory=list)
    #: Case ids whose status is the same in every run.
    same: int = 0
    warnings: list[str] = field(default_factory=list)
    entries: list[str] = field(default_factory=list)
    checks: list[str] = field(default_factory=list)

    @property
    def rows(self) -> int:
        return sum(len(g.rows) for g in self.groups)

    @property
    def labels(self) -> list[str]:
        return [r.label for r in self.runs]

    def scope_line(self) -> str:
        return (
            f"compared {self.same + self.rows} case ids over {len(self.entries)} entries and "
            f"{len(self.checks)} checks ({', '.join(self.checks)}) in {len(self.runs)} runs"
        )

    def summary_line(self) -> str:
        if not self.groups:
            return f"no status differs ({plural(self.same, 'case')} with one status in every run)"
        return (
            f"{plural(self.rows, 'case')} with a status that differs between runs, in "
            f"{plural(len(self.groups), 'root cause')}; {self.same} the same in every run"
        )

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "schema": "afdb-matrix/1",
            "runs": [
                {"label": r.label, "run": r.describe(), "path": r.path, "torch": _torch(r)}
                for r in self.runs
            ],
            "warnings": self.warnings,
            "counts": {"groups": len(self.groups), "rows": self.rows, "same": self.same},
            "entries": self.entries,
            "checks": self.checks,
            "groups": [
                {
                    "entry": g.entry,
                    "checks": g.checks,
                    "statuses": list(g.statuses),
                    "cause": g.cause,
                    "repro": g.repro,
                    "cases": [
                        {
                            "id": r.id,
                            "check": r.check,
                            "statuses": list(r.statuses),
                            "messages": list(r.messages),
                        }
                        for r in g.rows
                    ],
                }
                for g in self.groups
            ],
        }


def _torch(run: Run) -> str:
    return str(run.metadata.get("torch_version", "?"))


def label_of(md: dict[str, Any]) -> str:
    """``torch 2.13.0 cpu`` from a report's metadata."""
    return f"torch {md.get('torch_version', '?')} {md.get('device', '?')}"


def _labels(results: Sequence[RunResult]) -> list[str]:
    """Each run's label; a label two runs share gets ``#2``, ``#3``... after the first."""
    out: list[str] = []
    for r in results:
        base = label_of(r.metadata)
        label, n = base, 1
        while label in out:
            n += 1
            label = f"{base} #{n}"
        out.append(label)
    return out


def _worst_column(statuses: tuple[str, ...]) -> int:
    """The column whose case explains the row: the worst status of a case the run has,
    the newest run among equals."""
    present = [i for i, s in enumerate(statuses) if s != ABSENT]
    return max(present, key=lambda i: (SEVERITY.get(statuses[i], 4), i))


def build_matrix(results: Sequence[RunResult], paths: Sequence[str] = ()) -> Matrix:
    if len(results) < 2:
        raise ReportError("a matrix needs at least two reports")
    labels = _labels(results)
    paths = list(paths) + [""] * (len(results) - len(paths))
    m = Matrix([Run(lab, dict(r.metadata), p) for lab, r, p in zip(labels, results, paths)])
    by_id = [{c.id: c for c in r.cases} for r in results]
    order: dict[str, int] = {}
    for r in results:
        for c in r.cases:
            order.setdefault(c.id, len(order))
            if c.entry not in m.entries:
                m.entries.append(c.entry)
            if c.check not in m.checks:
                m.checks.append(c.check)
    # rows by their statuses in every run, each with the case that explains it
    buckets: dict[tuple[str, ...], list[tuple[MatrixRow, CaseResult]]] = {}
    for case_id in order:
        cases = [b.get(case_id) for b in by_id]
        statuses = tuple(c.status if c else ABSENT for c in cases)
        if len(set(statuses)) == 1:
            m.same += 1
            continue
        worst = cases[_worst_column(statuses)]
        assert worst is not None  # a column of a case the run has
        present = [c for c in cases if c is not None]
        row = MatrixRow(
            case_id,
            present[0].entry,
            present[0].check,
            statuses,
            tuple(c.message if c else "" for c in cases),
            worst.repro or next((c.repro for c in reversed(present) if c.repro), ""),
        )
        buckets.setdefault(statuses, []).append((row, worst))
    for statuses, members in buckets.items():
        row_of = {id(case): row for row, case in members}
        worst_col = _worst_column(statuses)
        for g in group_cases([case for _, case in members]):
            rows = tuple(sorted((row_of[id(c)] for c in g.cases), key=lambda r: order[r.id]))
            m.groups.append(MatrixGroup(g.entry, statuses, g.first.message, worst_col, rows))
    m.groups.sort(key=lambda g: (*g.sort_key(), order[g.first.id]))
    for other in results[1:]:
        for w in comparability_warnings(results[0].metadata, other.metadata):
            w = f"{labels[0]} vs {label_of(other.metadata)}: {w}"
            if w not in m.warnings:
                m.warnings.append(w)
    return m


def matrix_reports(reports: Sequence[Any], paths: Sequence[str]) -> Matrix:
    """A matrix of parsed reports; refuse different schema versions and invalid reports."""
    versions = [schema_version(r) for r in reports]
    for path, v in zip(paths[1:], versions[1:]):
        if v != versions[0] and isinstance(v, str) and isinstance(versions[0], str):
            raise ReportError(
                f"{paths[0]} is {versions[0]!r} and {path} is {v!r}: reports of different "
                f"schema versions cannot be compared; run them with the same afdb version "
                f"(this one reads {SCHEMA!r})"
            )
    for r, p in zip(reports, paths):
        check_report(r, p)
    return build_matrix([RunResult.from_json_dict(r) for r in reports], paths)


# --- rendering ----------------------------------------------------------------------------


def _md(text: str, limit: int = 400) -> str:
    return md_escape(clip(text, limit))


def _cell(status: str) -> str:
    return "\u2014" if status == ABSENT else status


def to_markdown(m: Matrix, *, max_groups: int = 200, title: str | None = None) -> str:
    labels = [_md(lab, 80) for lab in m.labels]
    lines = [
        f"# {_md(title or 'autograd-function-db regression matrix', 300)}",
        "",
        "| column | run |",
        "|---|---|",
        *(f"| {lab} | {_md(r.describe())} |" for lab, r in zip(labels, m.runs)),
        "",
        f"- {md_escape(m.scope_line())}",
        f"- {md_escape(m.summary_line())}",
        "- rows: the cases whose status is not the same in every run, grouped by root cause, "
        "worst first; \u2014: the run has no such case",
    ]
    for w in m.warnings:
        lines += ["", f"> warning: {_md(w, 1000)}"]
    if not m.groups:
        return "\n".join(lines).rstrip() + "\n"
    shown = m.groups[:max_groups]
    lines += [
        "",
        "| # | entry | cases | checks | " + " | ".join(labels) + " | root cause |",
        "|---|---|---|---|" + "---|" * len(labels) + "---|",
    ]
    for n, g in enumerate(shown, 1):
        lines.append(
            f"| {n} | {_md(g.entry, 100)} | {len(g.rows)} | {_md(', '.join(g.checks), 200)} | "
            + " | ".join(_cell(s) for s in g.statuses)
            + f" | {_md(g.cause, 160)} |"
        )
    lines += ["", "## Root causes", ""]
    for n, g in enumerate(shown, 1):
        lines += [f"### {n}. {_md(g.entry, 100)}: {_md(g.headline(), 300)}", ""]
        for lab, status, message in zip(labels, g.statuses, g.column_messages()):
            lines.append(f"- {lab}: {_cell(status)}" + (f": {_md(message)}" if message else ""))
        ids = [r.id for r in g.rows]
        more = len(ids) - 5
        lines.append(
            f"- {'case' if len(ids) == 1 else 'cases'}: "
            + ", ".join(code_span(i) for i in ids[:5])
            + (f" and {more} more" if more > 0 else "")
        )
        if g.repro:
            lines.append(f"- reproduce: {code_span(g.repro)}")
        lines.append("")
    if len(m.groups) > len(shown):
        rest = m.groups[len(shown) :]
        lines.append(
            f"... and {len(rest)} more root causes ({sum(len(g.rows) for g in rest)} cases; "
            "see `afdb matrix --json`)"
        )
    return "\n".join(lines).rstrip() + "\n"


def to_text(m: Matrix, *, max_groups: int = 30) -> str:
    """The terminal's matrix; text from the reports shows its control characters as escapes."""
    lines = [f"{lab}: {r.describe()}" for lab, r in zip(m.labels, m.runs)]
    lines.append(m.scope_line())
    lines += [f"warning: {w}" for w in m.warnings]
    for g in m.groups[:max_groups]:
        statuses = " | ".join(_cell(s) for s in g.statuses)
        lines.append(f"  [{statuses}] {g.entry}: {g.headline()}")
        if g.cause:
            lines.append(f"    {g.cause.splitlines()[0][:300]}")
    if len(m.groups) > max_groups:
        lines.append(f"  ... {len(m.groups) - max_groups} more root causes (--markdown, --json)")
    lines.append(m.summary_line())
    return "\n".join(visible(line, keep_newlines=False) for line in lines) + "\n"


def to_json(m: Matrix) -> str:
    return json.dumps(m.to_json_dict(), indent=1) + "\n"


@functools.lru_cache(maxsize=1)
def _template() -> Any:
    import jinja2  # here, not at the top: only writing HTML pays for it

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("harness.reports", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
    )
    return env.get_template("matrix.html.j2")


def to_html(m: Matrix, *, title: str | None = None, max_ids: int = 20) -> str:
    """One autoescaped page: the runs, the table, and each group's messages and case ids."""

    def cls(status: str) -> str:
        return "absent" if status == ABSENT else colour_of(status)

    groups = [
        {
            "n": n,
            "entry": g.entry,
            "count": len(g.rows),
            "checks": ", ".join(g.checks),
            "cells": [{"text": _cell(s), "cls": cls(s)} for s in g.statuses],
            "cause": clip(g.cause, 300),
            "messages": [
                {"label": lab, "status": _cell(s), "cls": cls(s), "text": clip(msg, 2000)}
                for lab, s, msg in zip(m.labels, g.statuses, g.column_messages())
            ],
            "ids": [r.id for r in g.rows[:max_ids]],
            "more": max(0, len(g.rows) - max_ids),
            "repro": g.repro,
        }
        for n, g in enumerate(m.groups, 1)
    ]
    return str(
        _template().render(
            csp=CSP,
            title=title or "autograd-function-db regression matrix",
            runs=[{"label": r.label, "describe": r.describe()} for r in m.runs],
            scope=m.scope_line(),
            summary=m.summary_line(),
            warnings=m.warnings,
            groups=groups,
        )
    )
