"""Shared material for the report tests: real runs of a well-behaved and a hostile Function.

The hostile one has markup in its entry name and in the error its vmap rule raises,
plus control characters that XML 1.0 cannot carry, so every report format has to
treat those strings as text.
"""

from __future__ import annotations

import functools

import torch

import harness
from harness.core.results import RunResult
from tests.hostile_functions import Double

HOSTILE_NAME = "Hostile<script>document.title='pwned'</script>"
HOSTILE_MESSAGE = (
    "<img src=x onerror=\"document.title='pwned'\"><script>document.title='pwned'</script>"
    " & ]]> \x00\x1b control"
)


class Doubler(Double):
    """x -> 2 * x with a correct vmap rule."""

    @staticmethod
    def vmap(info, in_dims, x):
        return x * 2, in_dims[0]


class HostileDoubler(Doubler):
    @staticmethod
    def vmap(info, in_dims, x):
        raise ValueError(HOSTILE_MESSAGE)


def samples(seed: int):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(5, 4, generator=g),)]


@functools.lru_cache(maxsize=1)
def _mixed() -> RunResult:
    good = harness.check(Doubler, samples, checks=["vmap"], name="Doubler")
    bad = harness.check(HostileDoubler, samples, checks=["vmap"], name=HOSTILE_NAME)
    return RunResult(good.cases + bad.cases, dict(good.metadata))


def mixed_result() -> RunResult:
    """A real run with passes and errors, the hostile entry among them (a fresh copy)."""
    r = _mixed()
    return RunResult.from_json_dict(r.to_json_dict())


def split_result() -> RunResult:
    """``mixed_result`` with four of Doubler's six vmap cases turned into failures, so the
    grid has a cell whose cases differ (4 fail, 2 pass) beside a uniform one (6 error)."""
    r = mixed_result()
    cases, turned = [], 0
    for c in r.cases:
        if c.entry == "Doubler" and turned < 4:
            turned += 1
            c = type(c)(**{**c.to_dict(), "status": "fail", "message": "vmap: values differ"})
        cases.append(c)
    return RunResult(cases, dict(r.metadata))
