"""The samples' plain call before any case (issue 30, part 3): what it adds to ``afdb check``
(`pytest benchmarks/test_bench_probe.py --benchmark-only`). In-process (``harness.check``,
``--no-isolate``) it is one eager call per sample; isolated (``afdb check``'s default) it
adds one fork. Compare the two with a run of the same Function's cases in one session."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from harness.core.options import Options
from harness.engine.probe import probe_samples
from harness.sources.batch_sizes import base_samples
from harness.sources.entries import make_entry

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
import rotations  # noqa: E402


@pytest.fixture(scope="module")
def rotation():
    entry = make_entry(rotations.RotatePoints, rotations.rotation_samples)
    return entry, base_samples(entry, Options())


@pytest.mark.parametrize("isolate", [False, True], ids=["in-process", "forked"])
def test_probe(benchmark, rotation, isolate):
    entry, samples = rotation
    assert benchmark(lambda: probe_samples(entry, samples, 300, isolate=isolate)) is None


def test_the_cases_it_precedes(benchmark, rotation):
    """For scale: the vmap cases of the same Function, in this process."""
    import harness

    result = benchmark.pedantic(
        lambda: harness.check(
            rotations.RotatePoints, rotations.rotation_samples, checks=["vmap", "vjp"]
        ),
        rounds=3,
    )
    assert result.conforms
