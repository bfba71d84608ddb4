"""Live values checked outside the pytest process: a fresh interpreter re-runs the tests.

What a recorded call passes that cannot be data (a function, a bound method, a module, an
object: ``harness.recording.live``) and a Function class defined inside a test exist only in
the process that ran the tests. Where that process can fork, its forked workers have them.
Where it cannot (a thread pool a child cannot do without: ``harness.engine.fork_safety``),
checking them there would let a Function that segfaults end the pytest session; so a fresh
worker interpreter (the engine's pytest-xdist pool) makes them again the way they were made
the first time: it re-runs, under recording, the tests whose node ids the recording holds
for those Functions, in the session's rootdir with its ini file and plugins, and builds
their entries from that run's calls and live snapshots. A Function that crashes or hangs
there costs its case (``crash``/``timeout``, from the pool), never the session.

``replay_spec`` (the pytest process) says how to re-run the tests; ``Replay`` (a worker)
re-runs them once, the first time one of those Functions' cases runs there. The re-run must
make the same calls for the case ids to agree: a test that draws different shapes on each
run leaves some case ids without a case, and those are reported as not run, with why.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Mapping, Sequence
from typing import Any

from harness.core.errors import UsageError

#: Plugins a re-run leaves out: a random test order would change which calls it keeps.
LEFT_OUT = ("randomly",)


def node_ids(recording: Any, targets: Sequence[str]) -> dict[str, list[str]]:
    """The node ids of the tests that made each target's recorded calls (in their order)."""
    wanted = set(targets)
    out: dict[str, list[str]] = {}
    for f in recording.functions:
        if f.target not in wanted:
            continue
        places = [c.where.split(" (inside ", 1)[0] for c in f.calls if c.where]
        ids = [p for p in dict.fromkeys(places) if "::" in p]
        if ids:
            out[f.target] = ids
    return out


def replay_spec(config: Any, recording: Any) -> dict[str, Any] | None:
    """How a fresh interpreter re-runs this session's tests for its recorded Functions (JSON
    data: the rootdir, the ini file, the plugins, the recording's options, the node ids by
    Function); None where no call was made by a test (nothing to re-run)."""
    ids = node_ids(recording, [f.target for f in recording.functions])
    if not ids:
        return None
    plugins: list[str] = []
    for plugin, _dist in config.pluginmanager.list_plugin_distinfo():
        name = getattr(plugin, "__name__", "")
        if name and not any(name.split(".")[0].endswith(left) for left in LEFT_OUT):
            plugins.append(name)
    if "afdb_pytest_plugin" not in plugins:
        plugins.append("afdb_pytest_plugin")
    # no:faulthandler: the worker's own fault handler (its faults file) must stay in place
    record = ["-p", "no:cacheprovider", "-p", "no:faulthandler", "-q", "--no-header"]
    if any(p.split(".")[0] == "xdist" for p in plugins):
        record.append("--numprocesses=0")  # one process: the live values are recorded here
    for flag, option in (("--afdb-source", "afdb_source"), ("--afdb-ops", "afdb_ops")):
        for value in config.getoption(option, None) or ():
            record.append(f"{flag}={value}")
    for flag, option in (
        ("--afdb-max-calls", "afdb_max_calls"),
        ("--afdb-tensor-limit", "afdb_tensor_limit"),
        ("--afdb-total-limit", "afdb_total_limit"),
    ):
        value = config.getoption(option, None)
        if value is not None:
            record.append(f"{flag}={value}")
    importmode = getattr(config.option, "importmode", None)
    if importmode:
        record.append(f"--import-mode={importmode}")
    return {
        "rootdir": str(config.rootpath),
        "inifile": str(config.inipath) if config.inipath else None,
        "plugins": list(dict.fromkeys(plugins)),
        "args": record,
        "nodeids": ids,
        "sys_path": [os.path.abspath(p) for p in sys.path if p and os.path.isdir(p)],
    }


class Replay:
    """In a fresh worker interpreter: the recorded Functions made again by re-running their
    tests (once, for all of them), as entries by name."""

    def __init__(self, recorded: Mapping[str, Any]) -> None:
        self.recorded = recorded
        self.spec = recorded["replay"]
        self.entries: dict[str, Any] | None = None
        self.problem = ""

    def entry(self, name: str) -> Any:
        """The entry ``name`` as the re-run made it; UsageError saying why where it made none."""
        if self.entries is None:
            self.entries = self._run()
        if name not in self.entries:
            raise UsageError(
                self.problem
                or f"re-running the tests that called {name} did not call it again the same way"
            )
        return self.entries[name]

    def _argv(self, out_dir: str, names: Sequence[str]) -> list[str]:
        spec = self.spec
        argv: list[str] = []
        for plugin in spec["plugins"]:
            argv += ["-p", plugin]
        argv += ["--rootdir", spec["rootdir"]]
        if spec.get("inifile"):
            argv += ["-c", spec["inifile"]]
        argv += [*spec["args"], f"--afdb-record={out_dir}"]
        ids = [i for n in names for i in spec["nodeids"].get(n, ())]
        return [*argv, *dict.fromkeys(ids)]

    def _run(self) -> dict[str, Any]:
        import pytest

        from harness.recording import load_recording, pytest_session
        from harness.sources.declare import Declaration, parse_declarations
        from harness.sources.recording import RecordingSource

        names = [n for n in self.recorded.get("needs_process") or () if n in self.spec["nodeids"]]
        for path in self.spec.get("sys_path") or ():
            if path not in sys.path:
                sys.path.append(path)
        here = os.getcwd()
        # the session's entry-point plugins are named (-p), as the session loaded them
        autoload = os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD")
        os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
        with tempfile.TemporaryDirectory(prefix="afdb-replay-") as out_dir:
            try:
                os.chdir(self.spec["rootdir"])
                pytest_session.last_recorder = None
                with contextlib.redirect_stdout(sys.stderr):
                    status = pytest.main(self._argv(out_dir, names))
                recorder = pytest_session.last_recorder
                if recorder is None:
                    self.problem = f"re-running its tests recorded nothing (pytest exit {status})"
                    return {}
                recording = load_recording(out_dir)
            finally:
                os.chdir(here)
                if autoload is None:
                    os.environ.pop("PYTEST_DISABLE_PLUGIN_AUTOLOAD", None)
                else:
                    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = autoload
        capabilities = {
            k: tuple(v) if isinstance(v, list) else v
            for k, v in self.recorded["capabilities"].items()
        }
        source = RecordingSource(
            recording,
            declarations=parse_declarations(self.recorded["declarations"]),
            default=Declaration("*", self.recorded["gradient"], capabilities),
            classes=dict(recorder.classes),
            live=recorder.live_calls(),
        )
        return {e.name: e for e in source.entries() if e.name in names}


__all__ = ["LEFT_OUT", "Replay", "node_ids", "replay_spec"]
