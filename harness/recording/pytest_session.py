"""``pytest --afdb-record[=DIR]``: the session's calls recorded, one recording per run.

Loaded by the light plugin (``afdb_pytest_plugin``) only when the flag is given. Each
test's node id is the ``where`` of its calls and its collection index their order. Under
pytest-xdist each worker records into ``DIR/.parts/<worker>`` and the controller, at the
end of the session (after every worker has written its part), merges the parts into
DIR ordered by collection index and place in the test, never by worker timing, so the
recording is the one a serial run writes; the parts are then removed.
"""

from __future__ import annotations

import shutil
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from harness.core.errors import UsageError
from harness.recording import store
from harness.recording.observer import Recorder
from harness.recording.packages import check_sources
from harness.recording.summary import summary_line

PARTS = ".parts"
#: The most recent session's recorder in this process (``afdb record -m pytest`` reads it).
last_recorder: Recorder | None = None

_VALUED = (
    "--afdb-source",
    "--afdb-ops",
    "--afdb-max-calls",
    "--afdb-tensor-limit",
    "--afdb-total-limit",
    "-n",
    "--numprocesses",
    "--dist",
    "--maxprocesses",
)


def program_of(config: Any) -> str:
    """``-m pytest ARGS`` as typed, without the recording's own flags and xdist's
    parallelism (a recording does not depend on how many workers made it)."""
    args = list(config.invocation_params.args)
    out: list[str] = []
    skip = False
    for i, arg in enumerate(args):
        if skip:
            skip = False
            continue
        if arg == "--afdb-record":
            value = config.getoption("afdb_record", None)
            skip = i + 1 < len(args) and args[i + 1] == value
            continue
        if arg in _VALUED:
            skip = True
            continue
        if arg.startswith(tuple(f"{v}=" for v in (*_VALUED, "--afdb-record"))) or (
            arg.startswith("-n") and arg[2:].isalnum()
        ):
            continue
        if arg in ("-p", "afdb_pytest_plugin") and "afdb_pytest_plugin" in args[i : i + 2]:
            continue
        out.append(arg)
    return " ".join(["-m pytest", *out])


def _bytes(mib: float, flag: str) -> int:
    if not 0 <= mib <= 1 << 40:
        raise UsageError(f"{flag} {mib}: give a size in MiB >= 0")
    return int(mib * (1 << 20))


def _remove_parts(out_dir: Path) -> None:
    parts = out_dir / PARTS
    if parts.is_symlink() or parts.is_file():
        parts.unlink()
    elif parts.is_dir():
        shutil.rmtree(parts)


class RecordingSession:
    """The pytest plugin object that records one session (a worker's part under xdist)."""

    def __init__(self, config: Any, out_dir: str) -> None:
        global last_recorder
        self.config = config
        worker = getattr(config, "workerinput", None)
        self.worker = worker["workerid"] if worker else None
        self.out_dir = Path(
            worker.get("afdb_record_dir", out_dir) if worker else out_dir
        ).absolute()
        self.index: dict[str, int] = {}
        try:
            if self.worker is None:
                store.check_target(self.out_dir)
                _remove_parts(self.out_dir)
            check_sources(tuple(config.getoption("afdb_source") or ()))
            target = self.out_dir / PARTS / self.worker if self.worker else self.out_dir
            self.recorder = Recorder(
                target,
                sources=tuple(config.getoption("afdb_source") or ()),
                ops=tuple(config.getoption("afdb_ops") or ()),
                max_calls=config.getoption("afdb_max_calls"),
                tensor_limit=_bytes(config.getoption("afdb_tensor_limit"), "--afdb-tensor-limit"),
                total_limit=_bytes(config.getoption("afdb_total_limit"), "--afdb-total-limit"),
                program=program_of(config),
            )
        except UsageError as e:  # before the tests run: one line, exit 4
            flag = "--afdb" if config.getoption("afdb", False) else "--afdb-record"
            raise pytest.UsageError(f"{flag}: {e}") from None
        last_recorder = self.recorder
        self.recorder.start()

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        """xdist controller: each worker records into this run's folder, wherever it runs."""
        node.workerinput["afdb_record_dir"] = str(self.out_dir)

    def pytest_collection_finish(self, session: Any) -> None:
        self.index = {item.nodeid: i for i, item in enumerate(session.items)}

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: Any, nextitem: Any) -> Generator[None, Any, Any]:
        self.recorder.set_test(item.nodeid, self.index.get(item.nodeid, len(self.index)))
        try:
            return (yield)
        finally:
            self.recorder.set_test(None)

    def pytest_sessionfinish(self, session: Any, exitstatus: int) -> None:
        self.recorder.stop()
        parts_dir = self.out_dir / PARTS
        if self.worker is not None or not parts_dir.is_dir():
            self.recorder.write()
            return
        self.recorder.out_dir = parts_dir / "controller"
        self.recorder.write()
        parts = sorted(p for p in parts_dir.iterdir() if p.is_dir() and not p.is_symlink())
        merged = store.merge(parts, self.out_dir, self.recorder.program, self.recorder.limits())
        self.recorder.written_to(self.out_dir, merged)
        _remove_parts(self.out_dir)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.worker is None:
            terminalreporter.write_line(
                "afdb: " + summary_line(self.recorder.result(), self.out_dir)
            )
