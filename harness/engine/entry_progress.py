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

import json
import os
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


class ResultsTail:
    """Called while a pytest-xdist pool runs: tells ``told`` each new record its workers
    appended to their ``results-*.jsonl`` files in ``folder`` (whole lines only; ids not in
    ``wanted`` and records already told are skipped)."""

    def __init__(self, folder: str, wanted: set[str], told: Callable[[CaseResult], None]) -> None:
        self.folder = folder
        self.wanted = wanted
        self.told = told
        self.offsets: dict[str, int] = {}
        self.seen: set[str] = set()

    def __call__(self) -> None:
        try:
            names = sorted(os.listdir(self.folder))
        except OSError:
            return
        for name in names:
            if not (name.startswith("results-") and name.endswith(".jsonl")):
                continue
            try:
                with open(os.path.join(self.folder, name), "rb") as f:
                    f.seek(self.offsets.get(name, 0))
                    data = f.read()
            except OSError:
                continue
            whole = data[: data.rfind(b"\n") + 1]
            self.offsets[name] = self.offsets.get(name, 0) + len(whole)
            for line in whole.splitlines():
                try:
                    r = CaseResult.from_dict(json.loads(line))
                except ValueError:
                    continue
                if r.id in self.wanted and r.id not in self.seen:
                    self.seen.add(r.id)
                    self.told(r)


__all__ = ["FinishedEntries", "ResultsTail"]
