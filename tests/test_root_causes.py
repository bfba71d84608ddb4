"""One bug, one group: failures grouped by root cause across checks, naming the user's code.

The planted bugs are in ``tests/planted_causes.py`` and ``examples/rotations.py``; their
correct twin, ``RotatePoints``, conforms.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from harness import assert_conforms, check
from harness.core.results import CaseResult
from harness.reports import grouping
from harness.reports.grouping import failure_groups, group_cases
from tests import planted_causes as planted

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
import rotations  # noqa: E402

VMAP_CHECKS = ["vmap", "vmap_nested", "contract", "grad_of_vmap", "vmap_of_vjp"]
#: The suite's own exception classes: never in a message a user reads.
INTERNAL_NAMES = re.compile(
    r"\b(FunctionRaised|CheckFailure|ReferenceRaised|NonFiniteSample|Unsupported|CaseTimeout)\b"
)


@pytest.fixture(scope="module")
def ignores_in_dims_1():
    return check(planted.IgnoresInDims1, rotations.rotation_samples, checks=VMAP_CHECKS)


def test_a_rule_that_ignores_in_dims_1_is_one_group_over_every_check(ignores_in_dims_1):
    r = ignores_in_dims_1
    bad = [c for c in r.cases if c.status == "error"]
    assert bad and {c.check for c in bad} == set(VMAP_CHECKS)
    groups = failure_groups(r.cases)
    assert len(groups) == 1, [g.first.message for g in groups]
    assert groups[0].count == len(bad) and set(groups[0].checks) == set(VMAP_CHECKS)


def test_the_message_names_the_rule_where_the_failure_entered_the_users_code(ignores_in_dims_1):
    for c in ignores_in_dims_1.cases:
        if c.status != "error":
            continue
        # The rule's frame first (the bug is there), then where numpy raised below it.
        assert "the Function raised ValueError: operands could not be broadcast" in c.message
        assert "(in IgnoresInDims1.vmap at tests/planted_causes.py:" in c.message, c.message
        assert "; raised at site-packages/numpy/" in c.message, c.message
        assert not INTERNAL_NAMES.search(c.message), c.message


def test_the_sub_check_stays_in_the_message_without_the_wrapper(ignores_in_dims_1):
    composite = next(c for c in ignores_in_dims_1.cases if c.check == "grad_of_vmap" and c.message)
    plan = composite.plan["id"]
    assert composite.message.startswith(f"grad_of_vmap {plan} forward: the Function raised ")


def test_the_correct_twin_conforms():
    assert check(rotations.RotatePoints, rotations.rotation_samples, checks=VMAP_CHECKS).ok


def test_wrong_out_dims_is_one_group_led_by_the_rule_contract():
    r = check(rotations.BrokenRotatePoints, rotations.rotation_samples)
    bad = r.failures()
    assert len({c.check for c in bad}) >= 6 and {c.status for c in bad} == {"fail", "error"}
    groups = failure_groups(r.cases)
    assert len(groups) == 1
    g = groups[0]
    assert g.count == len(bad)
    assert g.first.check == "contract" and "vmap rule of BrokenRotatePoints" in g.first.message
    assert not any(INTERNAL_NAMES.search(c.message) for c in bad)


def test_a_second_bug_keeps_its_own_group():
    """Wrong out_dims and a wrong backward: the backward's failures (vjp, at no vmap plan) are
    not put under the rule's contract; vjp_of_vjp, which says it follows from vjp, joins vjp,
    and so do jacrev and the float32 leg of vjp, which fail where vjp does (issue 30)."""
    r = check(planted.RuleAndBackwardBugs, rotations.rotation_samples)
    groups = failure_groups(r.cases)
    assert groups[0].first.check == "contract"
    assert not {"vjp", "vjp_of_vjp", "jacrev"} & set(groups[0].checks)
    backward = next(g for g in groups if "vjp" in g.checks)
    assert backward.checks == ["vjp", "vjp_of_vjp", "jacrev"]
    assert backward.follows_text == "the float32 leg and jacrev fail where vjp does"


def _case(check, plan, status, message, sample=0):
    levels = [{"in_dims": list(plan), "batch_size": 4}] if plan is not None else []
    pid = f"in_dims={plan}" if plan is not None else ""
    cid = f"F/{check}/s{sample}" + (f"/{pid}" if pid else "")
    return CaseResult(cid, "F", check, sample, f"s{sample}", {"id": pid, "levels": levels},
                      status, message)  # fmt: skip


def test_only_groups_wholly_at_the_contracts_failing_plans_join_it():
    cases = [
        _case("contract", (0, 1), "fail", "contract: output 0: size 2 at out_dim 1"),
        _case("vmap", (0, 1), "fail", "vmap: output 0: shape (2, 4, 3), reference (4, 2, 3)"),
        # at a plan where the contract passed too: a cause of its own
        _case("grad_of_vmap", (0, 1), "fail", "grad_of_vmap: values differ by 2"),
        _case("grad_of_vmap", (0, 0), "fail", "grad_of_vmap: values differ by 3"),
        # another sample's plan
        _case("vmap_of_vjp", (0, 1), "error", "the Function raised X: y", sample=1),
        # the suite's own bug never joins
        _case("vmap_of_jvp", (0, 1), "internal", "internal error of the suite"),
    ]
    groups = group_cases(cases)
    assert [[c.check for c in g.cases] for g in groups] == [
        ["contract", "vmap"],
        ["grad_of_vmap", "grad_of_vmap"],
        ["vmap_of_vjp"],
        ["vmap_of_jvp"],
    ]
    assert (
        grouping.join_rule_consequences(groups[1:]) == groups[1:]
    )  # no contract failure: unchanged


def test_assert_conforms_groups_as_the_cli_does():
    with pytest.raises(AssertionError) as info:
        assert_conforms(rotations.BrokenRotatePoints, rotations.rotation_samples, checks=["vmap"])
    lines = str(info.value).splitlines()
    assert lines[0] == "BrokenRotatePoints: 8 of 18 cases do not conform, 1 root cause:"
    assert lines[1] == "  FAIL 8 cases in vmap (one root cause)"
    assert lines[2].startswith("    vmap in_dims=") and "output 0: shape (2, 4, 3)" in lines[2]
    assert (
        lines[3].startswith("    cases: BrokenRotatePoints/vmap/s0/") and "and 5 more" in lines[3]
    )
    assert lines[4].startswith("    reproduce: afdb repro 'BrokenRotatePoints/vmap/s0/")
    assert "rotations:BrokenRotatePoints --samples rotations:rotation_samples" in lines[4]
    assert lines[-1] == "FAIL: 18 cases: 10 pass, 8 fail"
    assert len(lines) == 6  # 8 failures of one cause: one block, not 16 lines
