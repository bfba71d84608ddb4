"""A merge is of one whole run; a shard count is bounded by the cases (issue 21.2, 21.4, 21.5).

`afdb merge` refuses a missing shard, cases that do not add up to the run's total and
shards of different runs (their fingerprints differ), each with one line naming what
is missing or differs; `--partial` merges what is there and says PARTIAL in every format.
`--shard` refuses more shards than cases, and any bad value, with one line.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import harness.cli.main as cli
from harness.core.results import RunResult
from harness.engine import shard as shard_module

SEL = ["run", "NumpyCube", "NumpyMul", "--checks", "vmap", "-q", "--no-expectations"]


def run_cli(capsys, *argv):
    rc = cli.main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def run_shards(capsys, tmp_path: Path, sel, count, *, only=None, tag="s") -> list[Path]:
    paths = []
    for k in only or range(1, count + 1):
        p = tmp_path / f"{tag}{k}.json"
        rc, _, err = run_cli(capsys, *sel, "--shard", f"{k}/{count}", "--json", str(p))
        assert rc == 0, err
        paths.append(p)
    return paths


@pytest.fixture
def three(capsys, tmp_path):
    return run_shards(capsys, tmp_path, SEL, 3)


def merge(capsys, tmp_path, *reports, extra=()):
    out = tmp_path / "merged.json"
    rc, stdout, err = run_cli(capsys, "merge", *map(str, reports), "-o", str(out), *extra)
    return rc, stdout, err, out


def one_line(err):
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


# --- missing shards and cases --------------------------------------------------------------


def test_a_merge_with_a_missing_shard_is_refused_naming_it(capsys, tmp_path, three):
    total = json.loads(three[0].read_text())["metadata"]["shard"]["total_cases"]
    held = sum(len(json.loads(p.read_text())["cases"]) for p in three[:2])
    rc, out, err, merged = merge(capsys, tmp_path, three[0], three[1])
    assert rc == 2 and out == "" and not merged.exists()
    line = one_line(err)
    assert "shard 3/3 missing" in line, line
    assert f"{total - held} of the run's {total} cases missing" in line, line
    assert "--partial" in line


def test_partial_merges_what_is_there_and_says_partial_in_every_format(capsys, tmp_path, three):
    md, html, junit = (tmp_path / f"m.{ext}" for ext in ("md", "html", "xml"))
    extra = ["--partial", "--markdown", str(md), "--html", str(html), "--junit", str(junit)]
    rc, out, err, merged = merge(capsys, tmp_path, three[0], three[2], extra=extra)
    assert rc == 1, err  # a partial run does not establish that the run conforms
    data = json.loads(merged.read_text())
    assert data["metadata"]["partial"]["missing_shards"] == ["2/3"]
    assert RunResult.from_json_dict(data).verdict == "PARTIAL"
    assert "PARTIAL:" in out and "partial: shard 2/3 missing" in out  # console
    text = md.read_text()
    assert "**PARTIAL**" in text and "> **Partial**: this merge is not the whole run" in text
    page = html.read_text()
    assert '<b class="PARTIAL">PARTIAL</b>' in page and "shard 2/3 missing" in page
    root = ET.fromstring(junit.read_text())
    verdicts = {p.get("value") for p in root.iter("property") if p.get("name") == "verdict"}
    assert verdicts == {"PARTIAL"}
    # the merged report is a valid report: `afdb report` renders it again, PARTIAL still
    rc, out, _ = run_cli(capsys, "report", str(merged))
    assert rc == 0 and "**PARTIAL**" in out


def test_a_merge_whose_cases_do_not_add_up_is_refused(capsys, tmp_path, three):
    """A shard that lost cases (interrupted, or edited) has fewer than its share."""
    data = json.loads(three[1].read_text())
    data["cases"].pop()
    data["metadata"]["shard"]["positions"].pop()
    short = RunResult.from_json_dict(data).to_json_dict()
    cut = tmp_path / "cut.json"
    cut.write_text(json.dumps(short))
    rc, out, err, merged = merge(capsys, tmp_path, three[0], cut, three[2])
    assert rc == 2 and not merged.exists()
    line = one_line(err)
    assert "the merge is not the whole run: 1 of the run's" in line and "missing" in line, line
    rc, _, _, merged = merge(capsys, tmp_path, three[0], cut, three[2], extra=["--partial"])
    assert rc == 1 and json.loads(merged.read_text())["metadata"]["partial"]["missing_cases"] == 1


def test_the_whole_run_still_merges_to_pass(capsys, tmp_path, three):
    rc, out, err, merged = merge(capsys, tmp_path, *reversed(three))
    assert rc == 0, err
    data = json.loads(merged.read_text())
    assert "partial" not in data["metadata"] and "PASS:" in out
    assert [s["shard"] for s in data["metadata"]["shards"]] == ["1/3", "2/3", "3/3"]


def test_a_report_that_is_not_a_shard_is_refused(capsys, tmp_path, three):
    whole = tmp_path / "whole.json"
    assert run_cli(capsys, *SEL, "--json", str(whole))[0] == 0
    rc, _, err, _ = merge(capsys, tmp_path, three[0], whole)
    assert rc == 2 and "not a shard report" in one_line(err) and str(whole) in err


# --- shards of different runs ----------------------------------------------------------------


def test_shards_of_different_selections_and_checks_are_refused(capsys, tmp_path):
    """The issue's example: shard 1/2 of `run NumpyMul --checks vmap` with shard 2/2 of
    `run NumpyCube --checks jvp` merged as PASS."""
    base = ["-q", "--no-expectations"]
    (a,) = run_shards(capsys, tmp_path, ["run", "NumpyMul", "--checks", "vmap", *base], 2, only=[1])
    (b,) = run_shards(
        capsys, tmp_path, ["run", "NumpyCube", "--checks", "jvp", *base], 2, only=[2], tag="t"
    )
    rc, out, err, merged = merge(capsys, tmp_path, a, b)
    assert rc == 2 and out == "" and not merged.exists()
    line = one_line(err)
    assert f"{b}: another run than {a}: its case ids" in line, line
    assert "fingerprint.cases" in line


@pytest.mark.parametrize(
    ("flags", "part"),
    [(["--timeout", "300"], "options"), (["--batch-size", "3"], "cases")],
)
def test_shards_with_different_options_are_refused_naming_what_differs(
    capsys, tmp_path, flags, part
):
    (a,) = run_shards(capsys, tmp_path, SEL, 2, only=[1])
    (b,) = run_shards(capsys, tmp_path, [*SEL, *flags], 2, only=[2], tag="t")
    rc, _, err, _ = merge(capsys, tmp_path, a, b)
    assert rc == 2 and f"fingerprint.{part}" in one_line(err), err


def test_shards_with_different_expectations_are_refused(capsys, tmp_path):
    exp = tmp_path / "exp.json"
    exp.write_text(
        json.dumps(
            {
                "schema": "afdb-expectations/1",
                "expectations": [{"id": "NumpyMul/vmap", "status": "skip", "reason": "a test"}],
            }
        )
    )
    sel = [a for a in SEL if a != "--no-expectations"]
    (a,) = run_shards(capsys, tmp_path, [*sel, "--no-expectations"], 2, only=[1])
    (b,) = run_shards(capsys, tmp_path, [*sel, "--expectations", str(exp)], 2, only=[2], tag="t")
    rc, _, err, _ = merge(capsys, tmp_path, a, b)
    assert rc == 2 and "fingerprint.expectations" in one_line(err), err


def test_an_edited_fingerprint_is_refused(capsys, tmp_path):
    a, b = run_shards(capsys, tmp_path, SEL, 2)
    data = json.loads(b.read_text())
    data["metadata"]["shard"]["fingerprint"]["run"] = "sha256:" + "0" * 64
    b.write_text(json.dumps(data))
    rc, _, err, _ = merge(capsys, tmp_path, a, b)
    assert rc == 2 and "fingerprint.run" in one_line(err), err


# --- the shard count and the shape of --shard --------------------------------------------


@pytest.mark.parametrize("count", ["1000", "100000000"])
def test_more_shards_than_cases_is_one_line_before_any_per_shard_work(capsys, monkeypatch, count):
    def no_split(*args, **kwargs):
        raise AssertionError("the shards were assigned before the count was checked")

    monkeypatch.setattr(shard_module, "assign", no_split)
    rc, _, err = run_cli(capsys, *SEL, "--shard", f"1/{count}")
    line = one_line(err)
    assert rc == 2 and f"--shard 1/{count}: {count} shards, but this run has" in line, line
    assert "use at most" in line


@pytest.mark.parametrize(
    "text", ["", " ", "1/2/3", "-1/2", "1/-2", "a/b", "1/2x", "1/" + "9" * 5000, "1/1e3", "½"]
)
def test_a_bad_shard_value_of_any_shape_is_one_line_exit_2(capsys, text):
    rc, out, err = run_cli(capsys, *SEL, "--shard", text)
    assert rc == 2 and out == ""
    line = one_line(err)
    assert line.startswith("afdb run: error: ") and "--shard" in line and len(line) < 200, line
