"""Samples sources that do not fit ``examples/rotations.py``'s ``RotatePoints(R, x)``, each a
newcomer's mistake (issue 30, part 3), and right ones to compare: the suite must refuse the
wrong ones before any transform, with one line, and run the right ones."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import torch


def _pair(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    q, _ = torch.linalg.qr(torch.randn(3, 3, generator=gen, dtype=torch.float64))
    return q, torch.randn(2, 3, generator=gen, dtype=torch.float64)


def one_tuple(seed: int) -> Any:
    """One argument tuple returned without its list: each tensor reads as a sample."""
    return _pair(seed)


def a_dict(seed: int) -> Any:
    """Arguments by name: its keys would be the samples."""
    R, x = _pair(seed)
    return {"R": R, "x": x}


def one_too_many(seed: int) -> Any:
    R, x = _pair(seed)
    return [(R, x, x)]


def shapes_that_do_not_combine(seed: int) -> Any:
    R, _ = _pair(seed)
    return [(R, torch.randn(2, 4, dtype=torch.float64))]


def right(seed: int) -> Any:
    return [_pair(seed)]


def forever(seed: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Yields without end: the suite takes the first 64."""
    for k in itertools.count():
        yield _pair(seed * 1000 + k)


def yielded(seed: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """A generator of two samples (a minimal repro must index it like a list)."""
    yield _pair(seed)
    yield _pair(seed + 7)


def flaky(seed: int) -> Any:
    """Right samples, until ``AFDB_TEST_BREAK_SAMPLES`` is set: then drawing them raises (a
    repro script that fails itself, which is not a reproduction)."""
    import os

    if os.environ.get("AFDB_TEST_BREAK_SAMPLES"):
        raise RuntimeError("samples broken on purpose")
    return [_pair(seed)]
