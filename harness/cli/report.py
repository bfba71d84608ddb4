"""``afdb report`` (render an existing JSON report) and ``afdb diff`` (regression diff) and
``afdb matrix`` (many reports side by side).

Both read reports through ``harness.core.schema``: a file that is not a valid
``afdb-report/1`` report is refused with the path of the offending field.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any


def add_parsers(sub: Any) -> None:
    p = sub.add_parser(
        "report",
        help="render an existing JSON report as HTML, Markdown or JUnit XML",
        description="Validate a JSON report and render it. Without an output option, print the "
        "Markdown to stdout. Exit status 0 once rendered, whatever the report's verdict.",
    )
    p.add_argument("report", metavar="REPORT.json")
    p.add_argument("--html", help="write the HTML report here")
    p.add_argument("--markdown", help="write the Markdown report here ('-' for stdout)")
    p.add_argument("--junit", help="write JUnit XML here")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser(
        "diff",
        help="regression report between two JSON reports (exit 1 when anything regressed)",
        description="Compare two reports case by case: regressed, fixed, newly unsupported, "
        "changed failure messages, added and removed cases, each grouped by root cause. "
        "Exit status 1 when a case regressed (pass -> fail/error/crash/timeout), else 0.",
    )
    p.add_argument("old", metavar="OLD.json")
    p.add_argument("new", metavar="NEW.json")
    p.add_argument("--markdown", help="write the diff as Markdown here ('-' for stdout)")
    p.add_argument("--json", help="write the diff as JSON here")
    p.add_argument("--title", help="heading of the Markdown diff")
    p.add_argument("-q", "--quiet", action="store_true", help="print only the summary line")
    p.set_defaults(func=cmd_diff)

    p = sub.add_parser(
        "matrix",
        help="regression matrix of two or more JSON reports (a column per run)",
        description="Put reports side by side (say, one per torch version): one table with a "
        "column per run, labelled with its torch version and device, and a row per root cause "
        "of the cases whose status differs between runs, worst first. Without an output "
        "option, print it to the terminal. Exit status 0 once written, whatever it shows.",
    )
    p.add_argument("reports", metavar="REPORT.json", nargs="+")
    p.add_argument("--markdown", help="write the matrix as Markdown here ('-' for stdout)")
    p.add_argument("--html", help="write the matrix as HTML here")
    p.add_argument("--json", help="write the matrix as JSON here")
    p.add_argument("--title", help="heading of the Markdown and HTML matrix")
    p.add_argument("-q", "--quiet", action="store_true", help="print only the summary line")
    p.set_defaults(func=cmd_matrix)


def _check_writable(
    args: argparse.Namespace, flags: tuple[str, ...], inputs: list[tuple[str, str]]
) -> None:
    from harness.session.outputs import check_output_paths

    ns = argparse.Namespace(**{f: getattr(args, f, None) for f in flags})
    if getattr(ns, "markdown", None) == "-":
        ns.markdown = None
    check_output_paths(ns, inputs)


def _emit(text: str, path: str) -> None:
    from harness.reports.report import write_atomic

    if path == "-":
        sys.stdout.write(text)
    else:
        write_atomic(path, text)


def _attempt(
    failed: list[str], flag: str, path: str, write: Any, written: list[str] | None = None
) -> None:
    """Run one write; an I/O error becomes a line in ``failed`` (printed last, exit 2);
    the path of a file written goes into ``written``."""
    from harness.core.errors import UsageError

    try:
        write()
        if written is not None and path != "-":
            written.append(path)
    except OSError as e:
        failed.append(f"--{flag} {path}: could not write it ({e.strerror or e})")
    except UsageError as e:
        failed.append(f"--{flag} {e}")


def _report_failures(command: str, failed: list[str]) -> int:
    for line in failed:
        print(f"afdb {command}: error: {line}", file=sys.stderr)
    return 2 if failed else 0


def cmd_report(args: argparse.Namespace) -> int:
    from harness.core.schema import load_report
    from harness.reports import html as html_report
    from harness.reports import junit, report

    result = load_report(args.report)
    _check_writable(args, ("html", "markdown", "junit"), [("REPORT.json", args.report)])
    if not (args.html or args.markdown or args.junit):
        args.markdown = "-"
    failed: list[str] = []
    written: list[str] = []
    if args.markdown:
        _attempt(
            failed,
            "markdown",
            args.markdown,
            lambda: _emit(report.to_markdown(result), args.markdown),
            written,
        )
    if args.html:
        _attempt(
            failed, "html", args.html, lambda: html_report.write_html(result, args.html), written
        )
    if args.junit:
        _attempt(
            failed, "junit", args.junit, lambda: junit.write_junit(result, args.junit), written
        )
    _say_written(args, written)
    return _report_failures("report", failed)


def _say_written(args: argparse.Namespace, written: list[str]) -> None:
    """``wrote a.md, a.html`` as the user named them (on stderr when stdout is the output)."""
    if not written:
        return
    shown = getattr(args, "paths_as_given", None) or {}
    out = sys.stderr if getattr(args, "markdown", None) == "-" else sys.stdout
    print(f"wrote {', '.join(shown.get(p, p) for p in written)}", file=out)


def cmd_diff(args: argparse.Namespace) -> int:
    from harness.core.schema import read_json
    from harness.reports import diff

    d = diff.diff_reports(read_json(args.old), read_json(args.new), args.old, args.new)
    _check_writable(args, ("markdown", "json"), [("OLD.json", args.old), ("NEW.json", args.new)])
    failed = _write_views(
        args,
        d.warnings,
        {
            "markdown": lambda: diff.to_markdown(d, title=args.title),
            "json": lambda: diff.to_json(d),
        },
        summary=lambda: (
            f"{'REGRESSED' if d.has_regressions else 'NO REGRESSION'}: {d.summary_line()}"
        ),
        text=lambda: diff.to_text(d),
    )
    if failed:  # after the summary: the user sees the verdict, then what is missing
        return _report_failures("diff", failed)
    if d.has_regressions and not args.quiet and args.markdown != "-":
        command = "afdb check TARGET" if d.new_meta.get("source") == "user" else "afdb run"
        print(
            f"next: `{command} --last-failed {args.new}` reruns the cases that do not conform "
            "now; the Markdown diff (--markdown FILE) gives the reproduce command of each root cause"
        )
    return 1 if d.has_regressions else 0


def cmd_matrix(args: argparse.Namespace) -> int:
    from harness.core.errors import UsageError
    from harness.core.schema import read_json
    from harness.core.textsafe import visible
    from harness.reports import matrix

    if len(args.reports) < 2:
        raise UsageError("matrix: give two or more reports (REPORT.json REPORT.json ...)")
    m = matrix.matrix_reports([read_json(p) for p in args.reports], args.reports)
    _check_writable(
        args,
        ("markdown", "html", "json"),
        [(f"REPORT.json #{n}", p) for n, p in enumerate(args.reports, 1)],
    )
    failed = _write_views(
        args,
        m.warnings,
        {
            "markdown": lambda: matrix.to_markdown(m, title=args.title),
            "html": lambda: matrix.to_html(m, title=args.title),
            "json": lambda: matrix.to_json(m),
        },
        summary=lambda: visible(m.summary_line(), keep_newlines=False),
        text=lambda: matrix.to_text(m),
    )
    return _report_failures("matrix", failed)


def _write_views(
    args: argparse.Namespace,
    warnings: list[str],
    renderings: dict[str, Callable[[], str]],
    *,
    summary: Callable[[], str],
    text: Callable[[], str],
) -> list[str]:
    """``diff`` and ``matrix``: the warnings, each rendering asked for (``--markdown``,
    ``--html``, ``--json``; ``-`` for stdout), then the summary line (``-q``) or the text
    (unless the Markdown went to stdout) and the "wrote" line. Returns the failed writes."""
    from harness.core.textsafe import visible

    for w in warnings:  # metadata of the reports: shown, never sent to the terminal
        print(f"warning: {visible(w, keep_newlines=False)}", file=sys.stderr)
    failed: list[str] = []
    written: list[str] = []
    for flag, render in renderings.items():
        path = getattr(args, flag)
        if path:
            _attempt(failed, flag, path, lambda r=render, p=path: _emit(r(), p), written)
    if args.quiet:
        print(summary())
    elif args.markdown != "-":
        sys.stdout.write(text())
    if not args.quiet:
        _say_written(args, written)
    return failed
