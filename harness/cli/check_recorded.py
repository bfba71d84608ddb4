"""``afdb check --recorded [DIR] [PREFIX...]``: check every Function a recording saw.

Each recorded Function is an entry named by its target (``mylib.ops:SoftSort``) whose
samples are its recorded calls (``harness.recorded``). The run is ``afdb check``'s: the
same options, workers, expectations and reports; batch sizes avoid every recorded dim of
every recorded Function (so a case id does not depend on which Functions a selection
names). After the usual summary, one line per Function and the summary sentence.
``pytest --afdb`` calls ``check_recording`` in the pytest process at the session's end.
"""

from __future__ import annotations

import argparse
import dataclasses
import shlex
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from harness.cli.common import CliError
from harness.core.results import RunResult
from harness.core.textsafe import visible

if TYPE_CHECKING:  # core.options imports torch; `afdb check --help` must not
    from harness.core.options import Options

#: Where ``afdb record`` writes and ``--recorded`` reads when no DIR is named.
DEFAULT_DIR = ".afdb/recorded"


@dataclass(frozen=True)
class RecordedTarget:
    """What a recorded case's repro command names: the recording and the declarations."""

    directory: str
    declarations: tuple[str, ...] = ()
    #: How a repro script knows to read the recording (harness.repro.script).
    recorded: bool = True
    #: The command line's capability flags for every Function (``_default_declaration``).
    default: Any = field(default=None, compare=False, repr=False)
    #: (factory, kwargs) that make a class defined inside a function (harness.sources.rebuild).
    rebuild: Any = None

    def worker_config(self) -> dict[str, Any]:
        """What a fresh worker interpreter needs to rebuild the entries (``rebuild``)."""
        import os

        default = self.default
        return {
            "directory": self.directory,
            "path": os.path.abspath(self.directory),
            "declarations": list(self.declarations),
            "gradient": getattr(default, "gradient", "derivative"),
            "capabilities": dict(getattr(default, "capabilities", {}) or {}),
        }

    def cli_args(self) -> list[str]:
        args = ["--recorded", self.directory]
        for line in self.declarations:
            args += ["--declare", line]
        return args

    def __str__(self) -> str:
        return f"recorded:{self.directory}"


def add_recorded_options(p: argparse.ArgumentParser) -> None:
    """``--recorded [DIR]`` and ``--declare LINE`` (``afdb check`` and ``afdb repro``)."""
    p.add_argument(
        "--recorded",
        nargs="?",
        const=DEFAULT_DIR,
        metavar="DIR",
        help=f"check every Function of a recording (`afdb record`; default {DEFAULT_DIR}) "
        "with its recorded calls as samples; TARGETs are then name prefixes that select some",
    )
    p.add_argument(
        "--declare",
        action="append",
        metavar="LINE",
        help="with --recorded: what one Function's class cannot say, e.g. "
        "'mylib.ops:RoundSTE gradient=custom nondiff-args=1'; repeatable",
    )


def _default_declaration(args: argparse.Namespace) -> Any:
    """The command line's capability flags, for every recorded Function (a --declare line
    for one Function replaces them for it)."""
    from harness.cli.check import spec_from_args
    from harness.sources.declare import Declaration

    spec = spec_from_args(args, "recorded:all")
    return Declaration("*", spec.gradient, dict(spec.capabilities))


def recorded_run(
    args: argparse.Namespace,
    recording: Any,
    classes: Mapping[str, Any] | None,
    *,
    xdist: bool = False,
) -> tuple[list[Any], Any]:
    """Every recorded Function (checkable or not) and the declarations by target."""
    from harness.sources.declare import parse_declarations
    from harness.sources.declare_config import declaration_lines
    from harness.sources.recorded import UNIMPORTABLE, UNIMPORTABLE_XDIST, recorded_entries

    lines = getattr(args, "declare_lines", None)
    if lines is None:  # the project's files in the working directory, then --declare
        lines = declaration_lines(args.declare or ())
    declarations = parse_declarations(lines)
    recorded = recorded_entries(
        recording,
        classes=classes,
        declarations=declarations,
        default=_default_declaration(args),
        unimportable=UNIMPORTABLE_XDIST if xdist else UNIMPORTABLE,
        live=getattr(args, "live_calls", None),
    )
    return recorded, declarations


def _select(recorded: list[Any], prefixes: Sequence[str]) -> list[Any]:
    """The Functions whose target starts with a prefix (a case id prefix selects its
    Function; its cases are narrowed by ``case_prefixes``)."""
    import difflib

    out: list[Any] = []
    for prefix in prefixes:
        name = prefix.split("/", 1)[0]
        hits = [r for r in recorded if r.target.startswith(name)]
        if not hits:
            close = difflib.get_close_matches(name, [r.target for r in recorded], n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            known = ", ".join(r.target for r in recorded[:6])
            raise CliError(
                f"{prefix!r} matches no recorded Function{hint} (the recording holds "
                f"{known or 'none'}{', ...' if len(recorded) > 6 else ''})"
            )
        out.extend(h for h in hits if h not in out)
    return out


def shared_options(entries: Sequence[Any], options: Options, args: argparse.Namespace) -> Options:
    """Batch sizes no recorded dim uses, the same for every Function (unless fixed)."""
    if getattr(args, "batch_size", None) or getattr(args, "nested_batch_sizes", None):
        from autograd_function_db.registry import validate_entry

        for e in entries:
            validate_entry(e, options.hazard_sizes())
        return options
    from harness.sources.batch_sizes import hazard_free_options

    return hazard_free_options(entries, options) if entries else options


def check_recording(
    args: argparse.Namespace,
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
    from harness.cli.run import closing_lines, controller_threads, execute, run_status
    from harness.engine.isolation import DEFAULT_TIMEOUT_S
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
    options = _options(args)
    if options.timeout_s is None:
        options = options.replace(timeout_s=DEFAULT_TIMEOUT_S)
    from harness.cli.common import check_output_paths

    check_output_paths(args)
    controller_threads(args)
    everything, declarations = recorded_run(args, recording, classes, xdist=xdist)
    from harness.sources.recorded import unknown_declarations

    for name in unknown_declarations(declarations, everything):
        given = any(line.split()[:1] == [name] for line in args.declare or ())
        source = "--declare" if given else "a declaration of the project ([tool.afdb] or ini)"
        print(f"note: {source} names {visible(name)}, which the recording does not hold")
    # batch sizes from every Function, so a case id does not depend on the selection
    options = shared_options([r.entry for r in everything if r.entry is not None], options, args)
    recorded = _select(everything, args.target) if args.target else everything
    entries = [r.entry for r in recorded if r.entry is not None]
    from harness.sources.select import case_prefixes

    args.case_prefixes = case_prefixes(entries, [p for p in args.target or () if "/" in p])
    show = lines or _print_lines
    if not args.quiet:
        what = getattr(recording, "program", "") or shown
        print(
            f"afdb check --recorded {visible(shown, keep_newlines=False)}: "
            f"{len(recorded)} Function{'s' if len(recorded) != 1 else ''} recorded from "
            f"{visible(what, keep_newlines=False)}, {len(entries)} to check"
        )
        if options.batch_size_note:
            print(f"batch sizes: {options.batch_size_note}")
    target = RecordedTarget(
        shown, tuple(d.text for d in declarations.values()), default=_default_declaration(args)
    )
    result: RunResult | None = None
    if entries:

        def annotate(res: RunResult) -> None:
            note_never_differentiated(res, recorded, options)
            one_declaration_repros(res, recorded, recording, classes)
            res.metadata["recorded"] = report_metadata(recorded, verdicts(res, recorded))

        result = execute(
            entries,
            options,
            args,
            source="recorded",
            target=target,
            known_entries={r.entry.name for r in everything if r.entry is not None},
            before_reports=annotate,
        )
    found = verdicts(result, recorded)
    hints = surrogate_hints(result, recorded, options)
    found = [
        dataclasses.replace(v, line=f"{v.line}; {hints[v.target]}") if v.target in hints else v
        for v in found
    ]
    width = max([len(v.target) for v in found] + [8])
    out = [f"  {visible(v.target, keep_newlines=False):<{width}}  {v.line}" for v in found]
    out.append(summary_sentence(recorded, found))
    show(out)
    if result is None:
        print("nothing checked: the recording holds no Function that can be checked here")
        return 5, None, found
    status = run_status(result, args)
    closing_lines(result, args, status, rerun_command=f"afdb check --recorded {shown}")
    return status, result, found


def _options(args: argparse.Namespace) -> Options:
    from harness.cli.common import options_from_args

    return options_from_args(args)


def _print_lines(lines: list[str]) -> None:
    print("")
    for line in lines:
        print(line)
    sys.stdout.flush()


def cmd_check_recorded(args: argparse.Namespace) -> int:
    if getattr(args, "accept", False):
        raise CliError("--accept with --recorded is not supported yet; write the file by hand")
    if getattr(args, "last_failed", None):
        from harness.cli.selection import apply_last_failed

        rerun = apply_last_failed(args, user=True, recorded=True) or []
        if not rerun:
            print(f"nothing to rerun: {args.last_failed} has no non-conforming case")
            return 0
        args.target = list(args.target or ()) or rerun
    if getattr(args, "watch", False):
        raise CliError("--watch with --recorded: record again instead (afdb record)")
    status, _, _ = check_recording(args)
    return status


def check_after_record(
    directory: str,
    recording: Any,
    classes: Mapping[str, Any],
    declarations: Sequence[str],
    live: Mapping[str, Any] | None = None,
    options: Sequence[str] = (),
) -> int:
    """``afdb record --check``: the recording checked in the recording process (``live``:
    the recorder's live snapshots, ``Recorder.live_calls``; ``options``: more of ``afdb
    check``'s options)."""
    from harness.cli.main import build_parser

    argv = ["check", "--recorded", directory, *options]
    for line in declarations:
        argv += ["--declare", line]
    args = build_parser().parse_args(argv)
    args.argv = argv
    args.live_calls = live
    status, _, _ = check_recording(args, recording=recording, classes=classes)
    return status


def rebuild(config: Mapping[str, Any], names: Sequence[str]) -> tuple[list[Any], RecordedTarget]:
    """In a fresh worker interpreter: the entries ``names`` of the recording a
    ``RecordedTarget.worker_config`` describes (classes imported by their targets), and the
    target their repro commands name."""
    from harness.recording import load_recording
    from harness.sources.declare import Declaration, parse_declarations
    from harness.sources.recorded import recorded_entries

    declarations = parse_declarations(config["declarations"])
    capabilities = {
        k: tuple(v) if isinstance(v, list) else v for k, v in config["capabilities"].items()
    }
    default = Declaration("*", config["gradient"], capabilities)
    found = recorded_entries(
        load_recording(config["path"]), declarations=declarations, default=default
    )
    by_name = {r.entry.name: r.entry for r in found if r.entry is not None}
    target = RecordedTarget(config["directory"], tuple(config["declarations"]), default=default)
    return [by_name[n] for n in names if n in by_name], target


def check_recorded(recorder: Any, *options: str, declare: Sequence[str] = ()) -> int:
    """After ``with harness.recording(DIR) as recorder: ...``: check the recording in this
    process, with its live classes and live values, as ``afdb record --check`` does;
    ``options`` are ``afdb check``'s (``"--checks", "vjp"``). Returns the exit status."""
    return check_after_record(
        str(recorder.out_dir),
        recorder.result(),
        recorder.classes,
        list(declare),
        recorder.live_calls(),
        options,
    )


def repro_entry(args: argparse.Namespace, options: Options) -> tuple[Any, Options]:
    """``afdb repro CASE_ID --recorded DIR``: the case's entry and the run's batch sizes."""
    from harness.cli.repro_settings import rebuild_spec
    from harness.recording import load_recording

    recording = load_recording(args.recorded)
    name = args.case_id.split("/", 1)[0]
    args.rebuild_spec = rebuild_spec(args)
    classes = None
    if args.rebuild_spec is not None:
        from harness.sources.rebuild import rebuild

        qualname = name.partition(":")[2]
        spec, kwargs = args.rebuild_spec
        classes = {name: rebuild(spec, kwargs, qualname)}
    everything, _ = recorded_run(args, recording, classes)
    entries = [r.entry for r in everything if r.entry is not None]
    by_name = {e.name: e for e in entries}
    function = recording.function(name)
    if name not in by_name and function is not None and not function.importable:
        from harness.recorded.repro_lines import _test_name

        test = _test_name([c.where for c in function.calls])
        rerun = f"pytest --afdb {shlex.quote(test)}" if test else "pytest --afdb"
        raise CliError(
            f"{args.case_id}: {name} is made inside a function or only in the recording "
            f"process, and no factory was named (--rebuild): rerun `{rerun}` and read the "
            "case there"
        )
    if name not in by_name:
        raise CliError(
            f"{args.case_id}: the recording {args.recorded} has no checkable Function {name!r}"
        )
    return by_name[name], shared_options(entries, options, args)
