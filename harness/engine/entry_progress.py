"""Progress from worker pools: each entry's records handed on once all of them arrived.

Records arrive from workers as cases finish, two workers on two entries interleaved; a
progress line per entry (``harness.cli.run.Progress``) wants an entry's records together.
``FinishedEntries.arrived`` keeps each record and, when the last case of an entry arrives,
hands the entry's records to ``progress`` in case order, so a long run shows one line per
entry as it finishes (``pytest --afdb`` on a terminal, ``afdb check``) instead of all of
them at the end. What it never handed on (an interrupted run, records that arrive only at
the end) the caller hands on as before: ``told`` says which ids it already did.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from harness.core.results import CaseResult


class FinishedEntries:
    """See the module docstring. ``cases``: the run's cases in order (objects with ``entry``
    and ``id``); ``known``: the records already there (skipped cases), by case id."""

    def __init__(
        self,
        cases: Sequence[Any],
        known: Mapping[str, CaseResult],
        progress: Callable[[CaseResult], None],
    ) -> None:
        self.progress = progress
        self.records: dict[str, CaseResult] = dict(known)
        self.by_entry: dict[str, list[str]] = {}
        self.left: dict[str, int] = {}
        for case in cases:
            self.by_entry.setdefault(case.entry, []).append(case.id)
            if case.id not in known:
                self.left[case.entry] = self.left.get(case.entry, 0) + 1
        self.told: set[str] = set()

    def arrived(self, r: CaseResult) -> None:
        if r.entry not in self.left or r.id in self.records:
            return
        self.records[r.id] = r
        self.left[r.entry] -= 1
        if self.left[r.entry]:
            return
        for case_id in self.by_entry[r.entry]:
            self.told.add(case_id)
            self.progress(self.records[case_id])


__all__ = ["FinishedEntries"]
