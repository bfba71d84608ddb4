"""``afdb run --shard K/N``: a deterministic, cost-balanced part of a run's cases.

Why: a CI matrix spreads a run over N machines, then ``afdb merge`` puts the
shard reports back together. Every shard computes the same split from the same
inputs (the case ids and a committed baseline's durations), so the N parts are
disjoint and together cover every case, with no coordination between runners.

The split is greedy longest-first: cases in decreasing cost (ties by id) each go
to the shard with the least total so far (ties to the lowest shard). A case's
cost is its ``duration_s`` in the baseline report; a case the baseline lacks
costs the baseline's median; with no baseline every case costs 1 (a split by
counts).
"""

from __future__ import annotations

import hashlib
import heapq
import json
import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.core.errors import UsageError
from harness.core.paths import SUITE_ROOT

_SHARD = re.compile(r"^\s*([0-9]+)\s*/\s*([0-9]+)\s*$")
#: More digits than any shard count (int() of thousands of digits is refused or slow).
_MAX_DIGITS = 9

#: Where committed baselines live (their per-case durations balance the shards).
BASELINE_DIR = SUITE_ROOT / "reports" / "baseline"


@dataclass(frozen=True)
class Shard:
    index: int  # 1-based, as typed
    count: int

    @classmethod
    def parse(cls, text: str | None) -> Shard:
        shown = repr(text) if text is None or len(text) <= 40 else repr(text[:37]) + "..."
        m = _SHARD.match(text or "")
        if not m:
            raise UsageError(f"--shard must look like K/N (e.g. 2/3, shard 2 of 3); got {shown}")
        if max(len(m[1].lstrip("0")), len(m[2].lstrip("0"))) > _MAX_DIGITS:
            raise UsageError(f"--shard {shown}: N is at most the number of cases, e.g. 2/3")
        k, n = int(m[1]), int(m[2])
        if n < 1 or not 1 <= k <= n:
            raise UsageError(
                f"--shard {k}/{n}: K must be between 1 and N (N >= 1), e.g. 1/{max(n, 2)}"
            )
        return cls(k, n)

    def check_count(self, cases: int) -> None:
        """Refuse more shards than cases (one line), before anything is allocated per shard."""
        if self.count > max(cases, 1):
            raise UsageError(
                f"--shard {self}: {self.count} shards, but this run has {cases} "
                f"case{'s' if cases != 1 else ''}; use at most {max(cases, 1)} shards"
            )

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def read_durations(path: str | Path, what: str = "--shard-durations") -> dict[str, Any]:
    """A report's case ids and durations, read like every other input file (a FIFO, bad
    UTF-8, deep nesting: one line) and validated against ``harness/schemas/durations.json``."""
    from harness.core.schema import ReportError, check_version, errors, one_line, read_json

    data = read_json(path, what)
    label = f"{what} {path}"
    check_version(data, label)
    found = errors("durations", data)
    if found:
        raise ReportError(one_line(label, "report", found))
    result: dict[str, Any] = data
    return result


def baseline_durations(path: str | Path | None, source: str) -> tuple[dict[str, float], str]:
    """Per-case durations from ``path`` (or the committed baseline of ``source``), and its name.

    An empty dict (and '') when there is none: the split then goes by counts. A file the
    user named that is not a valid report is refused (UsageError, one line); a committed
    baseline that is not is passed over.
    """
    from harness.core.schema import ReportError

    candidates: list[Path] = []
    if path:
        candidates = [Path(path)]
    elif BASELINE_DIR.is_dir():
        candidates = sorted(BASELINE_DIR.glob("*.json"), reverse=True)
    for p in candidates:
        try:
            data = read_durations(p)
        except ReportError:
            if path:
                raise
            continue
        if not path and (data.get("metadata") or {}).get("source", "afdb") != source:
            continue
        durations = {c["id"]: float(c["duration_s"]) for c in data["cases"]}
        return durations, str(p)
    return {}, ""


def assign(ids: Sequence[str], count: int, durations: dict[str, float]) -> list[int]:
    """The 0-based shard of each id (same order as ``ids``), balancing the summed cost."""
    known = [d for d in durations.values() if d > 0]
    fallback = statistics.median(known) if known else 1.0

    def cost(case_id: str) -> float:
        d = durations.get(case_id, 0.0)
        return d if d > 0 else fallback

    order = sorted(range(len(ids)), key=lambda i: (-cost(ids[i]), ids[i]))
    heap = [(0.0, s) for s in range(count)]
    shard_of = [0] * len(ids)
    for i in order:
        total, s = heapq.heappop(heap)
        shard_of[i] = s
        heapq.heappush(heap, (total + cost(ids[i]), s))
    return shard_of


def select(ids: Sequence[str], shard: Shard, durations: dict[str, float]) -> set[str]:
    """The ids shard ``shard`` runs."""
    shard.check_count(len(ids))
    shard_of = assign(ids, shard.count, durations)
    return {i for i, s in zip(ids, shard_of) if s == shard.index - 1}


def _sha256(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


#: What each part of a fingerprint covers, for the message when shards disagree.
FINGERPRINT_PARTS = {
    "cases": "case ids (the selection of entries, the checks, the plans)",
    "options": "source or run options (batch sizes, plan cap, timeout, hazard probe, ...)",
    "expectations": "expectations file",
    "split": "split of the cases (the durations that balance the shards)",
}


def fingerprint(
    ids: Sequence[str],
    shard_of: Sequence[int],
    *,
    source: str,
    options: dict[str, Any],
    expectations: str | None,
) -> dict[str, str]:
    """Digests of everything that defines a sharded run; ``afdb merge`` refuses shards whose
    digests differ. ``expectations`` is the text of the expectations file (None: none)."""
    parts = {
        "cases": _sha256(list(ids)),
        "options": _sha256({"source": source, "options": options}),
        "expectations": _sha256(expectations),
        "split": _sha256(list(shard_of)),
    }
    return {"run": _sha256(parts), **parts}


__all__ = [
    "FINGERPRINT_PARTS",
    "Shard",
    "assign",
    "baseline_durations",
    "fingerprint",
    "read_durations",
    "select",
]
