"""``afdb diff``: a planted regression between two real runs is reported, and nothing else."""

from __future__ import annotations

import json
import re

import pytest

import harness.cli.main as cli
from autograd_function_db.numpy_ops import NumpyMul
from harness.core.results import CaseResult, RunResult
from harness.core.schema import ReportError
from harness.reports import diff

SELECT = ["NumpyMul", "NumpyCube", "--checks", "vmap", "-q"]


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """A clean run, and the same run with one bug planted in NumpyMul's vmap rule."""
    d = tmp_path_factory.mktemp("diff")
    old, new = d / "old.json", d / "new.json"
    assert cli.main(["run", *SELECT, "--json", str(old)]) == 0
    original = NumpyMul.vmap

    def mixes_batch_when_x_unbatched(info, in_dims, x, y):
        out, out_dim = original(info, in_dims, x, y)
        return (out.flip(out_dim) if in_dims[0] is None else out), out_dim

    mp = pytest.MonkeyPatch()
    mp.setattr(NumpyMul, "vmap", staticmethod(mixes_batch_when_x_unbatched))
    try:
        assert cli.main(["run", *SELECT, "--json", str(new)]) == 1
    finally:
        mp.undo()
    return old, new


def test_planted_regression_is_reported_exactly(two_runs, tmp_path, capsys):
    old, new = two_runs
    md, js = tmp_path / "diff.md", tmp_path / "diff.json"
    assert cli.main(["diff", str(old), str(new), "--markdown", str(md), "--json", str(js)]) == 1
    result = json.loads(js.read_text())
    old_ids = [c["id"] for c in json.loads(old.read_text())["cases"]]
    # Predicted from the bug alone: every NumpyMul vmap case whose x is unbatched.
    expected = {i for i in old_ids if re.fullmatch(r"NumpyMul/vmap/s\d+/in_dims=\(None,.*", i)}
    assert len(expected) >= 5
    assert {c["id"] for c in result["regressed"]} == expected
    assert all(c["old_status"] == "pass" and c["new_status"] == "fail" for c in result["regressed"])
    for name in ("fixed", "newly_unsupported", "changed", "other", "added", "removed"):
        assert result[name] == [], name
    assert result["counts"]["unchanged"] == len(old_ids) - len(expected)
    assert result["warnings"] == []
    text = md.read_text()
    assert "**REGRESSED**" in text
    assert f"### NumpyMul: {len(expected)} cases in vmap, pass -> fail" in text
    assert "NumpyCube" not in text.split("## Regressed", 1)[1]
    assert "reproduce: `afdb repro 'NumpyMul/vmap/s0/in_dims=(None,0)' --seed 0" in text
    assert "pass -> fail" in capsys.readouterr().out


def test_no_change(two_runs, tmp_path, capsys):
    old, _ = two_runs
    md = tmp_path / "same.md"
    assert cli.main(["diff", str(old), str(old), "--markdown", str(md)]) == 0
    assert "**NO REGRESSION**: no change" in md.read_text()
    assert "NO REGRESSION" in capsys.readouterr().out


def test_fix_is_not_a_regression(two_runs):
    old, new = two_runs
    assert cli.main(["diff", str(new), str(old), "-q"]) == 0


def _case(id_: str, status: str, message: str = "") -> CaseResult:
    entry, check = id_.split("/")[:2]
    return CaseResult(id_, entry, check, 0, "s", None, status, message)


def test_every_category():
    old = RunResult(
        [
            _case("A/vmap/s0", "pass"),
            _case("A/vmap/s1", "fail", "wrong values"),
            _case("A/jvp/s0", "pass"),
            _case("B/vmap/s0", "error", "TypeError: x"),
            _case("B/vmap/s1", "unsupported", "no vmap"),
            _case("B/vmap/s2", "pass"),
            _case("C/vmap/s0", "pass"),
            _case("D/vmap/s0", "crash", "segfault"),
        ],
        {"suite_version": "0.1.0", "seed": 0},
    )
    new = RunResult(
        [
            _case("A/vmap/s0", "timeout", "took too long"),
            _case("A/vmap/s1", "pass"),
            _case("A/jvp/s0", "unsupported", "no jvp"),
            _case("B/vmap/s0", "error", "TypeError: y"),
            _case("B/vmap/s1", "pass"),
            _case("B/vmap/s2", "pass"),
            _case("E/vmap/s0", "fail", "new and failing"),
            _case("D/vmap/s0", "fail", "wrong shape"),
        ],
        {"suite_version": "0.2.0", "seed": 1},
    )
    d = diff.diff_results(old, new)
    ids = {name: [c.id for c in d.category(name)] for name, _, _ in diff.CATEGORIES}
    assert ids == {
        "regressed": ["A/vmap/s0"],
        "fixed": ["A/vmap/s1"],
        "newly_unsupported": ["A/jvp/s0"],
        "changed": ["B/vmap/s0", "D/vmap/s0"],
        "other": ["B/vmap/s1"],
        "added": ["E/vmap/s0"],
        "removed": ["C/vmap/s0"],
    }
    assert d.unchanged == 1
    assert any(w.startswith("suite versions differ") for w in d.warnings)
    assert any(w.startswith("seed differs") for w in d.warnings)
    md = diff.to_markdown(d)
    assert "## Added (1)" in md and "| E | vmap | 1 | 1 fail |" in md
    assert "before: TypeError: x" in md and "now: TypeError: y" in md


def test_refuses_other_schema_versions_and_warns_on_suite_versions(two_runs, tmp_path, capsys):
    old, new = two_runs
    data = json.loads(new.read_text())
    data["schema"] = "afdb-report/2"
    v2 = tmp_path / "v2.json"
    v2.write_text(json.dumps(data))
    assert cli.main(["diff", str(old), str(v2)]) == 2
    err = capsys.readouterr().err
    assert (
        "'afdb-report/1'" in err and "'afdb-report/2'" in err and "different schema versions" in err
    )

    data["schema"] = "afdb-report/1"
    data["metadata"]["suite_version"] = "9.9.9"
    other = tmp_path / "other.json"
    other.write_text(json.dumps(data))
    assert cli.main(["diff", str(old), str(other), "-q"]) == 1
    assert "warning: suite versions differ (old 0.1.0, new 9.9.9)" in capsys.readouterr().err

    with pytest.raises(ReportError, match=r"cases\[0\]\.status"):
        data["cases"][0]["status"] = "passed"
        diff.diff_reports(json.loads(old.read_text()), data, "old.json", "bad.json")


def test_changes_are_grouped_by_root_cause_across_checks():
    def c(id_, status, message=""):
        entry, check = id_.split("/")[:2]
        return CaseResult(id_, entry, check, 0, "s0", None, status, message, repro=f"r {id_}")

    raised = "the Function raised ValueError: bad {} (in F.vmap at f.py:3; raised at g.py:{} in h)"
    old = RunResult([c("F/vmap/s0/in_dims=(0,)", "pass"), c("F/grad_of_vmap/s0/in_dims=(1,)", "pass"),
                     c("F/jvp/s0", "fail", "jvp: values differ")], {})  # fmt: skip
    new = RunResult(
        [
            c("F/vmap/s0/in_dims=(0,)", "error", "vmap in_dims=(0,): " + raised.format(3, 7)),
            c(
                "F/grad_of_vmap/s0/in_dims=(1,)",
                "error",
                "grad_of_vmap in_dims=(1,) forward: " + raised.format(4, 7),
            ),  # fmt: skip
            c("F/jvp/s0", "pass"),
        ],
        {},
    )
    d = diff.diff_results(old, new)
    groups = diff.cause_groups(d.regressed)
    assert [g.checks for g in groups] == [["vmap", "grad_of_vmap"]]  # one cause, two checks
    text = diff.to_text(d)
    assert "Regressed (2 cases, 1 root cause):" in text
    assert "  F: 2 cases in vmap, grad_of_vmap, pass -> error (one root cause)" in text
    md = diff.to_markdown(d)
    assert "### F: 2 cases in vmap, grad_of_vmap, pass -> error" in md
    assert "### F: 1 case in jvp, fail -> pass" in md and "- before: jvp: values differ" in md
