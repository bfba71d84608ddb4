"""The pytest plugin of autograd-function-db: what every pytest run of the environment loads.

Installing the suite registers this module through the ``pytest11`` entry point (name
``afdb``; ``-p no:afdb`` turns it off), so it is imported by **every** pytest run in the
environment, the user's own projects included. It therefore:

* has a name no project uses for its own module (a project's ``harness.py`` or
  ``harness/`` package is none of the suite's business);
* imports only the standard library and pytest: neither torch nor ``harness`` load
  until a test module asks for conformance cases (``from harness.pytest_plugin import
  conformance_tests``); a project that never does pays nothing (see docs/pytest-plugin.md
  for the measurement);
* registers the ``afdb`` marker, which every conformance item carries (``-m afdb`` runs
  only them, ``-m "not afdb"`` skips them), so ``--strict-markers`` accepts it;
* makes a run exit 5 (pytest's "no tests ran") when a group of conformance items checked
  nothing (every case unsupported or skipped), as ``afdb check`` does;
* records, in the pytest-xdist controller of ``afdb run -n`` / ``afdb check``, the item
  a dying worker was running (``harness.engine.parallel`` reads ``crashed.jsonl``; its
  generated conftest does the same when plugin autoloading is off).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import pytest

MARKER = "afdb: a conformance case of autograd-function-db (conformance_tests, database_tests)"


class _NothingChecked:
    """Per session: conformance groups (a test function's node id without the case) with the
    items seen and those that checked something (passed, failed, xfailed; not skipped as
    unsupported or by an expectation)."""

    def __init__(self) -> None:
        self.groups: dict[str, list[int]] = {}

    def pytest_runtest_logreport(self, report: Any) -> None:
        if "afdb" not in getattr(report, "keywords", {}):
            return
        if report.when != "call" and not (report.when == "setup" and not report.passed):
            return
        seen = self.groups.setdefault(report.nodeid.split("[", 1)[0], [0, 0])
        seen[0] += 1
        if report.passed or report.failed or hasattr(report, "wasxfail"):
            seen[1] += 1

    def unchecked(self) -> list[str]:
        return [g for g, (items, checked) in self.groups.items() if items and not checked]

    def pytest_sessionfinish(self, session: Any, exitstatus: int) -> None:
        """A group whose items were all unsupported or skipped checked nothing: the run
        is not "conforms" but pytest's "no tests ran" (5), as ``afdb check`` exits."""
        if hasattr(session.config, "workerinput"):  # an xdist worker: the controller decides
            return
        if self.unchecked() and int(exitstatus) == 0:
            session.exitstatus = pytest.ExitCode.NO_TESTS_COLLECTED

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        for group in self.unchecked():
            terminalreporter.write_line(
                f"afdb: nothing checked by {group}: all {self.groups[group][0]} of its cases "
                "are unsupported or skipped (their reasons are in the skip messages, -rs); "
                "the run exits 5"
            )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", MARKER)
    config.pluginmanager.register(_NothingChecked(), "afdb-nothing-checked")
    config.pluginmanager.register(_RootCauses(), "afdb-root-causes")


@pytest.hookimpl(optionalhook=True)
def pytest_handlecrashitem(crashitem: str, report: Any, sched: Any) -> None:
    """xdist controller: a worker died running ``crashitem``; note it for harness.engine.parallel."""
    results_dir = os.environ.get("AFDB_RESULTS_DIR")
    if not results_dir:
        return
    with open(os.path.join(results_dir, "crashed.jsonl"), "a") as f:
        f.write(json.dumps({"nodeid": crashitem}) + "\n")


class _RootCauses:
    """The non-conforming cases of a session, grouped by root cause in one terminal section
    as ``afdb check`` prints them (each case stays its own failing item). A failing item's
    record travels on its report (``afdb_result``), so an xdist controller sees its workers'."""

    def __init__(self) -> None:
        self.results: list[dict[str, Any]] = []

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: Any, call: Any) -> Any:
        outcome = yield
        if call.when != "call":
            return
        module = sys.modules.get("harness.pytest_plugin")
        record = module.take_failure() if module is not None else None
        if record is not None:
            outcome.get_result().afdb_result = record

    def pytest_runtest_logreport(self, report: Any) -> None:
        record = getattr(report, "afdb_result", None)
        if isinstance(record, dict) and report.when == "call":
            self.results.append(record)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not self.results:
            return
        from harness.pytest_plugin import root_cause_lines

        terminalreporter.section("afdb: non-conforming cases by root cause")
        for line in root_cause_lines(self.results):
            terminalreporter.write_line(line)
