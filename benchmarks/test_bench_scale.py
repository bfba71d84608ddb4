"""Scale benchmarks under pytest-benchmark: `pytest benchmarks/test_bench_scale.py --benchmark-only`.

Each records its ratio (and the parts of it) in ``extra_info``; none asserts a time.
The script form, which prints the README's table: ``python -m benchmarks.scale``.
"""

from __future__ import annotations

from . import scale


def _record(benchmark, fn):
    results = benchmark.pedantic(fn, rounds=1, iterations=1)
    benchmark.extra_info.update({k: round(v, 4) for k, v in results.items()})
    benchmark.extra_info["load_average"] = scale.load_average()
    assert results


def test_workers_speedup_and_peak_rss(benchmark):
    _record(benchmark, scale.bench_workers)


def test_check_start_up_against_a_bare_import(benchmark):
    _record(benchmark, scale.bench_check)


def test_pytorch_source_against_functorch_tests(benchmark):
    _record(benchmark, scale.bench_pytorch)
