"""``pytest --afdb``: record the session's Function calls, then check them at its end.

Loaded by the light plugin (``afdb_pytest_plugin``) only when ``--afdb`` is given; the
recording itself is ``--afdb-record``'s (``harness.recording.pytest_session``, which
``--afdb`` turns on). In the pytest process (the xdist controller, after the workers'
parts are merged) the recording is checked as ``afdb check --recorded`` checks it, with the
recording session's live classes, so a Function defined in a test module or a function is
checked too. A terminal section after the tests says one line per Function and the summary
sentence; progress lines appear only on a terminal. The session exits 1 when a Function
does not conform (``--afdb-report-only``: the report only), 4 on bad usage (a wrong
declaration, option or report path: refused at configure time, before the tests run), 5
when the tests passed but no Function was checked.
"""

from __future__ import annotations

import argparse
import contextlib
import io
from typing import Any

import pytest

from harness.core.errors import UsageError

#: The line that says the cases do not run in forked workers, and why (engine/parallel.py).
MODEL_NOTE = "note: process model: "
#: The line that says how many workers the check uses (session/check_phase.py).
WORKERS_NOTE = "note: workers: "


class _Lines(io.TextIOBase):
    """Everything the check prints, kept; on a terminal its progress lines shown as they come."""

    def __init__(self, show: Any, entries: set[str]) -> None:
        self.text: list[str] = []
        self.pending = ""
        self.show = show
        self.entries = entries

    def write(self, s: str) -> int:
        self.text.append(s)
        self.pending += s
        while "\n" in self.pending:
            line, self.pending = self.pending.split("\n", 1)
            name = line.split(": ", 1)[0]
            progress = name in self.entries and line.endswith("in cases)")
            if self.show is not None and (progress or line.startswith(MODEL_NOTE)):
                self.show(f"afdb: {line.removeprefix('note: ')}")
        return len(s)


def _shower(reporter: Any) -> Any:
    """``reporter.write_line`` on a line of its own (the test progress line may be open)."""

    def show(line: str) -> None:
        if getattr(reporter._tw, "width_of_current_line", 0):
            reporter._tw.line()
        reporter.write_line(line)

    return show


#: (setting, pytest option) for every ``--afdb-*`` option that sets one of ``afdb check``'s.
OPTIONS = (
    ("json", "afdb_json"),
    ("markdown", "afdb_markdown"),
    ("html", "afdb_html"),
    ("junit", "afdb_junit"),
    ("checks", "afdb_checks"),
    ("expectations", "afdb_expectations"),
)


def check_argv(config: Any, directory: str) -> list[str]:
    """The ``afdb check --recorded`` command line the session's options make (what the
    reports name as the run's command)."""
    argv = ["check", "--recorded", directory]
    for key, option in OPTIONS:
        value = config.getoption(option, None)
        if value:
            argv += [f"--{key}", str(value)]
    for line in declare_lines(config):
        argv += ["--declare", line]
    return argv


def declare_lines(config: Any) -> list[str]:
    """The project's ``[tool.afdb]`` and ini lines (pytest's rootdir), then the options'."""
    from harness.sources.declare_config import declaration_lines

    return declaration_lines(
        [str(v).strip() for v in config.getoption("afdb_declare", None) or ()],
        folder=config.rootpath,
        ini=list(config.getini("afdb_declare") or ()),
    )


class RecordedCheckSession:
    """The plugin object that checks the session's recording at its end (controller only)."""

    def __init__(self, config: Any, directory: str) -> None:
        self.config = config
        self.directory = directory
        self.lines: list[str] = []
        self.details: list[str] = []
        self.problem = ""
        self.failing = False
        try:  # a wrong declaration, option or report path: one line, before the tests run
            from harness.session.recorded import preflight

            preflight(self._settings())
        except UsageError as e:
            raise pytest.UsageError(f"afdb: {e}") from None

    def _settings(self) -> Any:
        """The check's settings from the session's options (no command line is parsed: the
        ``afdb check`` line in the reports is ``check_argv``'s, for reading only)."""
        from harness.session.settings import Settings

        given: dict[str, Any] = {}
        for key, option in OPTIONS:
            value = self.config.getoption(option, None)
            if value:
                given[key] = str(value)
        workers = self.config.getoption("afdb_workers", None)
        if workers is not None:
            given["workers"] = str(workers)  # else the cores (session/check_phase.py)
        lines = declare_lines(self.config)
        return Settings(
            recorded=self.directory,
            declare=lines or None,
            declare_lines=lines,  # read once, from the project's files
            argv=check_argv(self.config, self.directory),
            **given,
        )

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: Any, exitstatus: int) -> None:
        if hasattr(self.config, "workerinput"):
            return  # an xdist worker: the controller checks the merged recording
        recording_session = self.config.pluginmanager.get_plugin("afdb-recording")
        recorder = getattr(recording_session, "recorder", None)
        classes = dict(getattr(recorder, "classes", {}) or {})
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        tty = reporter is not None and getattr(reporter, "isatty", False)
        show = _shower(reporter) if tty and reporter is not None else None
        try:
            args = self._settings()
            from harness.plugin.cache import verdict_store

            args.verdict_cache = verdict_store(self.config)  # harness.session.verdict_cache
            from harness.recording import load_recording

            recording = load_recording(self.directory)
            out = _Lines(show, {f.target for f in recording.functions})
            if show is not None and recording.functions:
                count = len(recording.functions)
                show(
                    f"afdb: checking {count} Function{'s' if count != 1 else ''} these tests "
                    "called (a line for each as its cases finish)"
                )
            got: list[str] = []
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
                xdist = bool(getattr(self.config.option, "numprocesses", None))
                live = recorder.live_calls() if recorder is not None and not xdist else None
                if not xdist:  # how a fresh interpreter makes the live values again
                    from harness.plugin.replay import replay_spec

                    args.replay = replay_spec(self.config, recording)
                status, result, found = _check(
                    args, recording, classes, got.extend, tty, xdist=xdist, live=live
                )
        except UsageError as e:
            self.problem = str(e)
            session.exitstatus = pytest.ExitCode.USAGE_ERROR
            return
        self.lines = got
        said = "".join(out.text).splitlines()
        self.model = "\n".join(
            ln.removeprefix("note: ") for ln in said if ln.startswith((WORKERS_NOTE, MODEL_NOTE))
        )
        if result is not None:
            from harness.reports.grouping import failure_groups, terminal_lines

            groups = failure_groups(result.cases)
            self.details = terminal_lines(groups, limit=10, message_chars=300, message_lines=1)
        self.written = list(getattr(args, "written", []))
        self.failing = status not in (0, 5)
        if self.config.getoption("afdb_report_only", False):
            return
        if int(session.exitstatus) == 0 and status != 0:
            session.exitstatus = status if status in (1, 3, 5) else 1

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if hasattr(self.config, "workerinput"):
            return
        terminalreporter.section("afdb: the Functions these tests called")
        if self.problem:
            terminalreporter.write_line(f"afdb: {self.problem}")
            return
        for line in getattr(self, "model", "").splitlines():
            terminalreporter.write_line(f"afdb: {line}")
        for line in self.lines:
            terminalreporter.write_line(line)
        if self.details:
            terminalreporter.write_line("")
            for line in self.details:
                terminalreporter.write_line(line)
        for path in getattr(self, "written", []):
            terminalreporter.write_line(f"afdb: wrote {path}")
        if self.failing and self.config.getoption("afdb_report_only", False):
            terminalreporter.write_line(
                "afdb: --afdb-report-only: the session's exit status ignores these failures"
            )


def _check(
    args: argparse.Namespace,
    recording: Any,
    classes: dict[str, Any],
    lines: Any,
    tty: bool,
    *,
    xdist: bool = False,
    live: Any = None,
) -> Any:
    from harness.session.recorded import check_recording

    args.live_calls = live

    return check_recording(
        args, recording=recording, classes=classes, lines=lines, progress=bool(tty), xdist=xdist
    )


__all__ = ["RecordedCheckSession", "check_argv"]
