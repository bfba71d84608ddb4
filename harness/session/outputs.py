"""The report files a run writes, checked before it starts, and the expectations applied.

Output paths are checked before a run starts (a bad one is one line, exit 2, before any
case runs); a report that could not be written is one line after the summary.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from harness.core.errors import CliError, UsageError
from harness.core.results import RunResult

if TYPE_CHECKING:
    pass


#: The files a command reads, by the attribute argparse gives them, as a message names them.
INPUT_OPTIONS = (
    ("report", "REPORT.json"),
    ("reports", "REPORT.json"),
    ("old", "OLD.json"),
    ("new", "NEW.json"),
    ("expectations", "--expectations"),
    ("shard_durations", "--shard-durations"),
)


def _same_file_key(path: str) -> tuple[object, ...]:
    """One key per file: the same for a relative and an absolute path, a symlink and its
    target, two hard links (once the file exists)."""
    import os

    try:
        st = os.stat(path)
    except OSError:
        return ("path", os.path.normcase(os.path.realpath(path)))
    return ("inode", st.st_dev, st.st_ino)


def check_output_paths(
    args: argparse.Namespace, inputs: Sequence[tuple[str, str]] | None = None
) -> None:
    """Refuse an unwritable report path before running anything.

    Two report options naming one file (``--json r.out --markdown r.out``, or one of them
    through a symlink or a relative path) are refused, as one report would silently
    replace the other; so is a report written over a file the command reads (``inputs``:
    ``(label, path)`` pairs; by default the ones ``INPUT_OPTIONS`` finds in ``args``).
    """
    import os

    if inputs is None:
        found = []
        for attr, label in INPUT_OPTIONS:
            value = getattr(args, attr, None)
            for path in value if isinstance(value, list) else [value]:
                if isinstance(path, str) and path and path != "-":
                    found.append((label, path))
        inputs = found
    taken = {_same_file_key(path): (label, path) for label, path in inputs}
    outputs: dict[tuple[object, ...], str] = {}
    for flag in ("json", "markdown", "html", "junit"):
        path = getattr(args, flag, None)
        if not path:
            continue
        key = _same_file_key(path)
        if key in outputs:
            raise CliError(
                f"{outputs[key]} and --{flag} {path} name the same file: one report would "
                "replace the other; give each report its own path"
            )
        if key in taken:
            label, read = taken[key]
            raise CliError(
                f"--{flag} {path} would write over {read}, which this command reads "
                f"({label}); give the report another path"
            )
        outputs[key] = f"--{flag} {path}"
        parent = os.path.dirname(os.path.abspath(path)) or "."
        if os.path.isdir(path):
            raise CliError(f"--{flag} {path}: is a directory; give a file path")
        probe = parent
        while not os.path.exists(probe):
            probe = os.path.dirname(probe)
        if not os.path.isdir(probe):
            raise CliError(f"--{flag} {path}: {probe} is a file, not a directory")
        if not os.access(probe, os.W_OK):
            raise CliError(f"--{flag} {path}: cannot write there (no permission on {probe})")
        from harness.core.safe_io import output_target

        try:  # a device, a FIFO: refused now, not after the run
            output_target(path)
        except UsageError as e:
            raise CliError(f"--{flag} {e}") from None
        # absolute now: a Function that changes the working directory cannot move the reports
        setattr(args, flag, os.path.abspath(path))
        shown = dict(getattr(args, "paths_as_given", None) or {})
        shown[os.path.abspath(path)] = path  # how the closing "wrote ..." line names it
        args.paths_as_given = shown
        if flag == "json":
            args.json_as_given = path


def keep_previous_reports(result: RunResult, args: argparse.Namespace) -> list[str]:
    """An interrupted run keeps each earlier report it would replace, as NAME.previous.EXT.

    A partial report must not silently take the place of a complete one; the
    partial report is written to the path asked for, and the earlier file stays
    beside it (one line each says so). An earlier report that was itself
    interrupted (its JSON, Markdown or HTML says so) is simply replaced.
    """
    import os

    if not result.metadata.get("interrupted"):
        return []
    lines = []
    for flag in ("json", "markdown", "html", "junit"):
        path = getattr(args, flag, None)
        if not path:
            continue
        real = os.path.realpath(path)
        if not os.path.isfile(real) or os.path.getsize(real) == 0:
            continue
        if _is_interrupted_report(real, flag):
            continue
        stem, ext = os.path.splitext(real)
        kept = f"{stem}.previous{ext}"
        try:
            os.replace(real, kept)
        except OSError as e:
            raise CliError(
                f"--{flag} {path}: the run was interrupted and the earlier report could not be "
                f"kept as {kept} ({e.strerror}); nothing was written over it"
            ) from None
        lines.append(
            f"interrupted: the earlier {path} is kept as {kept}; {path} holds this partial run"
        )
    return lines


#: How a Markdown or HTML report of an interrupted run says so (harness/reports/report.py and
#: harness/reports/templates/report.html.j2).
_INTERRUPTED_MARKS = {"markdown": "> **Interrupted**", "html": '<p class="interrupted">'}


def _is_interrupted_report(path: str, flag: str) -> bool:
    """The file at ``path`` is a report of an interrupted run (JUnit XML does not say)."""
    import json

    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            if flag == "json":
                return bool(json.load(f)["metadata"]["interrupted"])
            mark = _INTERRUPTED_MARKS.get(flag)
            return mark is not None and mark in f.read(1 << 16)
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        return False


def write_reports(result: RunResult, args: argparse.Namespace) -> list[str]:
    """Write every report asked for; return one line per write that failed (disk full, ...).
    ``args.written`` lists the paths written, as the user gave them.

    One failed write does not stop the others; the caller prints the summary first, then
    these lines, and exits 2, so the results are never lost to an I/O error.
    """
    from harness.reports import report

    for line in keep_previous_reports(result, args):
        print(line, file=sys.stderr)
    failed: list[str] = []
    args.written = []
    shown = getattr(args, "paths_as_given", None) or {}

    def attempt(flag: str, path: str, write: Callable[[RunResult, str], None]) -> None:
        try:
            write(result, path)
            args.written.append(shown.get(path, path))
        except OSError as e:
            failed.append(f"--{flag} {path}: could not write the report ({e.strerror or e})")
        except UsageError as e:
            failed.append(f"--{flag} {e}")

    if getattr(args, "json", None):
        attempt("json", args.json, report.write_json)
    if getattr(args, "markdown", None):
        attempt("markdown", args.markdown, report.write_markdown)
    for flag, module, fn in (
        ("html", "harness.reports.html", "write_html"),
        ("junit", "harness.reports.junit", "write_junit"),
    ):
        path = getattr(args, flag, None)
        if path:
            attempt(flag, path, getattr(importlib.import_module(module), fn))
    return failed


def report_write_failures(args: argparse.Namespace, failed: Sequence[str]) -> None:
    """After the summary: one line per failed write (``args.write_failures`` makes it exit 2)."""
    args.write_failures = list(failed)
    for line in failed:
        print(f"afdb {getattr(args, 'command', '')}: error: {line}", file=sys.stderr)


def apply_expectations(
    result: RunResult,
    path: str | None,
    known_entries: set[str] | None = None,
    *,
    label: str | None = None,
) -> list[str]:
    """Apply the expectations file to the results; return warnings (unmatched ids).

    An expectation is stale when it names an entry the source does not have
    (``known_entries``), or an entry and check this run covered without a match;
    entries and checks the selection left out say nothing about it.
    """
    if not path:
        return []
    from harness import expectations as ex

    try:
        exps = ex.load(path)
    except ex.ExpectationsError as e:
        raise CliError(str(e)) from None
    for r in result.cases:
        ex.apply(exps, r)
    covered = {(c.entry, c.check) for c in result.cases if c.sample is not None}
    ran = {e for e, _ in covered}
    known = known_entries if known_entries is not None else {c.entry for c in result.cases}

    def stale(exp_id: str) -> bool:
        parts = exp_id.split("/")
        if parts[0] not in known:
            return True
        return parts[0] in ran and (len(parts) < 2 or (parts[0], parts[1]) in covered)

    unmatched = [e for e in exps.unmatched([c.id for c in result.cases]) if stale(e.id)]
    from harness.core.locations import portable_path

    # what the user named (a merged or temporary file goes by the files it came from)
    result.metadata["expectations"] = label or portable_path(path)
    result.metadata["unmatched_expectations"] = [e.id for e in unmatched]
    return [f"expectation {e.id!r} matches no case in this run" for e in unmatched]
