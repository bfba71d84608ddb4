"""``afdb matrix``: many reports side by side, rows grouped by root cause, worst first."""

from __future__ import annotations

import html
import json
import re

import harness.cli.main as cli
from harness.core.options import Options
from harness.core.results import CaseResult, RunResult
from harness.engine.metadata import run_metadata
from harness.reports import matrix


def _case(id_: str, status: str, message: str = "", repro: str = "") -> CaseResult:
    entry, check = id_.split("/")[:2]
    return CaseResult(id_, entry, check, 0, "s", None, status, message, repro=repro)


def _run(torch: str, cases: list[CaseResult], device: str = "cpu") -> RunResult:
    """A report as ``afdb run`` writes it, of the torch and device given."""
    md = run_metadata(Options(), started=0.0, finished=1.0)
    md.update(torch_version=torch, torch_git_version="", device=device)
    return RunResult(cases, md)


def three_runs() -> list[RunResult]:
    old = _run(
        "2.12.1",
        [
            _case("A/vmap/s0/in_dims=(0,)", "pass"),
            _case("A/vmap/s0/in_dims=(1,)", "pass"),
            _case("A/grad_of_vmap/s0/in_dims=(0,)", "pass"),
            _case("B/jvp/s0", "fail", "jvp: wrong values by 3.0"),
            _case("C/vmap/s0", "pass"),
            _case("D/vmap/s0", "unsupported", "no vmap"),
            _case("E/vmap/s0", "pass"),
        ],
    )
    mid = _run(
        "2.13.0",
        [
            _case("A/vmap/s0/in_dims=(0,)", "pass"),
            _case("A/vmap/s0/in_dims=(1,)", "pass"),
            _case("A/grad_of_vmap/s0/in_dims=(0,)", "pass"),
            _case("B/jvp/s0", "pass"),
            _case("C/vmap/s0", "pass"),
            _case("D/vmap/s0", "unsupported", "no vmap"),
            _case("E/vmap/s0", "pass"),
        ],
    )
    raised = "the Function raised RuntimeError: batching rule for aten::foo at site.py:{}"
    new = _run(
        "2.14.1",
        [
            _case("A/vmap/s0/in_dims=(0,)", "error", "vmap " + raised.format(10), "afdb repro A0"),
            _case("A/vmap/s0/in_dims=(1,)", "error", "vmap " + raised.format(11), "afdb repro A1"),
            _case("A/grad_of_vmap/s0/in_dims=(0,)", "error", "grad_of_vmap " + raised.format(12)),
            _case("B/jvp/s0", "pass"),
            _case("C/vmap/s0", "xfail", "expected failure (torch bug): x"),
            _case("D/vmap/s0", "unsupported", "no vmap"),
        ],
        device="cuda",
    )
    return [old, mid, new]


def test_rows_are_the_cases_that_differ_grouped_worst_first():
    m = matrix.build_matrix(three_runs())
    assert m.labels == ["torch 2.12.1 cpu", "torch 2.13.0 cpu", "torch 2.14.1 cuda"]
    assert m.same == 1  # D: unsupported everywhere, whatever its message
    assert m.rows == 6
    # A's three errors are one cause across vmap and grad_of_vmap; worst (error) first
    assert [(g.entry, g.statuses, len(g.rows)) for g in m.groups] == [
        ("A", ("pass", "pass", "error"), 3),
        ("B", ("fail", "pass", "pass"), 1),
        ("E", ("pass", "pass", "absent"), 1),
        ("C", ("pass", "pass", "xfail"), 1),
    ]
    a = m.groups[0]
    assert a.checks == ["vmap", "grad_of_vmap"]
    assert a.cause.startswith("vmap the Function raised RuntimeError")
    assert a.repro == "afdb repro A0"
    assert m.groups[1].cause == "jvp: wrong values by 3.0"  # the failing column explains it
    assert any("device differs" in w for w in m.warnings)


def test_cli_writes_markdown_html_json(tmp_path, capsys):
    paths = []
    for n, r in enumerate(three_runs()):
        p = tmp_path / f"r{n}.json"
        p.write_text(json.dumps(r.to_json_dict()))
        paths.append(str(p))
    md, page, js = tmp_path / "m.md", tmp_path / "m.html", tmp_path / "m.json"
    args = ["matrix", *paths, "--markdown", str(md), "--html", str(page), "--json", str(js)]
    assert cli.main([*args, "--title", "three torches"]) == 0
    out = capsys.readouterr().out
    assert "6 cases with a status that differs between runs, in 4 root causes" in out
    assert "wrote" in out
    text = md.read_text()
    assert text.startswith("# three torches\n")
    header = (
        "| # | entry | cases | checks | torch 2.12.1 cpu | torch 2.13.0 cpu | torch 2.14.1 cuda |"
    )
    assert header + " root cause |" in text
    assert "| 1 | A | 3 | vmap, grad_of_vmap | pass | pass | error |" in text
    assert "| 3 | E | 1 | vmap | pass | pass | \u2014 |" in text
    assert "- reproduce: `afdb repro A0`" in text
    data = json.loads(js.read_text())
    assert data["schema"] == "afdb-matrix/1"
    assert data["counts"] == {"groups": 4, "rows": 6, "same": 1}
    assert [r["label"] for r in data["runs"]] == [
        "torch 2.12.1 cpu",
        "torch 2.13.0 cpu",
        "torch 2.14.1 cuda",
    ]
    assert data["groups"][1]["cases"][0]["statuses"] == ["fail", "pass", "pass"]
    page_text = page.read_text()
    assert page_text.count('class="st c-bad"') == 2  # A's error, B's fail
    assert "<th>torch 2.14.1 cuda</th>" in page_text


def test_hostile_strings_are_escaped(tmp_path):
    evil = "<script>alert(1)</script> | **bold** [x](http://e) `tick` &amp;"
    runs = [
        _run("2.13.0<img src=x onerror=alert(2)>", [_case(f"Ev<b>il/vmap/s0{evil}", "pass")]),
        _run("2.14.1", [_case(f"Ev<b>il/vmap/s0{evil}", "fail", evil, repro=f"afdb repro {evil}")]),
    ]
    m = matrix.build_matrix(runs)
    assert m.rows == 1
    page = matrix.to_html(m, title=f"title {evil}")
    assert "<script>" not in page and "<img" not in page and "<b>il" not in page
    assert html.escape(evil, quote=True) in page  # shown as text, whole
    md = matrix.to_markdown(m, title=evil)
    outside_code = re.sub(r"(`+) .*? \1|`[^`]*`", "", md)  # a code span shows its text as is
    assert "<script>" not in outside_code and "<img" not in outside_code
    assert "&lt;script&gt;" in md
    table_row = next(line for line in md.splitlines() if line.startswith("| 1 |"))
    # the cells are the columns of the header: no | from the text splits a cell
    assert table_row.replace("\\|", "").count("|") == md.splitlines()[
        md.splitlines().index(table_row) - 2
    ].count("|")
    assert "\\*\\*bold\\*\\*" in md
    text = matrix.to_text(
        matrix.build_matrix([runs[0], _run("2.14.1", [_case("X/v/s", "fail", "a\x1b[2Jb")])])
    )
    assert "\x1b" not in text


def test_one_report_and_bad_reports_are_refused(tmp_path, capsys):
    p = tmp_path / "r.json"
    p.write_text(json.dumps(three_runs()[0].to_json_dict()))
    assert cli.main(["matrix", str(p)]) == 2
    assert "two or more reports" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"schema": "afdb-report/9", "cases": []}))
    assert cli.main(["matrix", str(p), str(bad)]) == 2
    err = capsys.readouterr().err
    assert "schema versions" in err and "Traceback" not in err
    assert cli.main(["matrix", str(p), str(p), "--json", str(p)]) == 2


def test_same_label_twice_is_numbered():
    a = _run("2.13.0", [_case("A/vmap/s0", "pass")])
    b = _run("2.13.0", [_case("A/vmap/s0", "fail", "x")])
    assert matrix.build_matrix([a, b]).labels == ["torch 2.13.0 cpu", "torch 2.13.0 cpu #2"]
