"""Every report format from one run, validated; the schema validator; atomic and partial writes."""

from __future__ import annotations

import json
import os
import re
import sys
import types
import xml.etree.ElementTree as ET

import pytest

import harness.cli.main as cli
from harness.core import schema
from harness.core.results import BAD_STATUSES, STATUSES, RunResult
from harness.reports import html as html_report
from harness.reports import junit, report
from tests.test_report_support import HOSTILE_NAME, mixed_result


def read(path) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def run_cli(*argv: str) -> int:
    return cli.main(list(argv))


@pytest.fixture(scope="module")
def one_run(tmp_path_factory):
    """One real run of two registry entries, written in every format."""
    d = tmp_path_factory.mktemp("run")
    paths = {
        k: str(d / f"report.{ext}")
        for k, ext in (("json", "json"), ("markdown", "md"), ("html", "html"), ("junit", "xml"))
    }
    args = ["run", "NumpyCube", "CubeGenerated", "--checks", "vmap,contract", "-q"]
    for flag, path in paths.items():
        args += [f"--{flag}", path]
    assert run_cli(*args) == 0
    return paths


def test_every_format_from_one_run(one_run):
    data = schema.read_report(one_run["json"])  # validates
    cases = data["cases"]
    assert data["schema"] == "afdb-report/1"
    assert {c["entry"] for c in cases} == {"NumpyCube", "CubeGenerated"}
    md = data["metadata"]
    for key in (
        "suite_version",
        "torch_version",
        "torch_git_version",
        "python",
        "platform",
        "device",
        "dtype",
        "seed",
        "batch_sizes",
        "plan_strategy",
        "started",
        "finished",
        "command",
    ):
        assert md[key] not in (None, ""), key
    assert md["command"][:2] == ["afdb", "run"]
    assert md["interrupted"] is False

    text = read(one_run["markdown"])
    assert "**PASS**" in text and f"{len(cases)} cases" in text
    assert "| NumpyCube |" in text and "## Coverage" in text and "## Unsupported" in text

    page = read(one_run["html"])
    assert "NumpyCube/vmap/s0/in_dims=(0,)" in page
    assert "http://" not in page.replace('"http://www.w3.org', "") and "https://" not in page

    root = ET.parse(one_run["junit"]).getroot()
    testcases = root.iter("testcase")
    assert sorted(t.get("name") for t in testcases) == sorted(c["id"] for c in cases)
    assert int(root.get("tests")) == len(cases)
    assert int(root.get("skipped")) == sum(c["status"] == "unsupported" for c in cases)


def test_report_command_renders_the_same(one_run, tmp_path):
    out = {k: str(tmp_path / f"again.{k}") for k in ("html", "markdown", "junit")}
    assert (
        run_cli("report", one_run["json"], *[a for k, p in out.items() for a in (f"--{k}", p)]) == 0
    )
    assert read(out["markdown"]) == read(one_run["markdown"])
    assert read(out["junit"]) == read(one_run["junit"])
    assert read(out["html"]) == read(one_run["html"])


def test_report_command_prints_markdown_by_default(one_run, capsys):
    assert run_cli("report", one_run["json"]) == 0
    assert capsys.readouterr().out.startswith("# autograd-function-db report")


def test_report_command_refuses_invalid(one_run, tmp_path, capsys):
    data = json.loads(read(one_run["json"]))
    data["cases"][3]["status"] = "passed"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    assert run_cli("report", str(bad), "--html", str(tmp_path / "x.html")) == 2
    err = capsys.readouterr().err
    assert "cases[3].status: 'passed' is not one of 'pass', 'fail'" in err
    assert not (tmp_path / "x.html").exists()

    bad.write_text(read(one_run["json"])[:500])
    assert run_cli("report", str(bad)) == 2
    assert "not valid JSON" in capsys.readouterr().err

    data["schema"] = "afdb-report/2"
    bad.write_text(json.dumps(data))
    assert run_cli("report", str(bad)) == 2
    assert "'afdb-report/2', but this afdb reads 'afdb-report/1'" in capsys.readouterr().err


# --- schema and validator -----------------------------------------------------------------


def test_schema_statuses_are_the_results_statuses():
    assert schema.report_schema()["$defs"]["status"]["enum"] == list(STATUSES)


def test_validator_names_the_offending_fields():
    data = mixed_result().to_json_dict()
    assert schema.schema_errors(data) == []
    data["cases"][3]["status"] = "passed"
    data["cases"][4]["plan"]["levels"][0]["batch_size"] = "2"
    data["cases"][5]["sample"] = True
    del data["metadata"]["seed"]
    data["metadata"]["batch_sizes"] = []
    errors = schema.schema_errors(data)
    assert "metadata.seed: missing (a required field)" in errors
    assert "metadata.batch_sizes: has 0 items, needs at least 1" in errors
    assert any(e.startswith("cases[3].status: 'passed' is not one of 'pass'") for e in errors)
    assert "cases[4].plan.levels[0].batch_size: '2' is not of type integer" in errors
    assert "cases[5].sample: True is not of type integer or null" in errors


def test_validator_checks_what_a_schema_cannot():
    data = mixed_result().to_json_dict()
    data["cases"][2]["id"] = data["cases"][1]["id"]
    data["summary"]["total"] += 1
    errors = schema.schema_errors(data)
    assert any("cases[2].id" in e and "repeats cases[1].id" in e for e in errors)
    assert any(e.startswith("summary.total:") for e in errors)


def test_every_shipped_schema_is_a_valid_draft_2020_12_schema():
    import jsonschema

    for name in schema.SCHEMA_NAMES:
        jsonschema.Draft202012Validator.check_schema(schema.load_schema(name))
        assert schema.load_schema(name)["$schema"].endswith("/draft/2020-12/schema")


def test_integers_are_ints_and_numbers_are_finite():
    """Python's json reads 2.0, Infinity and NaN; afdb reads these fields back as Python
    ints and finite numbers, so the schema's integer and number say so."""
    data = mixed_result().to_json_dict()
    data["metadata"]["seed"] = 2.0
    data["cases"][0]["duration_s"] = float("inf")
    data["metadata"]["wall_s"] = float("nan")
    errors = schema.schema_errors(data)
    assert "metadata.seed: 2.0 is not of type integer" in errors
    assert "cases[0].duration_s: inf is not of type number" in errors
    assert "metadata.wall_s: nan is not of type number" in errors


# --- hostile strings in every format --------------------------------------------------------


def test_hostile_strings_are_text_everywhere():
    result = mixed_result()
    assert {c.status for c in result.cases} == {"pass", "error"}
    md = report.to_markdown(result)
    prose = re.sub(r"(`+).*?\1", "", md)  # code spans show markup as text by themselves
    assert "<" not in prose and "&lt;script&gt;" in prose
    assert f"`{HOSTILE_NAME}/vmap/s0/in_dims=(0,)`" in md
    assert report.code_span("a`b|c", in_table=True) == "`` a`b\\|c ``"

    page = html_report.to_html(result)
    assert page.count("<script") == 2  # the data block and the page's own script
    assert "<img" not in page and "pwned" in page and HOSTILE_NAME not in page

    xml = junit.to_junit(result)
    root = ET.fromstring(xml)  # parses: control characters were replaced
    classnames = {t.get("classname") for t in root.iter("testcase")}
    assert classnames == {"afdb.Doubler.vmap", f"afdb.{HOSTILE_NAME}.vmap"}
    errors = list(root.iter("error"))
    assert len(errors) == sum(c.status == "error" for c in result.cases)
    assert "\\x00\\x1b control" in errors[0].text and "reproduce: afdb repro" in errors[0].text


def test_junit_maps_every_status():
    base = mixed_result()
    cases = []
    for i, status in enumerate(STATUSES):
        c = base.cases[0]
        cases.append(
            type(c)(**{**c.to_dict(), "id": f"X/vmap/s{i}", "status": status, "message": status})
        )
    root = ET.fromstring(junit.to_junit(RunResult(cases, base.metadata)))
    by_name = {t.get("name"): t for t in root.iter("testcase")}
    kinds = {c.status: [child.tag for child in by_name[c.id]] for c in cases}
    assert kinds == {
        "pass": [],
        "fail": ["failure"],
        "xpass": ["failure"],
        "error": ["error"],
        "timeout": ["error"],
        "crash": ["error"],
        "internal": ["error"],
        "unsupported": ["skipped"],
        "skip": ["skipped"],
        "xfail": ["skipped"],
    }
    assert int(root.get("failures")) + int(root.get("errors")) == len(BAD_STATUSES)


# --- Markdown coverage by API axis (when the registry has axes) -------------------------------


def test_markdown_axis_coverage_when_axes_exist(monkeypatch):
    result = mixed_result()
    fake = types.ModuleType("autograd_function_db.axes")
    fake.coverage = lambda entries: {"vmap-rule": ["Doubler", HOSTILE_NAME], "jvp": []}
    monkeypatch.setitem(sys.modules, "autograd_function_db.axes", fake)
    monkeypatch.setattr("autograd_function_db.axes", fake, raising=False)
    result.metadata["source"] = "afdb"
    text = report.to_markdown(result)
    assert "### API axes x checks" in text
    assert "| vmap-rule | 2 | 1/2 |" in text
    assert "Axes with no entry in this run: jvp" in text


def test_markdown_without_axes_still_renders(monkeypatch):
    monkeypatch.setitem(sys.modules, "autograd_function_db.axes", None)  # import fails
    text = report.to_markdown(mixed_result())
    assert "## Coverage" in text and "API axes" not in text


# --- atomic writes and interrupted runs -------------------------------------------------------


def test_write_atomic_keeps_the_previous_file(tmp_path, monkeypatch):
    path = tmp_path / "r.json"
    path.write_text("previous")

    def boom(fd):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "fsync", boom)
    with pytest.raises(KeyboardInterrupt):
        report.write_atomic(path, "x" * 100_000)
    assert path.read_text() == "previous"
    assert os.listdir(tmp_path) == ["r.json"]


def test_ctrl_c_writes_a_complete_report_marked_interrupted(tmp_path, monkeypatch):
    from harness.engine import runner

    real, calls = runner.run_case, []

    def interrupting(*args, **kwargs):
        calls.append(1)
        if len(calls) == 7:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(runner, "run_case", interrupting)
    out = tmp_path / "r.json"
    out.write_text("previous")
    code = run_cli(
        "run",
        "NumpyCube",
        "--checks",
        "vmap",
        "-q",
        "--json",
        str(out),
        "--html",
        str(tmp_path / "r.html"),
    )
    assert code == 130
    data = schema.read_report(out)
    assert data["metadata"]["interrupted"] is True
    assert len(data["cases"]) == 6
    assert "Interrupted" in (tmp_path / "r.html").read_text()
    assert "**Interrupted**" in report.to_markdown(RunResult.from_json_dict(data))


def test_write_atomic_makes_an_ordinary_file(tmp_path):
    path = tmp_path / "r.md"
    report.write_atomic(path, "x")
    umask = os.umask(0)
    os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask
    path.chmod(0o640)
    report.write_atomic(path, "y")
    assert path.stat().st_mode & 0o777 == 0o640


def test_ctrl_c_under_workers_keeps_the_finished_cases(tmp_path, monkeypatch):
    """-n (pytest-xdist engine): Ctrl-C stops the pool; the cases the workers finished count."""
    import json

    from harness.engine import xdist_pool

    monkeypatch.setenv("AFDB_WORKER_ENGINE", "xdist")

    def interrupted_pool(cmd, env, poll=None):
        folder = env["AFDB_RESULTS_DIR"]
        finished = {
            "id": "NumpyCube/vmap/s0/in_dims=(0,)",
            "entry": "NumpyCube",
            "check": "vmap",
            "sample": 0,
            "sample_name": "0d",
            "plan": None,
            "status": "pass",
        }
        with open(os.path.join(folder, "results-1.jsonl"), "w") as f:
            f.write(json.dumps(finished) + "\n")
        raise KeyboardInterrupt

    monkeypatch.setattr(xdist_pool, "run_pool", interrupted_pool)
    out = tmp_path / "r.json"
    code = run_cli("run", "NumpyCube", "--checks", "vmap", "-q", "-n", "2", "--json", str(out))
    assert code == 130
    data = schema.read_report(out)
    assert data["metadata"]["interrupted"] is True
    assert [c["id"] for c in data["cases"]] == ["NumpyCube/vmap/s0/in_dims=(0,)"]
