"""The pytest plugin: a Function's conformance cases as ordinary pytest items.

A user adds one small module to their own test suite::

    # tests/test_conformance.py
    from harness.pytest_plugin import conformance_tests
    from mylib.rotations import Rotate, rotate_samples

    test_rotate = conformance_tests(Rotate, rotate_samples)

and gets one item per case, ``test_rotate[Rotate/vmap/s0/in_dims=(0,)]``, with
stable ids (so ``-k vmap_nested``, ``-n auto`` and ``--junitxml`` work). A
failing case fails its item with the message and the ``afdb repro`` command;
``unsupported`` cases are skipped with their reason; expectations give
``xfail`` and ``skip``. ``database_tests()`` does the same for the database.

This module is a library a test module imports, not the plugin pytest loads by itself:
the ``pytest11`` entry point names the top-level ``afdb_pytest_plugin`` (light, and a
name no project's own module has). When that plugin is loaded, every item made here
carries the ``afdb`` marker (``-m "not afdb"`` skips the conformance items).

It also powers ``afdb run -n`` / ``afdb check``: ``harness.engine.parallel`` generates a
module calling ``config_tests(CONFIG)``, whose items write their results to per-worker
JSON-lines files (the controller's crash hook is in its generated conftest).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

import pytest

# --- building a suite ---------------------------------------------------------------------


class _Suite:
    """The cases of some entries under some options, built once per process."""

    def __init__(
        self,
        entries: Sequence[Any],
        options: Any,
        *,
        target: Any = None,
        expectations: Any = None,
        results_dir: str | None = None,
        case_ids: Sequence[tuple[str, str]] | None = None,
    ) -> None:
        self.options = options
        self.target = target
        self.expectations = expectations
        self.results_dir = results_dir
        self.entries = {e.name: e for e in entries}
        self.cases: dict[str, tuple[Any, Any]] = {}
        from harness.engine.timeouts import TimeoutLedger

        # A staticmethod that hung on a sample, or two timeouts in a check, and the cases
        # that would hang again are not run; in a worker the ledger
        # is shared with the other workers through the results folder.
        self.ledger = TimeoutLedger()
        if results_dir is not None:
            self.ledger.attach(results_dir)
        self._ids: list[str] = []
        self._entry_of: dict[str, str] = {}
        if case_ids is not None:
            # The controller enumerated the cases already: an xdist worker builds an
            # entry's samples only when it runs one of its cases (see harness.engine.parallel).
            self._entry_of = {case_id: entry for entry, case_id in case_ids}
            self._ids = [case_id for _, case_id in case_ids]
        else:
            for entry in entries:
                self._load(entry.name)
            self._ids = list(self.cases)

    def _load(self, entry_name: str) -> None:
        from harness.engine.cases import EntryData, enumerate_cases

        data = EntryData(self.entries[entry_name], self.options)
        for case in enumerate_cases(data):
            self.cases[case.id] = (data, case)

    def ids(self) -> list[str]:
        return list(self._ids)

    def run(self, case_id: str) -> Any:
        from harness.engine.runner import run_noted
        from harness.expectations import apply, skip_result

        if case_id not in self.cases and case_id in self._entry_of:
            self._load(self._entry_of[case_id])
        data, case = self.cases[case_id]
        skipped = skip_result(self.expectations, case)
        if skipped is not None:
            return skipped
        # a worker runs nothing but cases: state changed between two was changed by a thread
        result = run_noted(
            data,
            case,
            self.ledger,
            target=self.target,
            watch_between=self.results_dir is not None,
        )
        if self.expectations is not None:
            apply(self.expectations, result)
        return result


def _marked(test: Callable[..., None]) -> Callable[..., None]:
    """``test`` with the ``afdb`` marker when the suite's plugin registered it (``-p no:afdb``
    leaves it unregistered: an unknown marker would warn, or fail ``--strict-markers``)."""
    if "afdb_pytest_plugin" in sys.modules:
        return pytest.mark.afdb(test)  # type: ignore[no-any-return]
    return test


def _parametrized(name: str, suite_factory: Callable[[], _Suite]) -> Callable[..., None]:
    """A test function with one parameter per case id (or one failing item for bad input)."""
    from harness.core.errors import UsageError

    try:
        suite = suite_factory()
    except UsageError as e:
        message = str(e)

        def broken(afdb_case: str) -> None:
            pytest.fail(f"afdb: {message}", pytrace=False)

        broken.__name__ = name
        return pytest.mark.parametrize("afdb_case", ["setup"])(broken)

    def test(afdb_case: str) -> None:
        result = suite.run(afdb_case)
        _note_failure(result)
        _outcome(result)

    test.__name__ = name
    ids = suite.ids()
    return pytest.mark.parametrize("afdb_case", ids, ids=ids)(test)


#: The record of the non-conforming case this process ran last, until the plugin's report
#: hook takes it (``afdb_pytest_plugin``: the terminal summary by root cause).
_FAILED: list[dict[str, Any]] = []


def _note_failure(result: Any) -> None:
    _FAILED.clear()
    if not result.ok:
        _FAILED.append(result.to_dict())


def take_failure() -> dict[str, Any] | None:
    """The record ``_note_failure`` kept for the item just run (None: it conformed)."""
    return _FAILED.pop() if _FAILED else None


def root_cause_lines(records: Sequence[dict[str, Any]], limit: int = 30) -> list[str]:
    """The session's non-conforming cases as ``afdb check`` prints them: one block per root
    cause (headline, first ids, the command that reproduces one), then one count line."""
    from harness.core.results import CaseResult
    from harness.reports.grouping import failure_groups, plural, terminal_lines

    cases = [CaseResult.from_dict(r) for r in records]
    groups = failure_groups(cases)
    entries = sorted({c.entry for c in cases})
    who = entries[0] if len(entries) == 1 else f"{len(entries)} entries"
    lines = [
        f"{who}: {plural(len(cases), 'case')} do not conform, {plural(len(groups), 'root cause')}:"
    ]
    return [*lines, *terminal_lines(groups, limit=limit)]


def _outcome(result: Any) -> None:
    """Turn a case result into the pytest outcome of its item."""
    from harness.core.results import PASS, SKIP, UNSUPPORTED, XFAIL

    if result.status == PASS:
        return
    if result.status == UNSUPPORTED:
        pytest.skip(f"unsupported: {result.message}")
    if result.status == SKIP:
        pytest.skip(result.message)
    if result.status == XFAIL:
        pytest.xfail(result.message)
    from harness.core.textsafe import visible

    text = visible(f"{result.status}: {result.id}\n{result.message}")
    if result.repro:
        text += f"\nreproduce: {visible(result.repro)}"
    pytest.fail(text, pytrace=False)


def conformance_tests(
    function: Any,
    samples: Any = None,
    *,
    expectations: str | None = None,
    name: str = "test_conformance",
    **options: Any,
) -> Callable[..., None]:
    """A pytest test function with one item per conformance case of ``function``.

    Assign it to a ``test_*`` name in a test module. ``samples`` is what
    ``harness.check`` takes (default: the Function's ``samples`` attribute);
    ``options`` are ``harness.check``'s keywords (``checks=``, ``batch_sizes=``,
    ``seed=``, ``dtype=``, ``timeout_s=``, capabilities such as ``inplace_args=(0,)``).
    ``expectations`` is an expectations file (xfail/skip per case id).
    """

    def factory() -> _Suite:
        from harness.api import _expectations, infer_target, prepare, target_fields
        from harness.sources.entries import samples_attribute, samples_places

        nonlocal samples
        if samples is None:
            samples = samples_attribute(function)
            if samples is None:
                from harness.core.errors import UsageError

                raise UsageError(
                    f"{getattr(function, '__name__', function)} has no samples "
                    f"({samples_places(function)}); pass conformance_tests(function, samples)"
                )
        entry, opts = prepare(function, samples, **options)
        target = infer_target(function, samples, **target_fields(options))
        return _Suite([entry], opts, target=target, expectations=_expectations(expectations))

    return _marked(_parametrized(name, factory))


def database_tests(
    names: Sequence[str] = (),
    *,
    source: str = "afdb",
    expectations: str | None = None,
    name: str = "test_database",
    **options: Any,
) -> Callable[..., None]:
    """One item per case of the database (or the named entries / ``tag:TAG`` selectors)."""

    def factory() -> _Suite:
        from harness.api import _expectations
        from harness.core.options import Options
        from harness.sources.database import load_source
        from harness.sources.select import select_entries

        entries = select_entries(load_source(source), list(names))
        opts = Options(**options)
        return _Suite(entries, opts, expectations=_expectations(expectations))

    return _marked(_parametrized(name, factory))


# --- the internal mode that powers `afdb run -n` and `afdb check` -------------------------


def _suite_from_config(config: dict[str, Any]) -> _Suite:
    from harness.api import _expectations
    from harness.core.options import Options
    from harness.sources.target import TargetSpec

    options = Options.from_dict(config["options"])
    target: Any = None
    if config.get("target"):
        entries = [TargetSpec.from_dict(config["target"]).make_entry()]
        target = TargetSpec.from_dict(config.get("repro_target") or config["target"])
    elif config.get("recorded"):  # a recorded check whose parent could not fork
        from harness.cli.check_recorded import rebuild

        entries, target = rebuild(config["recorded"], config["entries"])
    else:
        from harness.sources.database import load_source
        from harness.sources.select import select_entries

        entries = select_entries(load_source(config.get("source", "afdb")), config["entries"])
    if config.get("backend"):  # afdb certify: the entries as they run on the backend
        from harness.certify.backends import Backend
        from harness.certify.checks import adapt

        entries = adapt(Backend.from_spec(config["backend"]), entries)
    return _Suite(
        entries,
        options,
        target=target,
        expectations=_expectations(config.get("expectations")),
        results_dir=config["results_dir"],
        case_ids=[tuple(pair) for pair in config["cases"]] if "cases" in config else None,
    )


class _WorkerFiles:
    """This process's results file, its 'running now' marker and its fault log."""

    def __init__(self, results_dir: str) -> None:
        import faulthandler

        pid = os.getpid()
        self.results = open(os.path.join(results_dir, f"results-{pid}.jsonl"), "a")  # noqa: SIM115
        self.running_path = os.path.join(results_dir, f"running-{pid}.txt")
        self.faults = open(os.path.join(results_dir, f"faults-{pid}.txt"), "w")  # noqa: SIM115
        faulthandler.enable(file=self.faults, all_threads=False)
        from harness.engine.children import become_subreaper

        become_subreaper()  # a case's orphaned grandchildren come back here, to be killed

    def start(self, case_id: str) -> None:
        with open(self.running_path, "w") as f:
            f.write(case_id)

    def record(self, result: Any) -> None:
        self.results.write(json.dumps(result.to_dict()) + "\n")
        self.results.flush()


_WORKER_FILES: dict[str, _WorkerFiles] = {}


def watchdog_grace(limit: float) -> float:
    """Extra seconds past a case's limit before its worker is killed (SIGALRM gets the first go)."""
    from harness.engine.forkpool import watchdog_grace as grace

    return grace(limit)


def config_tests(config_path: str, name: str = "test_case") -> Callable[..., None]:
    """The items of a run described by a JSON config file (written by ``harness.engine.parallel``)."""
    with open(config_path) as f:
        config = json.load(f)
    results_dir = config["results_dir"]

    def factory() -> _Suite:
        return _suite_from_config(config)

    suite_holder: list[_Suite] = []

    def make() -> _Suite:
        suite = factory()
        suite_holder.append(suite)
        return suite

    inner = _parametrized(name, make)
    if not suite_holder:
        return inner  # bad input: one failing item says why

    suite = suite_holder[0]

    def test(afdb_case: str) -> None:
        from harness.engine.isolation import DEFAULT_TIMEOUT_S, watchdog

        files = _WORKER_FILES.get(results_dir)
        if files is None:
            files = _WORKER_FILES[results_dir] = _WorkerFiles(results_dir)
        files.start(afdb_case)
        limit = suite.options.timeout_s or DEFAULT_TIMEOUT_S
        with watchdog(limit + watchdog_grace(limit), files.faults):
            result = suite.run(afdb_case)
        files.record(result)

    test.__name__ = name
    ids = suite.ids()
    return pytest.mark.parametrize("afdb_case", ids, ids=ids)(test)
