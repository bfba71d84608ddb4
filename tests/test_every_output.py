"""Every check that runs the forward under vmap compares every output it returns (issue 31,
part 4): a rule that returns a wrong non-differentiable output (wrong shape, wrong values)
fails in each, the correct twin passes, and torch's un-batching bug at out_dims=-1 is
``xfail``, not a pass."""

from __future__ import annotations

import pytest
import torch

from autograd_function_db import REGISTRY
from autograd_function_db.entry import entry
from harness.core.options import Options
from harness.engine.runner import run_entries
from tests import count_outputs as co

#: The checks that run the vmapped forward and now compare its every output.
FORWARD_CHECKS = (
    "vmap",
    "vmap_nested",
    "vmap_chunked",
    "contract",
    "grad_of_vmap",
    "jvp_of_vmap",
)


def _run(cls: type, checks: tuple[str, ...]):
    e = entry(cls.__name__, cls, co.samples, jvp=True, nondiff_outputs=(1,))
    return run_entries([e], Options(checks=checks))


@pytest.mark.parametrize("check", FORWARD_CHECKS)
@pytest.mark.parametrize(
    "planted,words",
    [(co.KeepdimCount, "shape"), (co.WrongCount, "values differ")],
    ids=["wrong-shape", "wrong-values"],
)
def test_a_wrong_count_fails_every_forward_check(planted, words, check):
    results = _run(planted, (check,))
    assert results and all(r.status == "fail" for r in results), [
        (r.id, r.status) for r in results if r.status != "fail"
    ][:3]
    assert all("output 1" in r.message for r in results), results[0].message
    assert any(words in r.message for r in results), results[0].message


def test_the_correct_count_passes_every_forward_check():
    results = _run(co.SinCount, FORWARD_CHECKS)
    assert {r.id.split("/")[1] for r in results} == set(FORWARD_CHECKS)
    assert all(r.status == "pass" for r in results), [
        (r.id, r.message) for r in results if r.status != "pass"
    ][:3]


def test_checks_that_never_see_the_count_say_so():
    results = _run(co.SinCount, ("vmap_of_vjp", "vmap_of_jvp", "vmap_of_vjp_of_vjp"))
    assert results and all(r.status == "pass" for r in results)
    assert all("output 1 not compared here (not differentiable" in r.message for r in results)


@pytest.mark.skipif(not torch.__version__.startswith("2.13"), reason="torch 2.13's un-batching bug")
def test_torchs_unbatching_bug_on_the_count_is_xfail_not_pass():
    """RowSumWithCount's count at out_dims=-1 comes back from torch 2.13 with a garbage
    shape: these checks passed it without looking; now they see it and name torch's bug."""
    results = run_entries(
        [REGISTRY.get("RowSumWithCount")],
        Options(checks=("contract", "grad_of_vmap", "jvp_of_vmap")),
    )
    at_minus_one = [r for r in results if "out_dims=-1" in r.id]
    assert len(at_minus_one) == 12
    assert all(r.status == "xfail" for r in at_minus_one), [
        (r.id, r.status, r.message[:200]) for r in at_minus_one if r.status != "xfail"
    ]
    assert all("torch 2.13" in r.message and "Plain torch" in r.message for r in at_minus_one)
    assert all(r.status == "pass" for r in results if r not in at_minus_one)
