"""A suite of cases as pytest items: one parametrized test function, one item per case id.

``Suite`` builds an entry's cases once per process and runs one by id (expectations
applied); ``parametrized`` makes the test function (one failing item for bad input);
``outcome`` turns a case result into the item's pytest outcome; the record of the last
non-conforming case waits for the entry-point plugin's report hook (``take_failure``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any

import pytest


class Suite:
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
        more: Callable[[str], Any] | None = None,
    ) -> None:
        self.options = options
        #: Makes an entry this process was not given (``harness.plugin.replay``); why not.
        self.more = more
        self.missing: dict[str, str] = {}
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
        from harness.core.errors import UsageError
        from harness.engine.cases import enumerate_cases
        from harness.engine.sample_cache import EntryData

        if entry_name not in self.entries and self.more is not None:
            if entry_name in self.missing:
                return
            try:
                self.entries[entry_name] = self.more(entry_name)
            except UsageError as e:
                self.missing[entry_name] = str(e)
                return
        data = EntryData(self.entries[entry_name], self.options)
        for case in enumerate_cases(data):
            self.cases[case.id] = (data, case)

    def ids(self) -> list[str]:
        return list(self._ids)

    def prepare(self, case_id: str) -> None:
        """Build the case's entry if this process has not yet (outside any case's limit:
        making an entry again may re-run tests, ``harness.plugin.replay``)."""
        if case_id not in self.cases and case_id in self._entry_of:
            self._load(self._entry_of[case_id])

    def run(self, case_id: str) -> Any:
        from harness.engine.records import not_made_record
        from harness.engine.runner import run_noted
        from harness.expectations import apply, skip_result

        self.prepare(case_id)
        if case_id not in self.cases and case_id in self._entry_of:
            entry = self._entry_of[case_id]
            why = self.missing.get(entry) or (
                "re-running the tests that called it did not make this case again "
                "(a test that draws other shapes or values on each run)"
            )
            return not_made_record(case_id, entry, why)
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


def marked(test: Callable[..., None]) -> Callable[..., None]:
    """``test`` with the ``afdb`` marker when the suite's plugin registered it (``-p no:afdb``
    leaves it unregistered: an unknown marker would warn, or fail ``--strict-markers``)."""
    if "afdb_pytest_plugin" in sys.modules:
        return pytest.mark.afdb(test)  # type: ignore[no-any-return]
    return test


def parametrized(name: str, suite_factory: Callable[[], Suite]) -> Callable[..., None]:
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
        note_failure(result)
        outcome(result)

    test.__name__ = name
    ids = suite.ids()
    return pytest.mark.parametrize("afdb_case", ids, ids=ids)(test)


#: The record of the non-conforming case this process ran last, until the plugin's report
#: hook takes it (``afdb_pytest_plugin``: the terminal summary by root cause).
_FAILED: list[dict[str, Any]] = []


def note_failure(result: Any) -> None:
    _FAILED.clear()
    if not result.ok:
        _FAILED.append(result.to_dict())


def take_failure() -> dict[str, Any] | None:
    """The record ``note_failure`` kept for the item just run (None: it conformed)."""
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


def outcome(result: Any) -> None:
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
