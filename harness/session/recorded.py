"""Checking a recording: run its entries as ``afdb check`` runs a target's, then one verdict
line per Function and the summary sentence.

Shared by ``afdb check --recorded``, ``afdb record --check``, ``harness.check_recorded``
and ``pytest --afdb`` (``harness.plugin.session``): each passes its settings (an
``argparse.Namespace`` or ``harness.session.settings.Settings``), the loaded recording and,
in the recording process, its live classes and snapshots.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from harness.core.results import RunResult
from harness.core.textsafe import visible
from harness.session.check_phase import default_workers, write_empty_reports
from harness.session.execute import closing_lines, controller_threads, execute, run_status
from harness.session.outputs import check_output_paths
from harness.session.settings import options_from_args
from harness.sources.recording import DEFAULT_DIR, RecordedTarget, RecordingSource

if TYPE_CHECKING:
    from harness.sources.declare import Declaration


def default_declaration(args: Any) -> Declaration:
    """The capability flags every recorded Function gets unless a declaration names it
    (the command line's, set by the CLI as ``args.default_declaration``; else none)."""
    from harness.sources.declare import Declaration

    return getattr(args, "default_declaration", None) or Declaration("*")


def recording_source(
    args: Any,
    recording: Any,
    classes: Mapping[str, Any] | None,
    *,
    xdist: bool = False,
) -> RecordingSource:
    """The recording as a source, with the declarations the settings give: the project's
    files in the working directory, then ``--declare`` (or ``args.declare_lines``, read once)."""
    from harness.sources.declare import parse_declarations
    from harness.sources.declare_config import declaration_lines

    lines = getattr(args, "declare_lines", None)
    if lines is None:
        lines = declaration_lines(args.declare or ())
    return RecordingSource(
        recording,
        declarations=parse_declarations(lines),
        default=default_declaration(args),
        classes=classes,
        xdist=xdist,
        live=getattr(args, "live_calls", None),
    )


def preflight(args: Any) -> None:
    """Refuse (UsageError, one line) what a recorded check would refuse at its start and
    can be known before the program runs: declarations, options, expectations, report
    paths. ``pytest --afdb`` calls it at configure time, before the tests."""
    from harness.sources.declare import parse_declarations
    from harness.sources.declare_config import declaration_lines

    lines = getattr(args, "declare_lines", None)
    parse_declarations(lines if lines is not None else declaration_lines(args.declare or ()))
    options_from_args(args)
    check_output_paths(args)


def _then(show: Callable[[list[str]], None], more: list[str]) -> Callable[[list[str]], None]:
    """``show`` with ``more`` lines after those it is given."""
    return lambda lines: show([*lines, *more])


def check_recording(
    args: Any,
    *,
    recording: Any = None,
    classes: Mapping[str, Any] | None = None,
    lines: Callable[[list[str]], None] | None = None,
    progress: bool | None = None,
    xdist: bool = False,
) -> tuple[int, RunResult | None, list[Any]]:
    """Run the recorded check; return the exit status, the result and the verdicts.

    ``recording`` is a loaded one (else ``args.recorded`` is read); ``classes`` the live
    classes of the recording process (its non-importable ones are checked with them);
    ``lines`` receives the per-Function lines and the summary sentence (default: printed);
    ``progress``: one line per Function as its cases finish (default: on a terminal only);
    ``xdist``: the recording came from pytest-xdist workers (their live classes are gone).
    """
    from harness.engine.isolation import DEFAULT_TIMEOUT_S
    from harness.recorded.declared import unknown_declaration_notes
    from harness.recorded.repro_lines import one_declaration_repros
    from harness.recorded.verdicts import (
        note_never_differentiated,
        report_metadata,
        summary_sentence,
        surrogate_hints,
        verdicts,
    )

    directory = args.recorded or DEFAULT_DIR
    args.no_progress = not (sys.stdout.isatty() if progress is None else progress)
    from harness.core.locations import portable_path

    shown = portable_path(directory)
    if recording is None:
        from harness.recording import load_recording

        recording = load_recording(directory)
    options = options_from_args(args)
    if options.timeout_s is None:
        options = options.replace(timeout_s=DEFAULT_TIMEOUT_S)
    check_output_paths(args)
    started = time.time()
    source = recording_source(args, recording, classes, xdist=xdist)
    # a misspelt or wrong declaration: said after the summary sentence and in the report
    notes = unknown_declaration_notes(
        source.unknown_declarations(), [f.target for f in recording.functions]
    )
    # batch sizes from every Function, so a case id does not depend on the selection
    fixed = bool(getattr(args, "batch_size", None) or getattr(args, "nested_batch_sizes", None))
    options = source.options(source.entries(), options, fixed=fixed)
    recorded = source.select(args.target or ())
    entries = [r.entry for r in recorded if r.entry is not None]
    from harness.sources.select import case_prefixes

    args.case_prefixes = case_prefixes(entries, [p for p in args.target or () if "/" in p])
    spread = default_workers(args, entries)  # the machine's cores, unless -n says otherwise
    controller_threads(args)
    show = lines or _print_lines
    if notes:  # after the summary sentence, wherever the lines go
        show = _then(show, notes)
    if not args.quiet:
        what = getattr(recording, "program", "") or shown
        print(
            f"afdb check --recorded {visible(shown, keep_newlines=False)}: "
            f"{len(recorded)} Function{'s' if len(recorded) != 1 else ''} recorded from "
            f"{visible(what, keep_newlines=False)}, {len(entries)} to check"
        )
        if options.batch_size_note:
            print(f"batch sizes: {options.batch_size_note}")
        if spread:
            print(f"note: workers: {spread}")
    target = RecordedTarget(
        shown,
        tuple(d.text for d in source.declarations.values()),
        default=default_declaration(args),
        needs_process=source.needs_process(),
        replay=getattr(args, "replay", None),  # the pytest wing's (harness.plugin.replay)
    )
    result: RunResult | None = None
    from harness.session import verdict_cache

    reuse = verdict_cache.split(args, options, directory, recorded)
    if entries:

        def annotate(res: RunResult) -> None:
            note_never_differentiated(res, recorded, options)
            one_declaration_repros(res, recorded, recording, classes)
            if reuse is not None:
                reuse.merge(res)  # the fresh cases stored, the cached ones added
            res.metadata["recorded"] = report_metadata(recorded, verdicts(res, recorded))
            if notes:
                res.metadata["recorded"]["notes"] = notes

        result = execute(
            reuse.entries if reuse is not None else entries,
            options,
            args,
            source="recorded",
            target=target,
            known_entries={e.name for e in source.entries()},
            before_reports=annotate,
            journal_entries=[e.name for e in entries],
        )
    found = verdicts(result, recorded)
    hints = surrogate_hints(result, recorded, options)
    found = [
        dataclasses.replace(v, line=f"{v.line}; {hints[v.target]}") if v.target in hints else v
        for v in found
    ]
    if reuse is not None:
        found = [dataclasses.replace(v, line=reuse.note(v.line, v.target)) for v in found]
    width = max([len(v.target) for v in found] + [8])
    out = [f"  {visible(v.target, keep_newlines=False):<{width}}  {v.line}" for v in found]
    out.append(summary_sentence(recorded, found))
    if reuse is not None:
        out.append(reuse.summary(len(entries)))
    show(out)
    if result is None:
        write_empty_reports(args, options, report_metadata(recorded, found), started)
        print("nothing checked: the recording holds no Function that can be checked here")
        _write_empty_reports(args, options, target, recorded, found)
        return 5, None, found
    status = run_status(result, args)
    closing_lines(result, args, status, rerun_command=f"afdb check --recorded {shown}")
    return status, result, found


def _write_empty_reports(
    args: Any, options: Any, target: Any, recorded: Any, found: list[Any]
) -> None:
    """The reports of a check that ran no case (every Function unchecked): no cases, the
    recorded Functions' lines and numbers, so that CI still gets its files."""
    import time

    from harness.engine.metadata import run_metadata
    from harness.recorded.verdicts import report_metadata
    from harness.session.outputs import report_write_failures, write_reports

    argv = getattr(args, "argv", None)
    result = RunResult(
        [],
        run_metadata(
            options,
            started=time.time(),
            source="recorded",
            target=str(target or "") or None,
            command=["afdb", *argv] if argv is not None else None,
        ),
    )
    result.metadata["recorded"] = report_metadata(recorded, found)
    report_write_failures(args, write_reports(result, args))


def _print_lines(lines: list[str]) -> None:
    print("")
    for line in lines:
        print(line)
    sys.stdout.flush()
