"""A forward that rounds through float32 inside gets finite differences at the precision it
computes at (measured, ``harness/checks/fd_precision.py``), not a false alarm; a real bug
above that precision still fails, and a smooth float64 forward keeps float64's step."""

from __future__ import annotations

import torch

import harness
from harness.checks import fd_precision
from harness.checks import finite_diff as fd

from . import fd_precision_functions as pf

CHECKS = ["vjp", "jacrev", "eager_vjp"]


def statuses(result):
    return {c.id.split("/", 1)[1]: c.status for c in result.cases}


def test_the_measure_finds_float32_inside_a_float64_forward():
    x = torch.randn(6, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(0))

    def rounded(x):
        return ((torch.exp(torch.sin(x.float())) * 50).double(),)

    out = [o.double() for o in rounded(x)]
    found = fd_precision.measured_eps(rounded, fd._eval, [x], [x], out, 2.5e-4, 2.2e-16)
    assert 1e-9 < found < 1e-6  # about float32's rounding, relative


def test_a_smooth_float64_forward_keeps_its_epsilon_steep_or_not():
    x = torch.linspace(-1, 1, 9, dtype=torch.float64)
    for f in (lambda x: (torch.exp(x) * torch.sin(3 * x),), lambda x: (torch.exp(20 * x),)):
        out = [o for o in f(x)]
        eps = torch.finfo(torch.float64).eps
        assert fd_precision.measured_eps(f, fd._eval, [x], [x], out, 2.5e-4, eps) == eps


def test_the_correct_function_passes_and_fails_without_the_measure(monkeypatch):
    good = harness.check(pf.Float32Inside, pf.samples, checks=CHECKS, dtypes=("float64",))
    assert good.cases and all(s == "pass" for s in statuses(good).values()), [
        (c.id, c.status, c.message[:300]) for c in good.cases if c.status != "pass"
    ]
    monkeypatch.setattr(fd_precision, "COARSER", float("inf"))  # never trust the measure
    fd_precision._cache.clear()
    blind = harness.check(pf.Float32Inside, pf.samples, checks=CHECKS, dtypes=("float64",))
    assert any(s == "fail" for s in statuses(blind).values()), statuses(blind)


def test_a_real_bug_above_float32_noise_still_fails():
    bad = harness.check(pf.Float32InsideOff, pf.samples, checks=CHECKS, dtypes=("float64",))
    found = statuses(bad)
    assert found and all(s == "fail" for s in found.values()), found
