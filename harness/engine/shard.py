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

import heapq
import json
import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.core.errors import UsageError
from harness.core.paths import SUITE_ROOT

_SHARD = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")

#: Where committed baselines live (their per-case durations balance the shards).
BASELINE_DIR = SUITE_ROOT / "reports" / "baseline"


@dataclass(frozen=True)
class Shard:
    index: int  # 1-based, as typed
    count: int

    @classmethod
    def parse(cls, text: str) -> Shard:
        m = _SHARD.match(text or "")
        if not m:
            raise UsageError(f"--shard must look like K/N (e.g. 2/3, shard 2 of 3); got {text!r}")
        k, n = int(m[1]), int(m[2])
        if n < 1 or not 1 <= k <= n:
            raise UsageError(
                f"--shard {text}: K must be between 1 and N (N >= 1), e.g. 1/{max(n, 2)}"
            )
        return cls(k, n)

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def baseline_durations(path: str | Path | None, source: str) -> tuple[dict[str, float], str]:
    """Per-case durations from ``path`` (or the committed baseline of ``source``), and its name.

    An empty dict (and '') when there is none: the split then goes by counts.
    """
    candidates: list[Path] = []
    if path:
        candidates = [Path(path)]
    elif BASELINE_DIR.is_dir():
        candidates = sorted(BASELINE_DIR.glob("*.json"), reverse=True)
    for p in candidates:
        try:
            with open(p, encoding="utf-8") as f:
                data = json.load(f)
            if not path and (data.get("metadata") or {}).get("source", "afdb") != source:
                continue
            durations = {
                c["id"]: float(c.get("duration_s") or 0.0)
                for c in data["cases"]
                if isinstance(c, dict) and isinstance(c.get("id"), str)
            }
        except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError) as e:
            if path:
                raise UsageError(
                    f"--shard-durations {path}: not a readable afdb JSON report ({e})"
                ) from None
            continue
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
    shard_of = assign(ids, shard.count, durations)
    return {i for i, s in zip(ids, shard_of) if s == shard.index - 1}


__all__ = ["Shard", "assign", "baseline_durations", "select"]
