"""A recording as a source: its Functions as entries, the project's declarations applied.

``RecordingSource`` turns a loaded recording (``harness.recording``) into one
``RecordedEntry`` per Function (``harness.sources.recorded``): the entry when it can be
checked here, else why not. Every consumer takes it the same way: ``afdb check
--recorded``, ``afdb record --check``, ``pytest --afdb`` (through ``harness.session.recorded``),
``afdb repro --recorded`` and the fresh worker interpreters of a run (``rebuild``).
Importing this module loads no torch (``afdb --help`` reads ``DEFAULT_DIR``).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from harness.core.errors import UsageError

if TYPE_CHECKING:
    from autograd_function_db.entry import Entry
    from harness.core.options import Options
    from harness.sources.declare import Declaration
    from harness.sources.recorded import RecordedEntry


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
    #: The Functions a fresh interpreter cannot make again from the recording files (live
    #: values, or a class it cannot import): ``RecordingSource.needs_process``.
    needs_process: tuple[str, ...] = ()
    #: How a fresh interpreter makes them again: re-running the tests that called them
    #: under recording (the pytest wing's ``harness.plugin.replay``), else None.
    replay: Any = field(default=None, compare=False, repr=False)

    def rebuilds(self, name: str) -> str:
        """How a fresh worker interpreter gets entry ``name``: ``files`` (the recording
        files), ``replay`` (re-running its tests) or '' (it cannot: the recording process)."""
        if name not in self.needs_process:
            return "files"
        tests = (self.replay or {}).get("nodeids") or {}
        return "replay" if tests.get(name) else ""  # no test made its calls: nothing to re-run

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
            "needs_process": list(self.needs_process),
            "replay": self.replay,
        }

    def cli_args(self) -> list[str]:
        args = ["--recorded", self.directory]
        for line in self.declarations:
            args += ["--declare", line]
        return args

    def __str__(self) -> str:
        return f"recorded:{self.directory}"


class RecordingSource:
    """The Functions of one recording, as entries (``entries``) and as what each became
    (``recorded``: checked, or why not), with the declarations applied in one place."""

    name = "recorded"

    def __init__(
        self,
        recording: Any,
        *,
        declarations: Mapping[str, Declaration] | None = None,
        default: Declaration | None = None,
        classes: Mapping[str, Any] | None = None,
        xdist: bool = False,
        live: Mapping[str, Mapping[int, tuple[Any, ...]]] | None = None,
    ) -> None:
        self.recording = recording
        self.declarations = dict(declarations or {})
        self.default = default
        self.classes = classes
        self.xdist = xdist
        self.live = live
        self._recorded: list[RecordedEntry] | None = None

    def recorded(self) -> list[RecordedEntry]:
        """Every recorded Function (its order), checkable or not."""
        if self._recorded is None:
            from harness.sources.recorded import UNIMPORTABLE, UNIMPORTABLE_XDIST, recorded_entries

            self._recorded = recorded_entries(
                self.recording,
                classes=self.classes,
                declarations=self.declarations,
                default=self.default,
                unimportable=UNIMPORTABLE_XDIST if self.xdist else UNIMPORTABLE,
                live=self.live,
            )
        return self._recorded

    def entries(self) -> list[Entry]:
        """The entries of the Functions that can be checked here."""
        return [r.entry for r in self.recorded() if r.entry is not None]

    def expectations(self) -> None:
        """A recording has no committed known failures (a user names theirs)."""
        return None

    def options(self, entries: Sequence[Entry], options: Options, *, fixed: bool) -> Options:
        """Batch sizes no recorded dim uses, the same for every Function, so a case id does
        not depend on which Functions a selection names; ``fixed``: the user fixed them,
        and every sample is then only validated at them."""
        if fixed:
            from autograd_function_db.registry import validate_entry

            for e in entries:
                validate_entry(e, options.hazard_sizes())
            return options
        from harness.sources.batch_sizes import hazard_free_options

        return hazard_free_options(entries, options) if entries else options

    def select(self, prefixes: Sequence[str]) -> list[RecordedEntry]:
        """The Functions whose target starts with a prefix (a case id prefix selects its
        Function; its cases are narrowed by ``case_prefixes``)."""
        recorded = self.recorded()
        if not prefixes:
            return recorded
        out: list[RecordedEntry] = []
        for prefix in prefixes:
            name = prefix.split("/", 1)[0]
            hits = [r for r in recorded if r.target.startswith(name)]
            if not hits:
                close = difflib.get_close_matches(name, [r.target for r in recorded], n=3)
                hint = f"; did you mean {', '.join(close)}?" if close else ""
                known = ", ".join(r.target for r in recorded[:6])
                raise UsageError(
                    f"{prefix!r} matches no recorded Function{hint} (the recording holds "
                    f"{known or 'none'}{', ...' if len(recorded) > 6 else ''})"
                )
            out.extend(h for h in hits if h not in out)
        return out

    def needs_process(self) -> tuple[str, ...]:
        """The Functions checked here that a fresh interpreter cannot make again from the
        recording files: a call holds a live value, or the class is not importable there
        (defined in a test or a function, or in ``__main__``)."""
        from harness.engine.fork_safety import importable
        from harness.recording.live import Live, placeholders

        found = []
        calls = {f.target: f.calls for f in self.recording.functions}
        ops = {f.target for f in self.recording.functions if f.kind == "custom_op"}
        for r in self.recorded():
            if r.entry is None:
                continue
            live = any(
                isinstance(h, Live)
                for c in calls.get(r.target, ())
                for h in placeholders([c.args, c.kwargs])
            )
            if live or (r.target not in ops and not importable(r.entry.function)):
                found.append(r.target)
        return tuple(found)

    def unknown_declarations(self) -> list[str]:
        """Declared targets the recording does not hold (a typo, or a Function never called)."""
        known = {r.target for r in self.recorded()}
        return [t for t in self.declarations if t not in known]


def rebuild(config: Mapping[str, Any], names: Sequence[str]) -> tuple[list[Any], RecordedTarget]:
    """In a fresh worker interpreter: the entries ``names`` of the recording a
    ``RecordedTarget.worker_config`` describes (classes imported by their targets), and the
    target their repro commands name."""
    from harness.recording import load_recording
    from harness.sources.declare import Declaration, parse_declarations

    declarations = parse_declarations(config["declarations"])
    capabilities = {
        k: tuple(v) if isinstance(v, list) else v for k, v in config["capabilities"].items()
    }
    default = Declaration("*", config["gradient"], capabilities)
    source = RecordingSource(
        load_recording(config["path"]), declarations=declarations, default=default
    )
    # made again elsewhere (harness.plugin.replay), never from the files, which lack them
    apart = set(config.get("needs_process") or ())
    by_name = {e.name: e for e in source.entries() if e.name not in apart}
    target = RecordedTarget(config["directory"], tuple(config["declarations"]), default=default)
    return [by_name[n] for n in names if n in by_name], target
