"""The HTML report: one self-contained file (no network), a sortable, filterable case table.

At the top, the entry x check grid: one cell per entry and check, coloured by its cases
(red: not conforming; amber: expected failures; green: passes; grey: unsupported or
skipped; blank: not run). A cell whose cases differ is split, each colour in proportion
to its cases (worst on the left, every one at least a sliver wide), so one failure among
fifty passes still shows. The counts show on hover, and a click filters the case table
to that entry and check. Entries are sorted worst first. The case table groups cases by
root cause (``harness.reports.grouping``), groups collapsed; ``view=flat`` lists every case.

The page is ``templates/report.html.j2`` rendered by Jinja2 with autoescaping, so every
value from a Function, an error message or a report's metadata is text, never markup.
The stylesheet and the script are the static files ``static/report.css`` and
``static/report.js``, inlined (a report is one file that needs no network). The cases
travel as JSON inside a ``<script type="application/json">`` block (with ``<``, ``>``
and ``&`` written as ``\\u003c`` etc., so no string can close it), and the script puts
them into the DOM with ``textContent`` only. A Content-Security-Policy forbids every
load from outside. Jinja2 is imported only when a page is rendered.

The view state (filters and sort) lives in the URL hash, read at load, so a link can
point at "the failures of NumpyMul": ``report.html#status=bad&entry=NumpyMul``.
Keys: ``q`` (text in id, entry, check or message), ``status`` (a status, ``bad`` or
``notpass``), ``entry``, ``check``, ``sort`` (a column), ``dir`` (``asc``/``desc``) and
``view`` (``flat`` for one row per case instead of root-cause groups).
"""

from __future__ import annotations

import functools
import json
from collections import Counter
from importlib import resources
from pathlib import Path
from typing import Any

from harness.core.results import (
    BAD_STATUSES,
    STATUSES,
    UNSUPPORTED,
    XFAIL,
    CaseResult,
    RunResult,
    internal_first,
)
from harness.reports.grouping import group_cases
from harness.reports.report import dtype_text, write_atomic

#: Worst first: the default order of the case table.
SEVERITY = (
    "internal",
    "crash",
    "timeout",
    "error",
    "fail",
    "xpass",
    "xfail",
    "unsupported",
    "skip",
    "pass",
)
assert set(SEVERITY) == set(STATUSES)

CSP = (
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
    "img-src data:; base-uri 'none'; form-action 'none'"
)

#: The grid's colours, worst first, and the statuses each one stands for.
LEGEND = (
    ("bad", "fail, error, xpass, timeout, crash"),
    ("xfail", "expected failure"),
    ("pass", "pass"),
    ("unsupported", "unsupported or skipped"),
    ("notrun", "not run"),
)

COLUMNS = (
    ("id", "case"),
    ("entry", "entry"),
    ("check", "check"),
    ("sample", "sample"),
    ("status", "status"),
    ("message", "message"),
    ("duration_s", "seconds"),
)


def colour_of(status: str) -> str:
    """The grid colour (a ``LEGEND`` key) of one case's status."""
    if status in BAD_STATUSES:
        return "bad"
    if status == XFAIL:
        return "xfail"
    if status == "pass":
        return "pass"
    return UNSUPPORTED  # unsupported and skip


def counts_text(counts: Counter[str]) -> str:
    """``3 fail, 2 pass`` (worst first), as the grid's hover text and the entry table say."""
    return ", ".join(f"{counts[s]} {s}" for s in SEVERITY if counts[s]) or "-"


def _order(values: list[str]) -> list[str]:
    return list(dict.fromkeys(values))


def grid(cases: list[CaseResult]) -> tuple[list[str], list[dict[str, Any]]]:
    """The checks (in report order) and the grid's rows, worst entry first.

    Worst first: most non-conforming cases, then the worst status, then report order.
    Each cell has its hover text, its worst colour (``cls``) and its ``segments``:
    ``(colour, cases)`` pairs, worst first (none for a check the entry did not run).
    """
    entries = _order([c.entry for c in cases])
    checks = _order([c.check for c in cases])
    per: dict[tuple[str, str], Counter[str]] = {}
    bad: Counter[str] = Counter()
    rank = {s: i for i, s in enumerate(SEVERITY)}
    worst = dict.fromkeys(entries, len(SEVERITY))
    for c in cases:
        per.setdefault((c.entry, c.check), Counter())[c.status] += 1
        bad[c.entry] += c.status in BAD_STATUSES
        worst[c.entry] = min(worst[c.entry], rank[c.status])
    first = {e: i for i, e in enumerate(entries)}
    colours = {cls: i for i, (cls, _) in enumerate(LEGEND)}
    rows = []
    for entry in sorted(entries, key=lambda e: (-bad[e], worst[e], first[e])):
        cells = []
        for check in checks:
            counts = per.get((entry, check))
            by_colour: Counter[str] = Counter()
            for status, n in counts.items() if counts else ():
                by_colour[colour_of(status)] += n
            segments = sorted(by_colour.items(), key=lambda kv: colours[kv[0]])
            tip = counts_text(counts) if counts else "not run"
            cells.append(
                {
                    "check": check,
                    "tip": f"{entry} / {check}: {tip}",
                    "cls": segments[0][0] if segments else "notrun",
                    "segments": segments,
                }
            )
        rows.append({"entry": entry, "cells": cells})
    return checks, rows


def _script_json(obj: Any) -> str:
    """JSON that is safe inside a <script> element: no string can close or open a tag."""
    text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
    for raw, esc in (
        ("&", "\\u0026"),
        ("<", "\\u003c"),
        (">", "\\u003e"),
        ("\u2028", "\\u2028"),
        ("\u2029", "\\u2029"),
    ):
        text = text.replace(raw, esc)
    return text


def _data(result: RunResult, ranked: list[str] | None = None) -> dict[str, Any]:
    """What the page's script reads: the cases (as arrays), their root-cause groups, and
    the entries worst first (as the grid orders them)."""
    if ranked is None:
        ranked = [row["entry"] for row in grid(internal_first(result.cases))[1]]
    group_of: dict[int, int] = {}
    for g, group in enumerate(group_cases(result.cases)):
        for c in group.cases:
            group_of[id(c)] = g
    return {
        "severity": list(SEVERITY),
        "statuses": list(STATUSES),
        "bad": sorted(BAD_STATUSES),
        "ranked": ranked,
        "cases": [
            [
                c.id,
                c.entry,
                c.check,
                c.sample_name or ("" if c.sample is None else f"s{c.sample}"),
                c.status,
                c.message,
                round(c.duration_s, 6),  # as in the JSON: re-rendering is exact
                c.repro,
                c.reference,
                (c.plan or {}).get("id", ""),
                group_of[id(c)],
            ]
            for c in internal_first(result.cases)
        ],
    }


def _meta_rows(md: dict[str, Any]) -> list[tuple[str, str]]:
    rows = []
    for key, value in md.items():
        if isinstance(value, list):
            value = " ".join(map(str, value)) if key == "command" else ", ".join(map(str, value))
        rows.append((str(key), str(value)))
    return rows


def _static(name: str, element: str) -> str:
    """A shipped static file, checked so that it cannot end the element it is inlined in."""
    text = resources.files("harness.reports").joinpath("static", name).read_text("utf-8")
    if f"</{element}" in text.lower() or "<!--" in text:
        raise RuntimeError(f"harness/reports/static/{name} would end its <{element}> element")
    return text


@functools.lru_cache(maxsize=1)
def _template() -> Any:
    import jinja2  # here, not at the top: only writing HTML pays for it

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("harness.reports", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
    )
    return env.get_template("report.html.j2")


def to_html(result: RunResult) -> str:
    from markupsafe import Markup  # installed with jinja2

    md = result.metadata
    cases = internal_first(result.cases)
    checks, rows = grid(cases)
    title = f"afdb report: torch {md.get('torch_version', '?')}, {md.get('device', '?')}, {dtype_text(result)}"
    return str(
        _template().render(
            csp=CSP,
            title=title,
            verdict=result.verdict,  # PASS, FAIL, PARTIAL (a merge lacking shards) or INTERRUPTED
            partial_note=result.verdict_note() if md.get("partial") else "",
            summary=result.summary_line(),
            interrupted=bool(md.get("interrupted")),
            meta=_meta_rows(md),
            legend=LEGEND,
            checks=checks,
            grid=rows,
            columns=COLUMNS,
            # safe by construction: escaped JSON and the checked static files
            data=Markup(_script_json(_data(result, [r["entry"] for r in rows]))),
            style=Markup(_static("report.css", "style")),
            script=Markup(_static("report.js", "script")),
        )
    )


def write_html(result: RunResult, path: str | Path) -> None:
    write_atomic(path, to_html(result))
