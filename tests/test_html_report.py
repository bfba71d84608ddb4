"""The HTML report without a browser: it is the shipped template and static files, Jinja2
loads only when a page is written, the grid splits a cell whose cases differ, and the
title's dtype is a dtype. (tests/test_browser.py drives the same page in Chromium.)"""

from __future__ import annotations

import re
import subprocess
import sys
from html.parser import HTMLParser
from importlib import resources
from pathlib import Path

import pytest

from harness.core.results import CaseResult, RunResult
from harness.reports import html as html_report
from harness.reports import report
from tests.test_report_support import HOSTILE_NAME, mixed_result, split_result

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ("templates/report.html.j2", "static/report.js", "static/report.css")


class Grid(HTMLParser):
    """The grid's cells as the page writes them: attributes and the segments inside."""

    def __init__(self, page: str) -> None:
        super().__init__(convert_charrefs=True)
        self.cells: dict[tuple[str, str], dict] = {}
        self._cell: dict | None = None
        self.feed(page)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "button" and "cell" in (a.get("class") or "").split():
            self._cell = {**a, "segments": []}
            self.cells[(a["data-entry"], a["data-check"])] = self._cell
        elif tag == "i" and self._cell is not None:
            grow = re.fullmatch(r"flex-grow: (\d+)", a.get("style", ""))
            assert grow, a
            self._cell["segments"].append((a["class"], int(grow.group(1))))

    def handle_endtag(self, tag):
        if tag == "button":
            self._cell = None


# --- item: templates and static files, Jinja2 loaded lazily -----------------------------------


def test_the_page_is_the_shipped_template_and_static_files():
    files = resources.files("harness.reports")
    texts = {name: files.joinpath(name).read_text("utf-8") for name in SHIPPED}
    page = html_report.to_html(mixed_result())
    assert texts["static/report.js"] in page and texts["static/report.css"] in page
    assert page.count("<script") == 2 and "http://" not in page.replace('"http://www.w3', "")
    source = Path(html_report.__file__).read_text()
    assert not re.search(
        r"<(html|body|table|tr|td|th|div|button|style)[ >]", source
    )  # no markup in Python


def test_the_wheel_and_the_sdist_carry_the_templates():
    """pyproject's package data, MANIFEST.in and the wheel check of .ci/run name each file."""
    tomllib = pytest.importorskip("tomllib", reason="tomllib needs Python 3.11+")
    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"
    ]["harness"]
    manifest = (ROOT / "MANIFEST.in").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    for name in SHIPPED:
        rel = f"reports/{name}"
        assert (ROOT / "harness" / rel).is_file(), rel
        assert any(Path(rel).match(p) and p.count("/") == rel.count("/") for p in patterns), rel
        folder, ext = rel.rsplit("/", 1)[0], rel.rsplit(".", 1)[1]
        assert re.search(rf"recursive-include harness/{folder} .*\*\.{ext}\b", manifest), rel
        assert f"harness/{rel}" in ci, rel


def test_jinja2_is_imported_only_when_a_page_is_written():
    code = (
        "import sys\n"
        "import harness.reports.html as h, harness.cli.main\n"
        "from harness.core.results import RunResult\n"
        "assert 'jinja2' not in sys.modules, 'imported with the module'\n"
        "h.to_html(RunResult([], {}))\n"
        "assert 'jinja2' in sys.modules, 'the page did not come from the template'\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_autoescaping_covers_metadata_and_the_grid():
    r = mixed_result()
    r.metadata["<b>key</b>"] = ["<i>a</i>", "&amp;"]
    r.metadata["torch_version"] = "<script>x</script>"
    page = html_report.to_html(r)
    assert "<b>key</b>" not in page and "&lt;b&gt;key&lt;/b&gt;" in page
    assert "&lt;i&gt;a&lt;/i&gt;, &amp;amp;" in page and "<script>x" not in page
    grid = Grid(page)
    assert (HOSTILE_NAME, "vmap") in grid.cells  # the parser reads back the name as text


# --- item: the grid shows the mix of a cell, the title a dtype ---------------------------------


def test_a_cell_whose_cases_differ_is_split_in_proportion():
    cells = Grid(html_report.to_html(split_result())).cells
    mixed = cells[("Doubler", "vmap")]
    assert mixed["class"].split() == ["cell", "mixed"] and mixed["data-class"] == "bad"
    assert mixed["segments"] == [("c-bad", 4), ("c-pass", 2)]  # worst first
    assert (
        mixed["data-mix"] == "bad:4,pass:2" and mixed["title"] == "Doubler / vmap: 4 fail, 2 pass"
    )
    uniform = cells[(HOSTILE_NAME, "vmap")]
    assert uniform["class"].split() == ["cell", "c-bad"] and uniform["segments"] == []


def test_grid_statuses_map_to_four_colours_and_not_run_cells_are_disabled():
    base = mixed_result().cases[0]
    cases = [
        CaseResult(
            **{**base.to_dict(), "id": f"E/{ch}/s{i}", "entry": "E", "check": ch, "status": s}
        )
        for i, (ch, s) in enumerate(
            [
                ("vmap", "crash"),
                ("vmap", "xfail"),
                ("vmap", "skip"),
                ("vmap", "unsupported"),
                ("vmap", "pass"),
                ("jvp", "pass"),
            ]
        )
    ]
    cases.append(CaseResult(**{**base.to_dict(), "id": "F/jvp/s0", "entry": "F", "check": "jvp"}))
    cells = Grid(html_report.to_html(RunResult(cases, {}))).cells
    assert cells[("E", "vmap")]["segments"] == [
        ("c-bad", 1),
        ("c-xfail", 1),
        ("c-pass", 1),
        ("c-unsupported", 2),
    ]
    assert cells[("F", "vmap")]["data-class"] == "notrun" and "disabled" in cells[("F", "vmap")]
    assert "disabled" not in cells[("E", "jvp")]


def _with_dtype(meta_dtype, case_dtypes):
    base = mixed_result().cases[0]
    cases = [
        CaseResult(**{**base.to_dict(), "id": f"E/vmap/s{i}", "dtype": d})
        for i, d in enumerate(case_dtypes)
    ]
    md = {"torch_version": "2.13.0", "device": "cpu"}
    if meta_dtype is not None:
        md["dtype"] = meta_dtype
    return RunResult(cases, md)


def test_the_title_names_a_dtype():
    def title(r):
        return re.search(r"<title>(.*)</title>", html_report.to_html(r)).group(1)

    assert title(_with_dtype("float64", ["float64"])).endswith(", cpu, float64")
    assert title(_with_dtype("torch.float32", ["float32"])).endswith(", cpu, float32")
    # the samples kept their own dtypes: the title names those, not "samples"
    assert title(_with_dtype("samples", ["float32", "float64+float32"])).endswith(
        ", cpu, float32, float64"
    )
    assert title(_with_dtype(None, [""])).endswith(", cpu, ?")
    headline = report.to_markdown(_with_dtype("samples", ["float64"])).splitlines()[2]
    assert headline.endswith("(torch 2.13.0, cpu, float64)"), headline
