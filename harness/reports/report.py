"""Writing reports: the versioned JSON (atomically) and the Markdown summary."""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from harness.core.refused import verdict_refusals
from harness.core.results import (
    BAD_STATUSES,
    SKIP,
    STATUSES,
    UNSUPPORTED,
    XFAIL,
    CaseResult,
    RunResult,
)
from harness.core.safe_io import output_target
from harness.core.signals import deferred_signals
from harness.core.state_notes import verdict_note
from harness.core.textsafe import visible
from harness.reports.grouping import (
    failure_groups,
    folded_text,
    headline,
    plural,
    root_cause,
    shown_groups,
)


def _file_mode(path: Path) -> int:
    """The mode a new file gets here (umask applied), or the mode of the file it replaces."""
    try:
        return path.stat().st_mode & 0o777
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def write_atomic(path: str | Path, text: str) -> None:
    """Write ``text`` so that ``path`` holds either the old file or the whole new one.

    Through a symlink the link's target is replaced (the new file is made beside it); a
    path that is a device, a FIFO or a directory is refused (UsageError), never replaced.
    Characters UTF-8 cannot carry (a lone surrogate) are written as backslash escapes.
    """
    p = output_target(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = ""
    try:
        with deferred_signals():  # once made, the temporary file is replaced in or removed
            fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=str(p.parent))
        os.chmod(tmp, _file_mode(p))  # mkstemp makes 0600; a report is as readable as any file
        with os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, p)
    except BaseException:
        with deferred_signals(), contextlib.suppress(OSError):
            if tmp:
                os.unlink(tmp)
        raise


def write_json(result: RunResult, path: str | Path) -> None:
    write_atomic(path, result.to_json() + "\n")


#: Markdown markup: emphasis, code, strikethrough, escapes, an underscore that can start
#: or end emphasis (not one inside a word, as in in_dims), and what makes a link or an
#: image: ``](`` and ``![`` (a bare ``[2, 3]`` stays as it is).
_MD_MARKUP = re.compile(r"[\\`*~]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])|!(?=\[)|\](?=\()")


#: What starts a block when it opens a line or a list item: a heading (``# x``), a list
#: item (``- x``, ``+ x``, ``1. x``, ``1) x``) or a link reference definition
#: (``[ref]: url``). (A quote, HTML, a fence or emphasis cannot: ``>``, ``<``, backticks,
#: tildes and ``*`` are escaped everywhere.)
_MD_BLOCK_START = re.compile(r"(#{1,6}|[-+]|\d{1,9}[.)])(?=[ \t]|$)|\[[^\]]*\]:")


def md_escape(text: str) -> str:
    """Markdown text, shown as itself wherever the reports put it: in a paragraph, a
    heading, a list item or a table cell, and at the start of any of them.

    Text from a Function or a report (its messages, its names, its ids) must not render
    as a heading, a quote, a list, an image, a link, emphasis, HTML or a table column,
    nor carry control characters into the reader's page. Newlines become spaces, and
    leading spaces go (four would start a code block).
    """
    text = visible(str(text)).replace("&", "&amp;").replace("\n", " ").lstrip()
    text = _MD_MARKUP.sub(lambda m: "\\" + m.group(), text)
    text = text.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")
    start = _MD_BLOCK_START.match(text)
    if start:  # "1. x" -> "1\. x"; "# x" -> "\# x"
        cut = start.end() - 1 if start.group()[0].isdigit() else 0
        text = text[:cut] + "\\" + text[cut:]
    if text.endswith("#") and not text.endswith("\\#"):
        text = text[:-1] + "\\#"  # not the closing sequence of a heading
    return text


def code_span(text: str, *, in_table: bool = False) -> str:
    """An inline code span that no backtick inside ``text`` can close early."""
    text = visible(str(text)).replace("\n", " ")
    longest = max((len(run) for run in re.findall("`+", text)), default=0)
    fence = "`" * (longest + 1)
    if not text.strip():
        return f"`{text or ' '}`"  # a span of spaces keeps them; an empty one is a space
    # a space inside each fence around a backtick, or around text that starts and ends
    # with a space (a reader takes one away on each side)
    pad = " " if longest or (text[0] == " " and text[-1] == " ") else ""
    if in_table:
        text = text.replace("|", "\\|")
    return f"{fence}{pad}{text}{pad}{fence}"


#: What a report's ``metadata.dtype`` says when every sample kept its own dtypes
#: (``harness.core.options.SAMPLE_DTYPES``; not imported here, as that imports torch).
SAMPLE_DTYPES = "samples"


def dtype_text(result: RunResult) -> str:
    """The run's dtype as a dtype: ``float32`` (never ``torch.float32``), or, when the
    samples kept their own, the dtypes the cases ran in (``float32, float64``)."""
    named = result.metadata.get("dtype")
    if isinstance(named, str) and named.strip() and named != SAMPLE_DTYPES:
        return named.strip().removeprefix("torch.")
    found = sorted({d for c in result.cases for d in (c.dtype or "").split("+") if d.strip()})
    return ", ".join(d.strip().removeprefix("torch.") for d in found) or "?"


def clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def status_cell(counts: Counter[str]) -> str:
    return ", ".join(f"{counts[s]} {s}" for s in STATUSES if counts[s]) or "-"


def check_order(result: RunResult) -> list[str]:
    """Checks in the order they first appear in the report."""
    checks: list[str] = []
    for c in result.cases:
        if c.check not in checks:
            checks.append(c.check)
    return checks


def _exercised(statuses: Counter[str]) -> bool:
    return any(n for s, n in statuses.items() if s not in (UNSUPPORTED, SKIP))


def axis_coverage(result: RunResult) -> dict[str, list[str]] | None:
    """API axis -> entries of this report tagged with it, or None where axes are unknown.

    A report may carry its own ``metadata["axes"]``; otherwise the registry's tags are used
    (only for reports of the registry itself, and only when it defines axes).
    """
    axes_map = result.metadata.get("axes")
    if not isinstance(axes_map, dict):
        if result.metadata.get("source", "afdb") != "afdb":
            return None
        try:
            from autograd_function_db import REGISTRY, axes  # type: ignore[attr-defined]

            axes_map = axes.coverage(list(REGISTRY))
        except Exception:  # no axes module yet, or a registry that cannot load here
            return None
    present = {c.entry for c in result.cases}
    return {  # a report's own axes are data from elsewhere: only lists of names count
        str(a): [e for e in names if isinstance(e, str) and e in present]
        for a, names in axes_map.items()
        if isinstance(names, list)
    }


def coverage_markdown(result: RunResult) -> list[str]:
    matrix = result.matrix()
    checks = check_order(result)
    lines = [
        "## Coverage",
        "",
        "Per check: entries that exercise it (a case neither unsupported nor skipped), and how many "
        "of those conform.",
        "",
        "| check | entries exercised | conforming | unsupported by | cases |",
        "|---|---|---|---|---|",
    ]
    for check in checks:
        per = [(e, m[check]) for e, m in matrix.items() if check in m]
        exercised = [e for e, cnt in per if _exercised(cnt)]
        conforming = [e for e, cnt in per if _exercised(cnt) and not (set(cnt) & BAD_STATUSES)]
        unsupported = [e for e, cnt in per if not _exercised(cnt)]
        cases = sum(sum(cnt.values()) for _, cnt in per)
        lines.append(
            f"| {md_escape(check)} | {len(exercised)} | {len(conforming)} | {len(unsupported)} "
            f"| {cases} |"
        )
    axes = axis_coverage(result)
    if axes:
        lines += [
            "",
            "### API axes x checks",
            "",
            "Cells: entries on the axis that conform / entries on the axis that exercise the check.",
            "",
            "| axis | entries | " + " | ".join(map(md_escape, checks)) + " |",
            "|---" * (len(checks) + 2) + "|",
        ]
        for axis, names in axes.items():
            cells = []
            for check in checks:
                cnts = [matrix[e][check] for e in names if check in matrix.get(e, {})]
                ex = [cnt for cnt in cnts if _exercised(cnt)]
                good = [cnt for cnt in ex if not (set(cnt) & BAD_STATUSES)]
                cells.append(f"{len(good)}/{len(ex)}" if ex else "-")
            lines.append(f"| {md_escape(axis)} | {len(names)} | " + " | ".join(cells) + " |")
        uncovered = [a for a, names in axes.items() if not names]
        if uncovered:
            lines += [
                "",
                "Axes with no entry in this run: " + ", ".join(map(md_escape, uncovered)),
            ]
    return lines


def metadata_markdown(md: dict[str, Any]) -> list[str]:
    torch_git = str(md.get("torch_git_version") or "")[:12]
    rows = [
        (
            "suite",
            f"{md.get('suite_version', '?')} ({md.get('suite_revision') or 'no git revision'})",
        ),
        ("torch", f"{md.get('torch_version', '?')} ({torch_git or 'no git hash'})"),
        ("python, platform", f"{md.get('python', '?')}, {md.get('platform', '?')}"),
        (
            "device, dtype, seed",
            f"{md.get('device', '?')}, {md.get('dtype', '?')}, {md.get('seed', '?')}",
        ),
        (
            "batch sizes",
            f"{md.get('batch_sizes', '?')}, nested {md.get('nested_batch_sizes', '?')}, "
            f"chunked {md.get('chunk', '?')}",
        ),
        ("plan strategy", str(md.get("plan_strategy", "?"))),
        (
            "time",
            f"{md.get('started', '?')} to {md.get('finished', '?')} ({md.get('wall_s', '?')} s)",
        ),
        ("command", code_span(" ".join(map(str, md.get("command") or [])), in_table=True)),
    ]
    if md.get("batch_size_note"):
        rows.append(("batch size note", str(md["batch_size_note"])))
    if md.get("slice_note"):
        rows.append(("identical slices", str(md["slice_note"])))
    if md.get("samples_note"):
        rows.append(("samples", str(md["samples_note"])))
    if md.get("expectations"):
        rows.append(("expectations", str(md["expectations"])))
    lines = ["| run | |", "|---|---|"]
    lines += [f"| {k} | {v if k == 'command' else md_escape(v)} |" for k, v in rows]
    return lines


def recorded_markdown(md: dict[str, Any]) -> list[str]:
    """``afdb check --recorded``'s summary sentence and one row per Function (its numbers
    are the terminal's: both come from ``metadata.recorded``)."""
    rec = md.get("recorded")
    if not isinstance(rec, dict) or not rec.get("sentence"):
        return []
    lines = ["", "## Recorded Functions", "", md_escape(str(rec["sentence"])), ""]
    lines += [f"{md_escape(str(note))}\n" for note in rec.get("notes") or ()]
    lines += ["| Function | verdict |", "|---|---|"]
    for v in rec.get("verdicts") or ():
        lines.append(f"| {md_escape(str(v.get('target')))} | {md_escape(str(v.get('line')))} |")
    return lines


def hazard_markdown(result: RunResult) -> list[str]:
    """The hazard probe's own section (only when the run had hazard cases)."""
    cases = [c for c in result.cases if c.check == "vmap_hazard"]
    if not cases:
        return []
    sizes = sorted({int((c.plan or {}).get("hazard", 0)) for c in cases} - {0})
    counts = Counter(c.status for c in cases)
    lines = [
        "",
        f"## Hazard probe ({len(cases)} cases)",
        "",
        "Batch sizes equal to sample dim sizes "
        f"({', '.join(map(str, sizes)) or '?'}), interior and last batch dims: a rule that finds "
        "the batch dim by its size picks a sample dim instead. "
        + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())),
        "",
    ]
    for c in cases:
        if c.status in BAD_STATUSES:
            lines.append(f"- {code_span(c.id)} **{c.status}**: {md_escape(clip(c.message, 300))}")
    return lines


def failures_markdown(result: RunResult, *, max_groups: int, max_message: int) -> list[str]:
    """One item per root cause: status, count, checks, the message once, ids, one repro."""
    groups = failure_groups(result.cases)
    if not groups:
        return []
    cases = sum(g.count for g in groups)
    lines = [
        "",
        f"## Failures ({plural(cases, 'case')}, {plural(len(groups), 'root cause')})",
        "",
    ]
    shown, folded = shown_groups(groups, max_groups)
    for g in shown:
        what = (
            code_span(g.first.id)
            if g.count == 1
            else f"{md_escape(g.entry)}: {md_escape(headline(g))}"
        )
        if g.follows:  # failures that follow from this one, folded in: say so
            what += f" ({md_escape(g.follows_text)})"
        lines.append(f"- **{g.status}** {what}: {md_escape(clip(g.first.message, max_message))}")
        if g.count > 1:
            lines.append(f"  - cases: {_ids_markdown([c.id for c in g.cases], shown=3)}")
        if g.repro:
            lines.append(f"  - reproduce: {code_span(g.repro)}")
    if folded:
        lines.append(f"- ... and {md_escape(folded_text(folded))} (see the JSON report)")
    return lines


def _ids_markdown(ids: list[str], shown: int = 5) -> str:
    text = ", ".join(code_span(i) for i in ids[:shown])
    return text + (f" and {len(ids) - shown} more" if len(ids) > shown else "")


def _reason_in_message(message: str) -> str:
    """The reason inside ``expected failure (REASON): ...`` (reports written before cases
    carried ``expectation``); the parenthesis that closes it is the one that balances."""
    head = "expected failure ("
    if not message.startswith(head):
        return message
    depth = 1
    for i in range(len(head), len(message)):
        depth += {"(": 1, ")": -1}.get(message[i], 0)
        if depth == 0:
            return message[len(head) : i] if message.startswith("): ", i) else message
    return message


def expected_failures_markdown(result: RunResult) -> list[str]:
    """Each expectation reason once, with how many cases it covered and which."""
    by_reason: dict[str, list[str]] = {}
    for c in result.cases:
        if c.status == XFAIL:
            reason = c.expectation or _reason_in_message(c.message)
            by_reason.setdefault(reason, []).append(c.id)
    if not by_reason:
        return []
    total = sum(map(len, by_reason.values()))
    title = f"## Expected failures ({plural(total, 'case')}, {plural(len(by_reason), 'reason')})"
    lines = ["", title, ""]
    for reason, ids in by_reason.items():
        lines.append(f"- {plural(len(ids), 'case')}: {md_escape(reason)}")
        lines.append(f"  - {_ids_markdown(ids)}")
    return lines


def unsupported_markdown(result: RunResult) -> list[str]:
    """Each distinct reason once (whole, never cut), with the entry x check it applies to."""
    by_reason: dict[str, list[str]] = {}
    shown: dict[str, str] = {}  # reasons equal up to the plan read as one (the first's words)
    pairs: set[tuple[str, str]] = set()
    for c in result.cases:
        if c.status == UNSUPPORTED and (c.entry, c.check) not in pairs:
            pairs.add((c.entry, c.check))
            key = root_cause(c)
            shown.setdefault(key, c.message)
            by_reason.setdefault(key, []).append(f"{c.entry} / {c.check}")
    if not by_reason:
        return []

    lines = [
        "",
        f"## Unsupported ({len(pairs)} entry x check, {plural(len(by_reason), 'reason')})",
        "",
    ]
    for key, where in by_reason.items():
        lines.append(f"- {md_escape(shown[key])}")
        lines.append(f"  - {', '.join(md_escape(w) for w in where)}")
    return lines


def refusals_markdown(result: RunResult) -> list[str]:
    """Per Function, the transforms it refused loudly without claiming them (its
    ``unsupported`` cases' ``double backward raises (...)``: ``harness.core.refused``)."""
    by_entry: dict[str, list[CaseResult]] = {}
    for c in result.cases:
        by_entry.setdefault(c.entry, []).append(c)
    notes = [(e, verdict_refusals(cases)) for e, cases in by_entry.items()]
    notes = [(e, n) for e, n in notes if n]
    if not notes:
        return []
    lines = ["", "## Unsupported transforms (raised or refused, never claimed)", ""]
    lines += [f"- {md_escape(e)}: {md_escape(n)}" for e, n in notes]
    return lines


def state_notes_markdown(result: RunResult) -> list[str]:
    """Per Function, the global state it left changed that the suite put back (a note on
    its cases, not a verdict: ``harness.core.state_notes``)."""
    by_entry: dict[str, list[CaseResult]] = {}
    for c in result.cases:
        by_entry.setdefault(c.entry, []).append(c)
    notes = [(e, verdict_note(cases)) for e, cases in by_entry.items()]
    notes = [(e, n) for e, n in notes if n]
    if not notes:
        return []
    lines = ["", "## Notes (state put back, not a verdict)", ""]
    lines += [f"- {md_escape(e)}: {md_escape(n)}" for e, n in notes]
    return lines


def to_markdown(result: RunResult, *, max_failures: int = 200, max_message: int = 1000) -> str:
    """The report for a PR comment: summary, metadata, entry x check matrix, failures, coverage."""
    md = result.metadata
    lines = [
        "# autograd-function-db report",
        "",
        f"**{result.verdict}**: {result.summary_line()} "
        f"(torch {md_escape(md.get('torch_version', '?'))}, {md_escape(md.get('device', '?'))}, "
        f"{md_escape(dtype_text(result))})",
    ]
    if md.get("partial"):
        lines += ["", f"> **Partial**: {md_escape(result.verdict_note())}"]
    elif md.get("interrupted"):
        lines += [
            "",
            "> **Interrupted**: this report holds only the cases that finished before the run "
            "was stopped.",
        ]
    lines += ["", *metadata_markdown(md)]
    lines += recorded_markdown(md)
    matrix = result.matrix()
    checks = check_order(result)
    lines += ["", "## Entry x check", "", "| entry | " + " | ".join(map(md_escape, checks)) + " |"]
    lines.append("|---" * (len(checks) + 1) + "|")
    for entry, per_check in matrix.items():
        cells = [status_cell(per_check.get(c, Counter())) for c in checks]
        lines.append(f"| {md_escape(entry)} | " + " | ".join(cells) + " |")
    lines += failures_markdown(result, max_groups=max_failures, max_message=max_message)
    lines += hazard_markdown(result)
    lines += expected_failures_markdown(result)
    lines += unsupported_markdown(result)
    lines += refusals_markdown(result)
    lines += state_notes_markdown(result)
    lines += ["", *coverage_markdown(result)]
    return "\n".join(lines) + "\n"


def write_markdown(result: RunResult, path: str | Path) -> None:
    write_atomic(path, to_markdown(result))
