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
  generated conftest does the same when plugin autoloading is off);
* records, with ``--afdb-record[=DIR]``, every autograd.Function call of the session
  (``harness.recording.pytest_session``, imported only when the flag is given);
* with ``--afdb``, records the session and checks every Function it called at its end
  (``harness.plugin.session``, imported only when the flag is given).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from typing import Any

import pytest

MARKER = "afdb: a conformance case of autograd-function-db (conformance_tests, database_tests)"


#: The attribute the plugin sets on the reports of a conformance item (one carrying the
#: ``afdb`` marker). Never ``report.keywords``: they hold every parent folder's name too, so
#: under a folder named ``afdb`` every test would look like a conformance case.
CONFORMANCE_ATTR = "afdb_conformance"


class _NothingChecked:
    """Per session: conformance groups (a test function's node id without the case) with the
    items seen and those that checked something (passed, failed, xfailed; not skipped as
    unsupported or by an expectation)."""

    def __init__(self) -> None:
        self.groups: dict[str, list[int]] = {}

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: Any, call: Any) -> Any:
        """Mark the reports of items that carry the ``afdb`` marker (a plain attribute: it
        travels with the report from an xdist worker to the controller)."""
        report = yield
        if item.get_closest_marker("afdb") is not None:
            setattr(report, CONFORMANCE_ATTR, True)
        return report

    def pytest_runtest_logreport(self, report: Any) -> None:
        if not getattr(report, CONFORMANCE_ATTR, False):
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


def _add_check_options(parser: pytest.Parser) -> None:
    """``--afdb``: record the session, then check every Function it called (issue 28)."""
    group = parser.getgroup("afdb", "autograd-function-db")
    group.addoption(
        "--afdb",
        action="store_true",
        default=False,
        help="record every autograd.Function call of the session, then check each Function "
        "with its recorded calls at the end (fails the session when one does not conform)",
    )
    group.addoption(
        "--afdb-report-only",
        action="store_true",
        default=False,
        help="with --afdb: report, but do not fail the session",
    )
    for name, what in (
        ("json", "the JSON report"),
        ("markdown", "the Markdown report"),
        ("html", "the HTML report"),
        ("junit", "the JUnit XML"),
        ("expectations", "an expectations file (known failures by case id)"),
    ):
        group.addoption(f"--afdb-{name}", default=None, metavar="FILE", help=f"with --afdb: {what}")
    group.addoption(
        "--afdb-checks",
        default=None,
        metavar="LIST",
        help="with --afdb: only these checks (e.g. vmap,vjp; default all)",
    )
    group.addoption(
        "--afdb-workers",
        default=None,
        metavar="N",
        help="with --afdb: worker processes for the check, or auto (default: one per Function "
        "up to the physical cores; 0: in the pytest process)",
    )
    group.addoption(
        "--afdb-cache-clear",
        action="store_true",
        default=False,
        help="with --afdb: forget the cached verdicts and check every Function afresh "
        "(pytest's --cache-clear does too)",
    )
    group.addoption(
        "--afdb-declare",
        action="append",
        default=[],
        metavar="LINE",
        help="with --afdb: what a Function's class cannot say, e.g. "
        "'mylib.ops:RoundSTE gradient=custom' (also the afdb_declare ini option)",
    )
    parser.addini(
        "afdb_declare",
        type="linelist",
        default=[],
        help="pytest --afdb: one 'module:QualName key=value ...' line per Function",
    )


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("afdb", "autograd-function-db")
    group.addoption(
        "--afdb-record",
        nargs="?",
        const=".afdb/recorded",
        default=None,
        metavar="DIR",
        help="record every autograd.Function call of the session to DIR (default "
        ".afdb/recorded; write --afdb-record=DIR: a bare word after it is taken as DIR)",
    )
    group.addoption(
        "--afdb-source",
        action="append",
        default=[],
        metavar="PKG",
        help="with --afdb-record: also list the Functions of package PKG that no test called",
    )
    group.addoption(
        "--afdb-ops",
        action="append",
        default=[],
        metavar="NS",
        help="with --afdb-record: also record the torch.library custom ops of namespace NS",
    )
    group.addoption(
        "--afdb-max-calls",
        type=int,
        default=8,
        metavar="K",
        help="with --afdb-record: calls kept per Function, covering the most argument "
        "combinations (default 8)",
    )
    group.addoption(
        "--afdb-tensor-limit",
        type=float,
        default=16.0,
        metavar="MB",
        help="with --afdb-record: a call with a larger tensor (MiB) is not kept (default 16)",
    )
    group.addoption(
        "--afdb-total-limit",
        type=float,
        default=256.0,
        metavar="MB",
        help="with --afdb-record: the recording's tensors stop at this size (MiB; default 256)",
    )
    _add_check_options(parser)


def _configure_check(config: pytest.Config) -> None:
    """With ``--afdb``: recording on (``--afdb-record``'s folder), the check at the end."""
    if not config.getoption("afdb", False):
        return
    if not getattr(config.option, "afdb_record", None):
        config.option.afdb_record = ".afdb/recorded"
    from harness.plugin.session import RecordedCheckSession  # only now do torch and harness load

    config.pluginmanager.register(
        RecordedCheckSession(config, config.option.afdb_record), "afdb-check"
    )


#: The ``--afdb-*`` options that take a value, and those whose value is optional.
VALUE_OPTIONS = (
    "--afdb-json",
    "--afdb-markdown",
    "--afdb-html",
    "--afdb-junit",
    "--afdb-expectations",
    "--afdb-checks",
    "--afdb-workers",
    "--afdb-declare",
    "--afdb-source",
    "--afdb-ops",
    "--afdb-max-calls",
    "--afdb-tensor-limit",
    "--afdb-total-limit",
    "--afdb-worker-config",
)
OPTIONAL_VALUE_OPTIONS = ("--afdb-record",)


#: The value-taking options whose value is a file the run writes or reads.
FILE_OPTIONS = (
    "--afdb-json",
    "--afdb-markdown",
    "--afdb-html",
    "--afdb-junit",
    "--afdb-expectations",
    "--afdb-record",
)


def space_form_values(args: list[str]) -> list[tuple[str, str]]:
    """Each ``--afdb-X VALUE`` among ``args`` (the value in its own argument)."""
    found = []
    for i, arg in enumerate(args):
        if arg == "--":
            break
        nxt = args[i + 1] if i + 1 < len(args) else None
        if nxt is None:
            continue
        if arg in VALUE_OPTIONS or (arg in OPTIONAL_VALUE_OPTIONS and not nxt.startswith("-")):
            found.append((arg, nxt))
    return found


def _setup_with(config: pytest.Config, paths: list[str]) -> Any:
    """(rootdir, ini file) pytest chooses for these test paths, or None where this pytest's
    ``determine_setup`` cannot be asked."""
    try:
        from _pytest.config.findpaths import determine_setup

        found = determine_setup(
            inifile=config.option.inifilename,
            override_ini=config.option.override_ini,
            args=paths,
            rootdir_cmd_arg=config.option.rootdir or None,
            invocation_dir=config.invocation_params.dir,
        )
    except Exception:  # noqa: BLE001 - another pytest: refuse the space form outright
        return None
    return found[0], found[1]


def space_form_problem(config: pytest.Config, args: list[str]) -> str:
    """The one line that refuses an ``--afdb-X VALUE`` whose VALUE, read as a test path (as
    pytest reads it when it picks its rootdir and ini file, before it loads this plugin),
    changes them: now, or on the next run, once the report FILE exists. '' when none does.
    ``--afdb-X=VALUE`` is one argument and never read so."""
    pairs = space_form_values(args)
    if not pairs:
        return ""
    given = [str(a) for a in config.option.file_or_dir or ()]
    right = _setup_with(config, given)
    here = config.invocation_params.dir
    for option, value in pairs:
        path = here / value
        wrong = right is None or (config.rootpath, config.inipath) != right
        if not wrong:
            if path.exists():
                probe = path
            elif option in FILE_OPTIONS and path.parent.is_dir():
                probe = path.parent  # the folder FILE will be in: what the next run reads
            else:
                continue
            wrong = _setup_with(config, [*given, str(probe)]) != right
        if wrong:
            return (
                f"{option} {value}: write {option}={value} (one argument): pytest picks its "
                f"rootdir and ini file before it knows that {option} takes a value, and "
                f"{value} read as a test path changes them (the project's ini would not be read)"
            )
    return ""


def _refuse_space_form(config: pytest.Config) -> None:
    import shlex

    args = [str(a) for a in config.invocation_params.args]
    with contextlib.suppress(ValueError):  # pytest itself refuses a bad PYTEST_ADDOPTS
        args = shlex.split(os.environ.get("PYTEST_ADDOPTS", "")) + args
    line = space_form_problem(config, args)
    if line:
        raise pytest.UsageError(line)


def pytest_configure(config: pytest.Config) -> None:
    _refuse_space_form(config)
    config.addinivalue_line("markers", MARKER)
    config.pluginmanager.register(_NothingChecked(), "afdb-nothing-checked")
    config.pluginmanager.register(_RootCauses(), "afdb-root-causes")
    _configure_check(config)
    record = config.getoption("afdb_record", None)
    if record:  # only now do torch and the harness load
        from harness.recording.pytest_session import RecordingSession

        config.pluginmanager.register(RecordingSession(config, record), "afdb-recording")


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
        module = sys.modules.get("harness.plugin.items")
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
        from harness.plugin.items import root_cause_lines

        terminalreporter.section("afdb: non-conforming cases by root cause")
        for line in root_cause_lines(self.results):
            terminalreporter.write_line(line)
