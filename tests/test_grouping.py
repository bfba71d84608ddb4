"""Failures grouped by root cause: the key, the groups, and how each report shows them."""

from __future__ import annotations

import io

import expecttest

from harness.core.results import CaseResult, RunResult
from harness.reports import html as html_report
from harness.reports import report
from harness.reports.grouping import (
    clip_words,
    failure_groups,
    group_cases,
    root_cause,
    terminal_lines,
)
from harness.session.progress import print_summary


def case(entry, check, plan, status, message, **kw) -> CaseResult:
    cid = f"{entry}/{check}/s0/{plan}"
    return CaseResult(
        cid, entry, check, 0, "s0", {"id": plan, "levels": []}, status, message,
        repro=f"afdb repro '{cid}'" if status != "pass" else "", **kw,
    )  # fmt: skip


def wrong_out_dims(entry, plan, shape, ref):
    return case(
        entry, "vmap", plan, "fail",
        f"vmap {plan} (Function under vmap vs loop over slices), output 0: shape {shape}, "
        f"reference {ref} -- same sizes in another order",
    )  # fmt: skip


PLANS = ["in_dims=(None,1),B=4", "in_dims=(0,1),B=4", "in_dims=(1,-1),B=4", "in_dims=(-1,1),B=4"]
FAILS = [
    wrong_out_dims("Rot", PLANS[0], "(2, 4, 3)", "(4, 2, 3)"),
    wrong_out_dims("Rot", PLANS[1], "(2, 4, 3)", "(4, 2, 3)"),
    wrong_out_dims("Rot", PLANS[2], "(3, 4, 2)", "(4, 2, 3)"),
    wrong_out_dims("Rot", PLANS[3], "(2, 4, 3)", "(4, 2, 3)"),
    case(
        "Rot", "contract", PLANS[0], "fail",
        "contract in_dims=(None,1),B=4: vmap rule of Rot (info.batch_size=4, in_dims=(None, 1)), "
        "output 0: size 2 at out_dim 1, info.batch_size 4",
    ),
    case(
        "Rot", "contract", PLANS[2], "fail",
        "contract in_dims=(1,-1),B=4: vmap rule of Rot (info.batch_size=4, in_dims=(1, 2)), "
        "output 0: size 3 at out_dim 2, info.batch_size 4",
    ),
    case("Rot", "jvp", "", "error", "ValueError: boom (at rot.py:12 in jvp)"),
    wrong_out_dims("Other", PLANS[0], "(2, 4, 3)", "(4, 2, 3)"),  # another Function
]  # fmt: skip
PASSES = [case("Rot", "vmap", "in_dims=(0,0),B=4", "pass", "")]


def test_messages_equal_up_to_plan_ids_and_numbers_share_a_root_cause():
    keys = [root_cause(c) for c in FAILS]
    assert len(set(keys[:4])) == 1  # plans, shapes and sizes differ; the bug is one
    assert keys[4] == keys[5] != keys[0]  # the contract's wording is another cause
    assert "Rot" in keys[4] and "<plan>" in keys[4] and "4" not in keys[4]


def test_groups_split_by_entry_and_status_and_keep_report_order():
    groups = failure_groups(PASSES + FAILS)
    assert [(g.entry, g.status, g.count, g.checks) for g in groups] == [
        ("Rot", "fail", 4, ["vmap"]),
        ("Rot", "fail", 2, ["contract"]),
        ("Rot", "error", 1, ["jvp"]),
        ("Other", "fail", 1, ["vmap"]),
    ]
    assert groups[0].repro == f"afdb repro '{FAILS[0].id}'"
    assert group_cases(PASSES)[0].status == "pass"  # the HTML groups every case


def test_clip_words_never_cuts_inside_a_word():
    text = "the Function does not claim a jvp staticmethod " * 10
    short = clip_words(text, 60)
    assert len(short) <= 62 and short.endswith(" \u2026")
    assert text.startswith(short[:-2]) and text[len(short) - 2] == " "
    assert clip_words("x" * 100, 10) == "x" * 100  # no boundary: whole, not cut
    assert clip_words("short", 10) == "short"


def test_the_html_report_gives_cases_of_one_cause_one_group():
    data = html_report._data(RunResult(PASSES + FAILS))
    group = [row[-1] for row in data["cases"]]
    assert group[1] == group[2] == group[3] == group[4] != group[5] == group[6]
    assert len(set(group)) == 5  # the passes, then the four failure groups


def _many_functions(n: int, repro_first: bool = True) -> list[CaseResult]:
    """``n`` failing Functions with two root causes each (a wrong vjp, a raising jvp)."""
    out = []
    for i in range(n):
        wrong = case(f"pkg:F{i}", "vjp", "", "fail", "vjp: the gradient differs from FD")
        raised = case(f"pkg:F{i}", "jvp", "", "error", "ValueError: boom (at f.py:3 in jvp)")
        if not repro_first:
            wrong.repro = ""
        out += [wrong, raised]
    return out


def test_a_long_list_folds_root_causes_never_a_function():
    """12 failing Functions, 24 root causes, a list of 10: each Function keeps its block
    and its reproduce line; what is folded is the second cause of some of them."""
    lines = terminal_lines(failure_groups(_many_functions(12)), limit=10)
    for i in range(12):
        assert f"    reproduce: afdb repro 'pkg:F{i}/vjp/s0/'" in lines
    assert sum(ln.startswith("  FAIL ") or ln.startswith("  ERROR ") for ln in lines) == 12
    assert lines[-1] == (
        "  ... 12 more root causes (12 cases) of 12 Functions, shown above; in the reports "
        "(--json, --markdown)"
    )
    # its twin: a list long enough shows every cause, and folds nothing
    lines = terminal_lines(failure_groups(_many_functions(3)), limit=10)
    assert sum(ln.startswith("    reproduce: ") for ln in lines) == 6
    assert not lines[-1].startswith("  ... ")


def test_a_function_is_shown_by_a_cause_it_can_reproduce():
    """A Function whose first cause has no reproducer is shown by one that has (when
    only one of its causes fits); with a reproducer on both, by its first."""
    lines = terminal_lines(failure_groups(_many_functions(12, repro_first=False)), limit=10)
    for i in range(12):
        assert f"    reproduce: afdb repro 'pkg:F{i}/jvp/s0/'" in lines
    shown = terminal_lines(failure_groups(_many_functions(12)), limit=10)
    assert "    reproduce: afdb repro 'pkg:F11/jvp/s0/'" not in shown


def test_the_markdown_report_folds_causes_never_a_function():
    text = "\n".join(
        report.failures_markdown(RunResult(_many_functions(12)), max_groups=10, max_message=200)
    )
    for i in range(12):
        assert f"reproduce: `afdb repro 'pkg:F{i}/vjp/s0/'`" in text
    assert "12 more root causes (12 cases) of 12 Functions, shown above" in text


class TestPinnedMessages(expecttest.TestCase):
    """The grouped summaries, as a user reads them."""

    def test_terminal_blocks(self):
        lines = terminal_lines(failure_groups(FAILS), limit=3)
        self.assertExpectedInline(
            "\n".join(lines),
            """\
  FAIL 4 cases in vmap (one root cause)
    vmap in_dims=(None,1),B=4 (Function under vmap vs loop over slices), output 0: shape (2, 4, 3), reference (4, 2, 3) -- same sizes in another order
    cases: Rot/vmap/s0/in_dims=(None,1),B=4, Rot/vmap/s0/in_dims=(0,1),B=4, Rot/vmap/s0/in_dims=(1,-1),B=4 and 1 more
    reproduce: afdb repro 'Rot/vmap/s0/in_dims=(None,1),B=4'
  FAIL 2 cases in contract (one root cause)
    contract in_dims=(None,1),B=4: vmap rule of Rot (info.batch_size=4, in_dims=(None, 1)), output 0: size 2 at out_dim 1, info.batch_size 4
    cases: Rot/contract/s0/in_dims=(None,1),B=4, Rot/contract/s0/in_dims=(1,-1),B=4
    reproduce: afdb repro 'Rot/contract/s0/in_dims=(None,1),B=4'
  FAIL Other/vmap/s0/in_dims=(None,1),B=4
    vmap in_dims=(None,1),B=4 (Function under vmap vs loop over slices), output 0: shape (2, 4, 3), reference (4, 2, 3) -- same sizes in another order
    reproduce: afdb repro 'Other/vmap/s0/in_dims=(None,1),B=4'
  ... 1 more root cause (1 case) of Rot, shown above; in the reports (--json, --markdown)""",
        )

    def test_run_summary(self):
        out = io.StringIO()
        print_summary(RunResult(PASSES + FAILS[:4] + FAILS[6:7]), out)
        self.assertExpectedInline(
            out.getvalue(),
            """\

Rot    vmap: 1 pass, 4 fail; jvp: 1 error
  FAIL 4 cases in vmap (one root cause)
    vmap in_dims=(None,1),B=4 (Function under vmap vs loop over slices), output 0: shape (2, 4, 3), reference (4, 2, 3) -- same sizes in another order
    cases: Rot/vmap/s0/in_dims=(None,1),B=4, Rot/vmap/s0/in_dims=(0,1),B=4, Rot/vmap/s0/in_dims=(1,-1),B=4 and 1 more
    reproduce: afdb repro 'Rot/vmap/s0/in_dims=(None,1),B=4'
  ERROR Rot/jvp/s0/
    ValueError: boom (at rot.py:12 in jvp)
    reproduce: afdb repro 'Rot/jvp/s0/'
FAIL: 6 cases: 1 pass, 4 fail, 1 error
""",
        )

    def test_markdown_sections(self):
        reason = (
            "torch 2.13 bug: " + "vmap with out_dims=-1 mis-places an unbatched output " * 8
        ).strip()
        xfails = [
            case(
                "Rot",
                "vmap_nested",
                f"in_dims=({i},)",
                "xfail",
                "expected failure",
                expectation=reason,
            )
            for i in range(7)
        ]
        unsupported = [
            case(
                e,
                c,
                "",
                "unsupported",
                "the Function has no jvp staticmethod (add one to claim jvp)",
            )
            for e in ("Rot", "Other")
            for c in ("jvp", "jacfwd")
        ]
        text = report.to_markdown(RunResult(FAILS[:4] + xfails + unsupported))
        sections = text[text.index("## Failures") : text.index("## Coverage")]
        self.assertExpectedInline(
            sections,
            """\
## Failures (4 cases, 1 root cause)

- **fail** Rot: 4 cases in vmap: vmap in_dims=(None,1),B=4 (Function under vmap vs loop over slices), output 0: shape (2, 4, 3), reference (4, 2, 3) -- same sizes in another order
  - cases: `Rot/vmap/s0/in_dims=(None,1),B=4`, `Rot/vmap/s0/in_dims=(0,1),B=4`, `Rot/vmap/s0/in_dims=(1,-1),B=4` and 1 more
  - reproduce: `afdb repro 'Rot/vmap/s0/in_dims=(None,1),B=4'`

## Expected failures (7 cases, 1 reason)

- 7 cases: torch 2.13 bug: vmap with out_dims=-1 mis-places an unbatched output vmap with out_dims=-1 mis-places an unbatched output vmap with out_dims=-1 mis-places an unbatched output vmap with out_dims=-1 mis-places an unbatched output vmap with out_dims=-1 mis-places an unbatched output vmap with out_dims=-1 mis-places an unbatched output vmap with out_dims=-1 mis-places an unbatched output vmap with out_dims=-1 mis-places an unbatched output
  - `Rot/vmap_nested/s0/in_dims=(0,)`, `Rot/vmap_nested/s0/in_dims=(1,)`, `Rot/vmap_nested/s0/in_dims=(2,)`, `Rot/vmap_nested/s0/in_dims=(3,)`, `Rot/vmap_nested/s0/in_dims=(4,)` and 2 more

## Unsupported (4 entry x check, 1 reason)

- the Function has no jvp staticmethod (add one to claim jvp)
  - Rot / jvp, Rot / jacfwd, Other / jvp, Other / jacfwd

""",
        )


def test_a_check_name_inside_a_reason_is_not_taken_for_the_plan():
    a = case("A", "jvp", "", "unsupported", "no jvp staticmethod: add one")
    b = case("A", "jacfwd", "", "unsupported", "no jvp staticmethod: add one")
    assert root_cause(a) == root_cause(b) == "no jvp staticmethod: add one"


def test_reports_without_the_expectation_field_still_group_expected_failures_by_reason():
    reason = "torch bug (pytorch/pytorch#1, #2): f(x) fails"
    old = [
        case("A", "vmap", f"in_dims=({i},)", "xfail", f"expected failure ({reason}): size {i}")
        for i in range(3)
    ]
    text = report.to_markdown(RunResult(old))
    assert f"- 3 cases: {report.md_escape(reason)}\n" in text
