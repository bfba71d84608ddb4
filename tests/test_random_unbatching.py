"""torch's un-batching bug is torch's for random Functions too (issue 31 part 3).

A random Function whose vmap rule returns its shared draw unbatched (out_dim None, under
``randomness='same'``, the mode the autodiff checks run a random Function in) meets torch
2.13's ``_remove_batch_dim`` bug under ``grad_of_vmap`` and ``jvp_of_vmap`` at out_dims
-1 (``Target sizes: [34359738370, 4]``) and at an interior out_dim. Before, those cases
were ``error`` blamed on the Function; now ``xfail`` with a plain-torch repro of the random
case under the same transform. A rule that is really wrong still fails.
"""

from __future__ import annotations

import re

import pytest
import torch

import harness
from harness.checks.unbatching import _plain_torch
from tests import legacy_functions as lf
from tests import random_unbatching_functions as rf

CHECKS = ["grad_of_vmap", "jvp_of_vmap"]


def _repro(message: str, transform: str) -> str:
    """The plain-torch repro the message ends with."""
    return message[message.rindex(f"torch.func.{transform}(lambda x: torch.func.vmap(") :]


def test_a_correct_random_rule_meets_torchs_bug_as_xfail_with_a_plain_torch_repro():
    r = harness.check(rf.SharedMaskDropout, rf.samples, randomness=True, checks=CHECKS)
    statuses = {(c.check, c.status) for c in r.cases}
    assert statuses <= {(c, s) for c in CHECKS for s in ("pass", "xfail")}, [
        (c.id, c.status, c.message[:300]) for c in r.cases if c.status not in ("pass", "xfail")
    ]
    xfails = [c for c in r.cases if c.status == "xfail"]
    assert {c.check for c in xfails} == set(CHECKS)
    assert any(c.id.endswith("out_dims=-1") for c in xfails if c.check == "jvp_of_vmap")
    assert any(c.id.endswith("out_dims=-1") for c in xfails if c.check == "grad_of_vmap")
    for c in xfails:
        assert "out_dims=0" not in c.id.split("/")[-1]
        assert "bug, not the Function's" in c.message and "Plain torch raises" in c.message
        transform = "vjp" if c.check == "grad_of_vmap" else "jvp"
        assert f"torch.func.{transform} of vmap with out_dims=" in c.message
        repro = _repro(c.message, transform)
        assert repro.endswith("[0][1].shape")
        assert "torch.rand(4, 7)" in repro and "randomness='same'" in repro
        # the repro is plain torch, and goes wrong as the message says
        with pytest.raises(RuntimeError, match=re.escape("Target sizes: [")):
            eval(repro, {"torch": torch})  # noqa: S307 (the suite's own repro text)
        if c.id.endswith("out_dims=-1"):
            assert "Target sizes: [34359738370, 4]" in c.message
    assert r.exit_status == 0


@pytest.mark.parametrize("twin", [rf.PerSliceMaskUnderSame, lf.DropoutLikeSharedOutput])
def test_a_random_rule_that_is_really_wrong_still_fails(twin):
    samples = rf.samples if twin is rf.PerSliceMaskUnderSame else lf.dropout_samples
    r = harness.check(twin, samples, randomness=True, checks=CHECKS)
    assert not [c for c in r.cases if c.status == "xfail"], [
        c.message[:300] for c in r.cases if c.status == "xfail"
    ]
    plain = [c for c in r.cases if "out_dims" not in c.id]
    plain = [c for c in plain if c.status != "unsupported"]  # (a twin without jvp)
    assert plain and {c.status for c in plain} == {"fail"}, [(c.id, c.status) for c in plain]
    ran = [c for c in r.cases if "out_dims" in c.id and c.status != "unsupported"]
    assert ran and all(c.status in ("fail", "error") for c in ran)
    assert r.exit_status == 1


def test_the_plain_torch_repro_of_the_random_case_is_run_under_its_transform():
    for transform in ("vjp", "jvp"):
        wrong, repro = _plain_torch((4, 7), 2, -1, "same", transform)
        assert wrong.startswith("raises RuntimeError") and "34359738370" in wrong
        assert repro.startswith(f"torch.func.{transform}(") and "randomness='same'" in repro
        # out_dims=0 un-batches right: not the bug
        assert _plain_torch((4, 7), 2, 0, "same", transform)[0] == ""
    # a 0-d output: vmap alone returns the garbage shape, and the transform (which would
    # materialise it) is not run
    wrong, repro = _plain_torch((), 2, -1, "error", "jvp")
    assert wrong.startswith("returns shape (34359738368,") and repro.startswith("torch.func.vmap(")
