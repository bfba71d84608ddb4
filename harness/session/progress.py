"""What a run prints: one line per entry as its results arrive, and the summary."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from harness.core.results import CaseResult, RunResult
from harness.core.textsafe import visible

if TYPE_CHECKING:
    pass


class Progress:
    """One line per entry as its results arrive (or nothing with --quiet).

    The time shown is the sum of the entry's case durations, which means the same
    in-process and under workers (where results arrive all at once at the end).
    """

    def __init__(
        self,
        quiet: bool,
        expectations: Any = None,
        adjust: Callable[[CaseResult], Any] | None = None,
    ) -> None:
        self.quiet = quiet
        #: Changes a copy of each result after the expectations, as the command will
        #: change the results themselves before its summary (``afdb certify``'s reclassify).
        self.adjust = adjust
        #: Statuses are counted after these expectations (an expected failure is xfail,
        #: as in the summary); the results themselves are changed later, once.
        self.expectations = expectations
        self.current: str | None = None
        self.counts: dict[str, int] = {}
        self.seconds = 0.0

    def __call__(self, r: CaseResult) -> None:
        if r.entry != self.current:
            self.flush()
            self.current = r.entry
        status = r.status
        if self.expectations is not None and self.adjust is None:
            from harness.expectations import status_after

            status = status_after(self.expectations, r)  # no copy of the record per case
        elif self.expectations is not None or self.adjust is not None:
            import dataclasses

            from harness.expectations import apply

            copy = dataclasses.replace(r)
            if self.expectations is not None:
                copy = apply(self.expectations, copy)
            if self.adjust is not None:
                self.adjust(copy)
            status = copy.status
        self.counts[status] = self.counts.get(status, 0) + 1
        self.seconds += r.duration_s

    def flush(self) -> None:
        if self.current is not None and not self.quiet:
            from harness.core.results import STATUSES

            order = {s: i for i, s in enumerate(STATUSES)}
            ranked = sorted(self.counts.items(), key=lambda kv: (order.get(kv[0], 99), kv[0]))
            parts = ", ".join(f"{n} {s}" for s, n in ranked)
            name = visible(self.current, keep_newlines=False)
            print(f"{name}: {parts} ({self.seconds:.1f}s in cases)", flush=True)
        self.counts = {}
        self.seconds = 0.0


def print_summary(result: RunResult, out: Any = None) -> None:
    out = out or sys.stdout
    from harness.reports.report import status_cell

    matrix = result.matrix()
    checks: list[str] = []
    for per in matrix.values():
        checks.extend(c for c in per if c not in checks)
    width = max([len(e) for e in matrix] + [5])
    print("", file=out)
    for entry, per in matrix.items():
        bad = {
            c: cnt
            for c, cnt in per.items()
            if any(s in cnt for s in ("internal", "fail", "error", "xpass", "timeout", "crash"))
        }
        if bad:
            cells = "; ".join(
                f"{visible(c, keep_newlines=False)}: {status_cell(cnt)}" for c, cnt in bad.items()
            )
            print(f"{visible(entry, keep_newlines=False):<{width}}  {cells}", file=out)
    from harness.reports.grouping import failure_groups, terminal_lines

    for line in terminal_lines(
        failure_groups(result.cases), limit=20, message_chars=500, message_lines=1
    ):
        print(line, file=out)
    from harness.api import summary_notes

    for note in summary_notes(result):
        if "torch.func refused" in note:
            continue  # the database's custom ops: their cases say it
        print(f"note: {note}" if not note.startswith("nothing checked") else note, file=out)
    print_summary_line(result, out)


def print_summary_line(result: RunResult, out: Any = None) -> None:
    """The last line of a run, all that ``-q`` prints: ``PASS: 18 cases: 18 pass``."""
    print(f"{result.verdict}: {result.summary_line()}", file=out or sys.stdout)
