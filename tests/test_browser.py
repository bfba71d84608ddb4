"""The HTML report in a real browser: headless Chromium renders the table, a filter set
through the URL hash works, markup in an entry name or an error message stays text, the
entry x check grid is drawn worst first, a cell whose cases differ shows each colour in
proportion, a click on a cell filters the case table, and the case table groups cases by root cause, collapsed until a group is clicked.

Clicks are made by a copy of the report with one more inline script at its end (the
report's own CSP allows inline scripts, and nothing else), then the DOM is dumped.

Skips when no Chromium is installed (Debian: ``apt-get install -y chromium``).
"""

from __future__ import annotations

import shutil
import subprocess
from html.parser import HTMLParser
from urllib.parse import quote

import pytest

from harness.reports.html import write_html
from tests.test_report_support import HOSTILE_MESSAGE, HOSTILE_NAME, mixed_result, split_result

CHROMIUM = next(
    (p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None
)

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        CHROMIUM is None,
        reason="headless Chromium is not installed (chromium, chromium-browser or google-chrome on PATH runs the HTML report in a browser)",
    ),
]

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--no-first-run",
    "--no-default-browser-check",
]


class Page(HTMLParser):
    """What a reader sees: the case rows (status and cell texts), the title, any <img>."""

    def __init__(self, dom: str) -> None:
        super().__init__(convert_charrefs=True)
        self.rows: list[dict] = []
        self.groups: list[dict] = []
        self.cells: list[dict] = []
        self.grid_entries: list[str] = []
        self.body: dict = {}
        self.title = ""
        self.images = 0
        self._cell: list[str] | None = None
        self._in_title = False
        self._in_grid = False
        self.feed(dom)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "body":
            self.body = a
        elif tag == "title":
            self._in_title = True
        elif tag == "img":
            self.images += 1
        elif tag == "tr" and "case" in (a.get("class") or "").split():
            self.rows.append({"status": a["data-status"], "entry": a["data-entry"], "cells": []})
        elif tag == "tr" and a.get("class") == "group":
            self.groups.append(a)
        elif tag == "table":
            self._in_grid = a.get("id") == "grid"
        elif tag == "tr" and "data-entry" in a and self._in_grid:
            self.grid_entries.append(a["data-entry"])
        elif tag == "button" and "cell" in (a.get("class") or "").split():
            self.cells.append(a)
        elif tag == "td" and self.rows and self._cell is None:
            self._cell = []

    def handle_endtag(self, tag):
        if tag == "table":
            self._in_grid = False
        if tag == "title":
            self._in_title = False
        elif tag == "td" and self._cell is not None:
            self.rows[-1]["cells"].append("".join(self._cell))
            self._cell = None
        elif tag == "tr":
            self._cell = None

    def handle_data(self, data):
        if self._in_title:
            self.title += data
        if self._cell is not None:
            self._cell.append(data)


@pytest.fixture(scope="module")
def report_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("html") / "report.html"
    result = mixed_result()
    write_html(result, path)
    return path, result


def open_page(path, fragment: str, tmp_path, *, then: str = "") -> Page:
    """The DOM after load (and after the script ``then``, run at the end of the page)."""
    if then:
        clicked = tmp_path / f"clicked-{abs(hash(then))}.html"
        page = path.read_text(encoding="utf-8")
        clicked.write_text(page.replace("</body>", f"<script>{then}</script>\n</body>"))
        path = clicked
    url = path.resolve().as_uri() + (f"#{fragment}" if fragment else "")
    proc = subprocess.run(
        [CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", url],
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return Page(proc.stdout)


def test_table_renders_failures_first(report_file, tmp_path):
    path, result = report_file
    page = open_page(path, "view=flat", tmp_path)
    assert len(page.rows) == len(result.cases) == int(page.body["data-rendered"])
    statuses = [r["status"] for r in page.rows]
    assert statuses == sorted(statuses, key=lambda s: s != "error")  # errors before passes
    assert page.title.startswith("afdb report: torch ")


def test_filters_from_the_url(report_file, tmp_path):
    path, result = report_file
    page = open_page(path, "status=pass&view=flat", tmp_path)
    assert [r["status"] for r in page.rows] == ["pass"] * 6
    page = open_page(path, "view=flat&q=" + quote("Doubler/vmap/s0/in_dims=(1,)"), tmp_path)
    assert [r["cells"][0] for r in page.rows] == ["Doubler/vmap/s0/in_dims=(1,)"]
    page = open_page(path, "view=flat&entry=" + quote(HOSTILE_NAME, safe=""), tmp_path)
    assert {r["entry"] for r in page.rows} == {HOSTILE_NAME} and len(page.rows) == 6


def test_hostile_strings_are_shown_as_text(report_file, tmp_path):
    path, _ = report_file
    page = open_page(path, "status=error&view=flat", tmp_path)
    assert len(page.rows) == 6
    row = page.rows[0]
    assert row["cells"][1] == HOSTILE_NAME  # the entry cell shows the name, markup and all
    assert row["cells"][0].startswith(HOSTILE_NAME + "/vmap/")
    assert HOSTILE_MESSAGE.split(" & ")[0] in row["cells"][5]
    assert page.images == 0  # the <img onerror> in the message did not become an element
    assert "pwned" not in page.title  # and no script from a message ran


def test_grid_has_one_cell_per_entry_and_check_worst_first(report_file, tmp_path):
    path, result = report_file
    page = open_page(path, "", tmp_path)
    assert page.grid_entries == [HOSTILE_NAME, "Doubler"]  # 6 errors before 6 passes
    cells = {(c["data-entry"], c["data-check"]): c for c in page.cells}
    assert set(cells) == {(HOSTILE_NAME, "vmap"), ("Doubler", "vmap")}
    assert cells[(HOSTILE_NAME, "vmap")]["data-class"] == "bad"
    assert cells[("Doubler", "vmap")]["data-class"] == "pass"
    assert cells[(HOSTILE_NAME, "vmap")]["title"] == f"{HOSTILE_NAME} / vmap: 6 error"  # on hover
    assert cells[("Doubler", "vmap")]["title"] == "Doubler / vmap: 6 pass"


CLICK_DOUBLER = 'document.querySelector(\'#grid button.cell[data-entry="Doubler"][data-check="vmap"]\').click();'


def test_a_click_on_a_grid_cell_filters_the_case_table(report_file, tmp_path):
    path, _ = report_file
    before = open_page(path, "", tmp_path)
    assert int(before.body["data-matching"]) == 12
    page = open_page(path, "", tmp_path, then=CLICK_DOUBLER)
    assert int(page.body["data-matching"]) == 6
    assert {g["data-entry"] for g in page.groups} == {"Doubler"}
    selected = [c for c in page.cells if "sel" in c["class"].split()]
    assert [(c["data-entry"], c["data-check"]) for c in selected] == [("Doubler", "vmap")]
    flat = open_page(path, "view=flat", tmp_path, then=CLICK_DOUBLER)
    assert [r["entry"] for r in flat.rows] == ["Doubler"] * 6


def test_the_case_table_groups_by_root_cause_collapsed(report_file, tmp_path):
    path, _ = report_file
    page = open_page(path, "", tmp_path)
    assert page.rows == [] and int(page.body["data-rendered"]) == 0  # collapsed by default
    assert [(g["data-status"], g["data-count"]) for g in page.groups] == [
        ("error", "6"),
        ("pass", "6"),
    ]
    assert all(g["aria-expanded"] == "false" for g in page.groups)
    opened = open_page(
        path,
        "",
        tmp_path,
        then="document.querySelector('tr.group[data-status=\"error\"]').click();",
    )
    assert [r["status"] for r in opened.rows] == ["error"] * 6
    assert {r["entry"] for r in opened.rows} == {HOSTILE_NAME}


MEASURE_SPLIT = """
var b = document.querySelector('#grid button.cell[data-entry="Doubler"][data-check="vmap"]');
var parts = Array.prototype.map.call(b.children, function (i) {
  return i.getBoundingClientRect().width.toFixed(3) + "=" + getComputedStyle(i).backgroundColor;
});
document.body.setAttribute("data-cell-width", b.getBoundingClientRect().width.toFixed(3));
document.body.setAttribute("data-segments", parts.join(";"));
"""


def test_a_cell_whose_cases_differ_shows_each_colour_in_proportion(tmp_path):
    path = tmp_path / "split.html"
    write_html(split_result(), path)  # Doubler / vmap: 4 fail, 2 pass
    page = open_page(path, "", tmp_path, then=MEASURE_SPLIT)
    parts = [p.split("=") for p in page.body["data-segments"].split(";")]
    widths, colours = [float(w) for w, _ in parts], [c for _, c in parts]
    assert len(widths) == 2 and colours[0] != colours[1], parts
    assert colours[0] == "rgb(179, 38, 30)"  # the failures' red, on the left
    assert abs(sum(widths) - float(page.body["data-cell-width"])) < 0.5
    assert abs(widths[0] / widths[1] - 4 / 2) < 0.1, widths
    uniform = next(c for c in page.cells if c["data-entry"] == HOSTILE_NAME)
    assert uniform["data-class"] == "bad" and "mixed" not in uniform["class"]


def test_screenshot(report_file, tmp_path):
    path, _ = report_file
    png = tmp_path / "shot.png"
    proc = subprocess.run(
        [
            CHROMIUM,
            *FLAGS,
            f"--user-data-dir={tmp_path / 'profile'}",
            "--hide-scrollbars",
            "--window-size=1200,800",
            f"--screenshot={png}",
            path.resolve().as_uri(),
        ],
        capture_output=True,
        timeout=90,
    )
    assert proc.returncode == 0 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
