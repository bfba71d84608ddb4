"""Writing reports: the versioned JSON (atomically) and the Markdown summary."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections import Counter
from pathlib import Path

from .results import BAD_STATUSES, STATUSES, RunResult


def write_atomic(path: str | Path, text: str) -> None:
    """Write ``text`` so that ``path`` holds either the old file or the whole new one."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=str(p.parent))
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, p)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_json(result: RunResult, path: str | Path) -> None:
    write_atomic(path, result.to_json() + "\n")


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ").replace("<", "&lt;").replace(">", "&gt;")


def status_cell(counts: Counter[str]) -> str:
    return ", ".join(f"{counts[s]} {s}" for s in STATUSES if counts[s]) or "-"


def to_markdown(result: RunResult, *, max_failures: int = 200) -> str:
    md = result.metadata
    lines = [
        "# autograd-function-db report",
        "",
        f"**{'PASS' if result.ok else 'FAIL'}**: {result.summary_line()}",
        "",
        f"torch {md.get('torch_version', '?')} ({md.get('torch_git_version', '')[:12]}), "
        f"Python {md.get('python', '?')}, device {md.get('device', '?')}, dtype {md.get('dtype', '?')}, "
        f"seed {md.get('seed', '?')}, batch sizes {md.get('batch_sizes', '?')} "
        f"(nested {md.get('nested_batch_sizes', '?')}), wall {md.get('wall_s', '?')} s",
    ]
    if md.get("batch_size_note"):
        lines += ["", f"Batch sizes: {md['batch_size_note']}"]
    matrix = result.matrix()
    checks: list[str] = []
    for per_check in matrix.values():
        for check in per_check:
            if check not in checks:
                checks.append(check)
    lines += ["", "## Entry x check", "", "| entry | " + " | ".join(checks) + " |"]
    lines.append("|---" * (len(checks) + 1) + "|")
    for entry, per_check in matrix.items():
        cells = [status_cell(per_check.get(ch, Counter())) for ch in checks]
        lines.append(f"| {_md_escape(entry)} | " + " | ".join(cells) + " |")
    failures = [c for c in result.cases if c.status in BAD_STATUSES]
    if failures:
        lines += ["", f"## Failures ({len(failures)})", ""]
        for c in failures[:max_failures]:
            lines.append(f"- `{c.id}` **{c.status}**: {_md_escape(c.message)}")
            if c.repro:
                lines.append(f"  - reproduce: `{c.repro}`")
        if len(failures) > max_failures:
            lines.append(f"- ... and {len(failures) - max_failures} more (see the JSON report)")
    return "\n".join(lines) + "\n"


def write_markdown(result: RunResult, path: str | Path) -> None:
    write_atomic(path, to_markdown(result))
