"""Plan generation: time and plan counts per check for 1 to 8 tensor arguments
(`pytest benchmarks/test_bench_plans.py --benchmark-only`; the table: ``python -m
benchmarks.plan_counts``)."""

from __future__ import annotations

import pytest

from harness.plans.plan import ArgLayout, nested_plans, single_level_plans

from .plan_counts import counts


@pytest.mark.parametrize("n", [1, 2, 4, 8])
def test_plan_generation(benchmark, n):
    layout = ArgLayout(tuple([2] * n))
    plans = benchmark(lambda: single_level_plans(layout) + nested_plans(layout))
    for check, (old, new) in counts(n).items():
        benchmark.extra_info[f"{check} old"] = old
        benchmark.extra_info[f"{check} new"] = new
    assert plans
