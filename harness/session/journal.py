"""The JSON report written as the check goes, so a killed run leaves what finished.

A run with ``--json FILE`` (``--afdb-json``) rewrites FILE while its cases finish: each
record as it arrives (per Function as it finishes, from a worker pool) is kept here, and
FILE is replaced atomically by a report of the records so far, marked ``interrupted`` with
a ``journal`` line that says how many cases finished and which Functions had not. The final
report replaces it at the end as before. So a process killed from outside (the OOM killer,
a CI job's time limit, a Function that ends the process the cases run in) still leaves a
readable report of every Function that finished, and says what did not run.

Rewrites are throttled (at least ``MIN_INTERVAL_S`` apart and four times as long as the
last write took), except that FILE is rewritten whenever a Function's records are complete.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from harness.core.results import CaseResult, RunResult

#: The shortest time between two rewrites of the partial report (besides the rewrite each
#: time a Function's records are complete).
MIN_INTERVAL_S = 1.0


class Journal:
    """Keeps the records of a run as they arrive and rewrites ``path`` with them."""

    def __init__(
        self,
        path: str,
        metadata: Callable[[], dict[str, Any]],
        entries: Sequence[str],
    ) -> None:
        self.path = path
        self.metadata = metadata
        self.entries = list(entries)
        self.records: dict[str, CaseResult] = {}
        self.last = 0.0
        self.cost = 0.0
        self.failed = False
        self._metadata: dict[str, Any] | None = None
        self.current = ""

    def __call__(self, r: CaseResult) -> None:
        # records come entry by entry: a new entry's first means the last one finished
        finished = bool(self.records) and r.entry != self.current
        self.current = r.entry
        if finished:
            self.write()  # every finished Function is in the file before the next one runs
        self.records[r.id] = r
        if time.monotonic() - self.last >= max(MIN_INTERVAL_S, 4 * self.cost):
            self.write()

    def partial_line(self) -> str:
        """What the partial report says: what finished, and which Functions did not."""
        seen = {r.entry for r in self.records.values()}
        missing = [e for e in self.entries if e not in seen]
        n = len(self.records)
        line = (
            f"written while the check ran: {n} case{'s' if n != 1 else ''} finished; "
            "the run stopped before its end if this report was not replaced"
        )
        if missing:
            shown = ", ".join(missing[:10]) + (
                f" and {len(missing) - 10} more" if len(missing) > 10 else ""
            )
            line += f"; not started: {shown}"
        return line

    def write(self) -> None:
        """Replace the report with the records so far (a failed write is left to the end)."""
        if self.failed:
            return
        from harness.reports.report import write_json

        started = time.monotonic()
        if self._metadata is None:
            self._metadata = self.metadata()
        metadata = dict(self._metadata)
        metadata["interrupted"] = True
        metadata["journal"] = self.partial_line()
        try:
            write_json(RunResult(list(self.records.values()), metadata), self.path)
        except Exception:  # noqa: BLE001 - the final write reports its own failure
            self.failed = True
        self.last = time.monotonic()
        self.cost = self.last - started


def journaled(
    progress: Callable[[CaseResult], None], journal: Journal | None
) -> Callable[[CaseResult], None]:
    """``progress`` that also tells ``journal`` (itself when there is no journal)."""
    if journal is None:
        return progress

    def told(r: CaseResult) -> None:
        progress(r)
        journal(r)

    return told


__all__ = ["MIN_INTERVAL_S", "Journal", "journaled"]
