"""Strength-2 covering arrays: every pair of (unit A at value p, unit B at value q) in some row.

Batching bugs hide in combinations ("argument A at its last dim while argument B
is unbatched"), and the number of all combinations grows exponentially with the
argument count. A covering array of strength 2 holds every such pair in at least
one row with a number of rows that grows roughly with the log of the number of
units. Rows are built greedily (in the manner of AETG): start with the all-first
row, then repeatedly take the first uncovered pair, try a few randomly ordered
completions that each pick, unit by unit, the value covering the most new pairs,
and keep the best. Ties and orders come from ``random.Random(seed)``, so the rows
are a deterministic function of the domains and the seed.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Sequence

Row = tuple[int, ...]  # one index into each unit's domain

#: Completions tried per new row.
CANDIDATES = 24


def _pairs(row: Row) -> set[tuple[int, int, int, int]]:
    return {(a, row[a], b, row[b]) for a, b in itertools.combinations(range(len(row)), 2)}


def exhaustive_rows(sizes: Sequence[int], allowed: Callable[[Row], bool]) -> list[Row]:
    return [r for r in itertools.product(*(range(s) for s in sizes)) if allowed(r)]


def pairwise_rows(
    sizes: Sequence[int],
    *,
    seed: int = 0,
    allowed: Callable[[Row], bool] = lambda r: True,
) -> list[Row]:
    """Rows covering every feasible pair of values of two units (one row per unit when
    there is a single unit: every value once)."""
    n = len(sizes)
    if n == 0:
        return []
    if n == 1:
        return [(v,) for v in range(sizes[0]) if allowed((v,))]
    rng = random.Random(seed)
    needed: set[tuple[int, int, int, int]] = set()
    for a, b in itertools.combinations(range(n), 2):
        for p in range(sizes[a]):
            for q in range(sizes[b]):
                needed.add((a, p, b, q))
    # A pair that no allowed row holds (e.g. both units unbatched when they are the only two).
    if n == 2:
        needed = {t for t in needed if allowed(_two(t))}
    rows: list[Row] = []
    first = tuple(0 for _ in sizes)
    if allowed(first):
        rows.append(first)
        needed -= _pairs(first)
    while needed:
        a, p, b, q = min(needed)
        best: Row | None = None
        best_gain = -1
        for _ in range(CANDIDATES):
            row = [-1] * n
            row[a], row[b] = p, q
            order = [u for u in range(n) if u not in (a, b)]
            rng.shuffle(order)
            for u in order:
                gains = []
                for v in range(sizes[u]):
                    row[u] = v
                    gain = sum(
                        1
                        for w in range(n)
                        if w != u and row[w] >= 0 and _key(u, v, w, row[w]) in needed
                    )
                    gains.append((gain, rng.random(), v))
                row[u] = max(gains)[2]
            built: Row | None = tuple(row)
            if built is not None and not allowed(built):
                built = _repair(built, sizes, allowed, (a, b), rng)
            if built is None:
                continue
            cand = built
            gain = len(_pairs(cand) & needed)
            if gain > best_gain:
                best, best_gain = cand, gain
        if best is None or best_gain <= 0:
            needed.discard((a, p, b, q))  # infeasible: no allowed row holds it
            continue
        rows.append(best)
        needed -= _pairs(best)
    return rows


def _two(t: tuple[int, int, int, int]) -> Row:
    _, p, _, q = t
    return (p, q)


def _key(u: int, v: int, w: int, x: int) -> tuple[int, int, int, int]:
    return (u, v, w, x) if u < w else (w, x, u, v)


def _repair(
    row: Row,
    sizes: Sequence[int],
    allowed: Callable[[Row], bool],
    fixed: tuple[int, int],
    rng: random.Random,
) -> Row | None:
    """An allowed row that differs from ``row`` in one free unit, if there is one."""
    free = [u for u in range(len(row)) if u not in fixed]
    rng.shuffle(free)
    for u in free:
        for v in range(sizes[u]):
            cand = tuple(v if i == u else x for i, x in enumerate(row))
            if allowed(cand):
                return cand
    return None


def covering_pairs(rows: Sequence[Row], sizes: Sequence[int]) -> set[tuple[int, int, int, int]]:
    """The pairs the rows hold (for tests and the benchmark)."""
    return set().union(*(_pairs(r) for r in rows)) if rows else set()
