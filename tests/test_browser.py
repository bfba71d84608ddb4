"""The HTML report in a real browser: headless Chromium renders the table, a filter set
through the URL hash works, and markup in an entry name or an error message stays text.

Skips when no Chromium is installed (Debian: ``apt-get install -y chromium``).
"""

from __future__ import annotations

import shutil
import subprocess
from html.parser import HTMLParser
from urllib.parse import quote

import pytest

from harness.html_report import write_html
from tests.test_report_support import HOSTILE_MESSAGE, HOSTILE_NAME, mixed_result

CHROMIUM = next(
    (p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None
)

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium is not installed"),
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
        self.body: dict = {}
        self.title = ""
        self.images = 0
        self._cell: list[str] | None = None
        self._in_title = False
        self.feed(dom)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "body":
            self.body = a
        elif tag == "title":
            self._in_title = True
        elif tag == "img":
            self.images += 1
        elif tag == "tr" and a.get("class") == "case":
            self.rows.append({"status": a["data-status"], "entry": a["data-entry"], "cells": []})
        elif tag == "td" and self.rows and self._cell is None:
            self._cell = []

    def handle_endtag(self, tag):
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


def open_page(path, fragment: str, tmp_path) -> Page:
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
    page = open_page(path, "", tmp_path)
    assert len(page.rows) == len(result.cases) == int(page.body["data-rendered"])
    statuses = [r["status"] for r in page.rows]
    assert statuses == sorted(statuses, key=lambda s: s != "error")  # errors before passes
    assert page.title.startswith("afdb report: torch ")


def test_filters_from_the_url(report_file, tmp_path):
    path, result = report_file
    page = open_page(path, "status=pass", tmp_path)
    assert [r["status"] for r in page.rows] == ["pass"] * 5
    page = open_page(path, "q=" + quote("Doubler/vmap/s0/in_dims=(1,)"), tmp_path)
    assert [r["cells"][0] for r in page.rows] == ["Doubler/vmap/s0/in_dims=(1,)"]
    page = open_page(path, "entry=" + quote(HOSTILE_NAME, safe=""), tmp_path)
    assert {r["entry"] for r in page.rows} == {HOSTILE_NAME} and len(page.rows) == 5


def test_hostile_strings_are_shown_as_text(report_file, tmp_path):
    path, _ = report_file
    page = open_page(path, "status=error", tmp_path)
    assert len(page.rows) == 5
    row = page.rows[0]
    assert row["cells"][1] == HOSTILE_NAME  # the entry cell shows the name, markup and all
    assert row["cells"][0].startswith(HOSTILE_NAME + "/vmap/")
    assert HOSTILE_MESSAGE.split(" & ")[0] in row["cells"][5]
    assert page.images == 0  # the <img onerror> in the message did not become an element
    assert "pwned" not in page.title  # and no script from a message ran


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
