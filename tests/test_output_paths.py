"""Two report options naming one file, or a report naming a file the command reads, are
refused before anything runs: one line, exit 2, and every file as it was.

The same file however it is named: the same text twice, a relative and an absolute path,
a symlink and its target, two hard links.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import harness.cli.main as cli
from harness.reports import report
from tests.test_report_support import mixed_result

HOSTILE = Path(__file__).resolve().parent / "hostile_state.py"


def refused(capsys, argv: list[str], *needles: str) -> str:
    code = cli.main(argv)
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert code == 2, (argv, captured.out, err)
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert captured.out == "", captured.out  # refused before any case ran or printed
    for n in needles:
        assert n in err, err
    return err


def check_argv(*reports: str) -> list[str]:
    target = f"{HOSTILE}:Correct"
    return ["check", target, "--samples", f"{HOSTILE}:samples", "--checks", "vmap"] + [
        "--no-isolate",
        "-q",
        *reports,
    ]


@pytest.fixture
def in_tmp(tmp_path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_the_same_path_twice_is_refused_before_the_run(in_tmp, capsys):
    err = refused(
        capsys,
        check_argv("--json", "r.out", "--markdown", "r.out"),
        "--json r.out and --markdown r.out name the same file",
    )
    assert "give each report its own path" in err
    assert os.listdir(in_tmp) == []  # nothing was written


def test_one_file_under_two_names_is_refused(in_tmp, capsys):
    (in_tmp / "sub").mkdir()
    refused(capsys, check_argv("--json", "r.json", "--html", str(in_tmp / "r.json")), "--html")
    refused(capsys, check_argv("--junit", "sub/../r.xml", "--json", "./r.xml"), "--junit")
    os.symlink("r.md", in_tmp / "link.md")  # a link to a file not written yet
    refused(capsys, check_argv("--markdown", "r.md", "--html", "link.md"), "link.md")
    (in_tmp / "old.md").write_text("previous")
    os.link(in_tmp / "old.md", in_tmp / "hard.md")
    refused(capsys, check_argv("--markdown", "old.md", "--junit", "hard.md"), "hard.md")
    assert (in_tmp / "old.md").read_text() == "previous"
    assert sorted(os.listdir(in_tmp)) == ["hard.md", "link.md", "old.md", "sub"]


def test_different_paths_are_all_written(in_tmp):
    argv = check_argv("--json", "r.json", "--markdown", "r.md", "--html", "r.html")
    assert cli.main(argv) == 0
    assert {p.name for p in in_tmp.iterdir()} == {"r.json", "r.md", "r.html"}


def test_a_report_over_a_file_the_command_reads_is_refused(in_tmp, capsys):
    report.write_json(mixed_result(), in_tmp / "a.json")
    report.write_json(mixed_result(), in_tmp / "b.json")
    before = (in_tmp / "a.json").read_bytes()
    refused(capsys, ["report", "a.json", "--markdown", "a.json"], "REPORT.json")
    refused(capsys, ["report", "a.json", "--html", "x.html", "--junit", "x.html"], "same file")
    refused(capsys, ["diff", "a.json", "b.json", "--json", "./a.json"], "OLD.json")
    refused(capsys, ["diff", "a.json", "b.json", "--markdown", "x.md", "--json", "x.md"])
    refused(capsys, ["merge", "a.json", "b.json", "-o", "b.json"], "would write over b.json")
    refused(capsys, ["merge", "a.json", "-o", "m.json", "--markdown", "m.json"], "same file")
    (in_tmp / "exp.json").write_text('{"schema": "afdb-expectations/1", "expectations": []}')
    refused(
        capsys,
        check_argv("--expectations", "exp.json", "--markdown", "exp.json"),
        "--expectations",
    )
    assert (in_tmp / "a.json").read_bytes() == before
    assert sorted(os.listdir(in_tmp)) == ["a.json", "b.json", "exp.json"]
    # the reports of the same commands, each to its own file, still come
    assert cli.main(["report", "a.json", "--markdown", "a.md", "--html", "a.html"]) == 0
