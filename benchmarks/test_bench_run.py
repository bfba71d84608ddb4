"""Benchmarks (not part of the test suite): `pytest benchmarks/ --benchmark-only`.

* cases per second of the in-process runner over the whole database, per check family;
* where the time goes: the share of profiled time spent in torch, in the harness
  and in the registry's Functions (see ``profile_share.py`` for the script form).
"""

from __future__ import annotations

import pytest

from autograd_function_db import REGISTRY
from harness.checks.catalogue import check_names, get_check
from harness.core.options import Options
from harness.engine.runner import run_entries

from .profile_share import profile_run


def _checks(family: str) -> tuple[str, ...]:
    return tuple(n for n in check_names() if get_check(n).family == family)


@pytest.mark.parametrize("family", ["vmap", "autodiff"])
def test_cases_per_second(benchmark, family):
    checks = _checks(family)
    if not checks:
        pytest.skip(f"no {family} checks in this build")
    options = Options(checks=checks)
    results = benchmark.pedantic(
        lambda: run_entries(list(REGISTRY), options), rounds=1, iterations=1
    )
    assert results
    benchmark.extra_info["cases"] = len(results)
    if benchmark.stats is not None:  # None under --benchmark-disable (a smoke run)
        seconds = benchmark.stats.stats.mean
        benchmark.extra_info["cases_per_second"] = round(len(results) / seconds, 1)


def test_time_share(benchmark):
    shares = benchmark.pedantic(
        lambda: profile_run(Options(checks=_checks("vmap"))), rounds=1, iterations=1
    )
    benchmark.extra_info.update({k: round(v, 3) for k, v in shares.items()})
