"""Which cases a run runs and when it stops: case id prefixes, ``--shard K/N``, ``-x`` /
``--maxfail N`` (counted after the expectations, as the summary counts them).
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from harness.core.errors import CliError, RunStopped
from harness.core.results import BAD_STATUSES, CaseResult

if TYPE_CHECKING:
    from harness.core.options import Options


def case_selection(
    entries: Sequence[Any], options: Options, args: argparse.Namespace, source: str
) -> tuple[set[str] | None, dict[str, Any] | None]:
    """The case ids to run (None: every case of the entries) and, for ``--shard``, what the
    report records about it."""
    prefixes: dict[str, list[str]] | None = getattr(args, "case_prefixes", None)
    wanted: set[str] | None = getattr(args, "case_ids", None)
    text = getattr(args, "shard", None)
    if not prefixes and wanted is None and not text:
        return None, None
    from harness.engine.parallel import enumerate_entries

    _, cases, early = enumerate_entries(entries, options)
    ids = [*early, *(c.id for c in cases)]
    if prefixes:
        ids = by_prefix(ids, prefixes)
    if wanted is not None:
        ids = [i for i in ids if i in wanted]
    if not text:
        return set(ids), None
    from harness.engine import shard

    spec = shard.Shard.parse(text)
    spec.check_count(len(ids))  # before anything is allocated per shard
    durations, baseline = shard.baseline_durations(getattr(args, "shard_durations", None), source)
    shard_of = shard.assign(ids, spec.count, durations)
    only = {i for i, s in zip(ids, shard_of) if s == spec.index - 1}
    note = {
        "index": spec.index,
        "count": spec.count,
        "balanced_by": f"durations in {baseline}" if baseline else "case counts",
        "total_cases": len(ids),
        # Each case's position in the whole run, so `afdb merge` restores the run's order.
        "positions": [n for n, s in enumerate(shard_of) if s == spec.index - 1],
        "fingerprint": shard.fingerprint(
            ids,
            shard_of,
            source=source,
            options=options.to_dict(),
            expectations=_expectations_text(getattr(args, "expectations", None)),
        ),
    }
    return only, note


def _expectations_text(path: str | None) -> str | None:
    if not path:
        return None
    from harness.core.safe_io import read_text

    return read_text(path, "--expectations")  # already read and validated: it is a file


def by_prefix(ids: list[str], prefixes: dict[str, list[str]]) -> list[str]:
    """The ids an entry's prefixes select (an entry without prefixes: all of its ids); a
    prefix that selects nothing is refused with the closest ids. An entry whose samples
    could not be built keeps its one ``samples`` record (its cases cannot be listed)."""
    from harness.sources.select import matches_prefix

    out: list[str] = []
    hit: set[str] = set()
    for i in ids:
        entry = i.split("/", 1)[0]
        mine = prefixes.get(entry)
        if mine is None or i == f"{entry}/samples":
            out.append(i)
            hit.update(p for p in mine or () if i == f"{entry}/samples")
            continue
        found = [p for p in mine if matches_prefix(i, p)]
        if found:
            out.append(i)
            hit.update(found)
    for entry, mine in prefixes.items():
        for p in mine:
            if p not in hit:
                theirs = [i for i in ids if i.startswith(entry + "/")]
                stems = sorted({"/".join(i.split("/")[: p.count("/") + 1]) for i in theirs})
                close = difflib.get_close_matches(p, stems, n=3, cutoff=0.5)
                hint = f"; did you mean {' or '.join(close)}?" if close else ""
                raise CliError(
                    f"{p!r} matches no case of {entry}{hint} (a case id reads "
                    "ENTRY/CHECK/SAMPLE/PLAN, as in a report)"
                )
    return out


class MaxFail:
    """Raises ``RunStopped`` once ``limit`` cases do not conform (after the expectations)."""

    def __init__(self, limit: int, expectations: Any = None) -> None:
        self.limit = limit
        self.expectations = expectations
        self.seen = 0

    def __call__(self, r: CaseResult) -> None:
        status = r.status
        if self.expectations is not None:
            from harness.expectations import apply

            status = apply(self.expectations, dataclasses.replace(r)).status
        if status in BAD_STATUSES:
            self.seen += 1
            if self.seen >= self.limit:
                flag = "-x" if self.limit == 1 else f"--maxfail {self.limit}"
                raise RunStopped(
                    f"stopped after {self.seen} non-conforming case{'s' if self.seen > 1 else ''}"
                    f" ({flag}); the cases after it did not run"
                )


def max_fail(args: argparse.Namespace, expectations: Any) -> MaxFail | None:
    limit = getattr(args, "maxfail", None)
    if limit is None:
        return None
    if limit < 1:
        raise CliError("--maxfail must be >= 1")
    return MaxFail(limit, expectations)
