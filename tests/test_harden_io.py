"""No code runs from a report, no file is clobbered, bad files get one line (issue 13, 1, 2, 6-8)."""

from __future__ import annotations

import ast
import errno
import json
import os
import re
import subprocess
import sys
import threading
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import harness.cli.main as cli
from harness import check
from harness.core.results import CaseResult, RunResult
from harness.reports import html as html_report
from harness.reports import junit, report
from tests import hostile_state as hs

ROOT = Path(__file__).resolve().parent.parent
HOSTILE = Path(__file__).resolve().parent / "hostile_state.py"


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(ROOT))


def _afdb(args: list[str], cwd: Path, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "harness.cli", *args],
        capture_output=True,
        text=True,
        env=_env(),
        cwd=cwd,
        timeout=timeout,
    )


def _one_line_exit_2(proc: subprocess.CompletedProcess[str], *needles: str) -> str:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    err = proc.stderr.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    for n in needles:
        assert n in err, err
    return err


@pytest.fixture(scope="module")
def small_report(tmp_path_factory) -> Path:
    """A real `afdb check` report of the 2x Function (vmap only), written in-process."""
    d = tmp_path_factory.mktemp("rep")
    path = d / "r.json"
    # made outside the checkout: the target's absolute path is recorded as typed, so the
    # reproducer finds it from anywhere (a path under the working directory is recorded
    # relative to it, see test_portable_reports)
    mp = pytest.MonkeyPatch()
    mp.chdir(d)
    try:
        code = _check_hostile(path)
    finally:
        mp.undo()
    assert code == 0
    return path


def _check_hostile(path: Path) -> int:
    return cli.main(
        [
            "check",
            f"{HOSTILE}:Correct",
            "--samples",
            f"{HOSTILE}:samples",
            "--checks",
            "vmap",
            "--no-isolate",
            "-q",
            "--json",
            str(path),
        ]
    )


def _variant(src: Path, dst: Path, edit) -> Path:
    data = json.loads(src.read_text())
    edit(data)
    dst.write_text(json.dumps(data))
    return dst


# --- item 1: nothing from a report runs ------------------------------------------------------


HOSTILE_ID = 'X"""; open("PWNED", "w").write("1"); """ \'\'\' {x}'


@pytest.mark.parametrize("full", [False, True], ids=["minimal", "full"])
def test_repro_of_a_report_with_a_hostile_entry_name_runs_nothing(small_report, tmp_path, full):
    report_path = _variant(
        small_report,
        tmp_path / "evil.json",
        lambda d: d["metadata"]["target_spec"].update(name=HOSTILE_ID),
    )
    script = tmp_path / "repro.py"
    case_id = f"{HOSTILE_ID}/vmap/s0/in_dims=(0,)"
    named = [f"{HOSTILE}:Correct", "--samples", f"{HOSTILE}:samples"]  # named by the user
    extra = ["--full"] if full else []
    proc = _afdb(
        ["repro", case_id, *named, "--report", str(report_path), "-o", str(script), *extra],
        tmp_path,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = script.read_text()
    tree = ast.parse(text)
    doc = ast.get_docstring(tree)
    assert doc is not None and HOSTILE_ID in doc  # the id is inside the docstring's literal
    calls = [
        n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "open"
    ]
    assert not calls
    run = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=_env(),
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr  # the 2x Function is correct
    assert not (tmp_path / "PWNED").exists()
    if full:  # the full script prints the case id it reproduces (the minimal one: its docstring)
        assert HOSTILE_ID in run.stdout


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        (
            lambda d: d["metadata"]["target_spec"].update(target="__import__('os').system('x'):A"),
            "metadata.target_spec.target",
        ),
        (
            lambda d: d["metadata"]["target_spec"].update(target="tests.hostile_functions:x()"),
            "is not an attribute name",
        ),
        (
            lambda d: d["metadata"]["target_spec"].update(name="two\nlines"),
            "metadata.target_spec.name",
        ),
        (
            lambda d: d["metadata"]["target_spec"]["capabilities"].update(inplace_args="0"),
            "capabilities.inplace_args",
        ),
        (lambda d: d["metadata"].update(dtype="float3"), "metadata.dtype"),
        (lambda d: d["metadata"].update(batch_sizes=4), "metadata.batch_sizes"),
        (lambda d: d["metadata"].update(plan_cap="16"), "metadata.plan_cap"),
        (lambda d: d.update(metadata=[1, 2]), "metadata"),
        (lambda d: d.update(schema="afdb-report/2"), "afdb-report/2"),
    ],
)
def test_repro_refuses_a_malformed_report_in_one_line(small_report, tmp_path, edit, needle, capsys):
    bad = _variant(small_report, tmp_path / "bad.json", edit)
    code = cli.main(["repro", "Correct/vmap/s0/in_dims=(0,)", "--report", str(bad), "-o", "-"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and needle in err, err


# --- item 2: writes never replace what is not a regular file ---------------------------------


def test_a_report_through_a_symlink_replaces_the_target_and_keeps_the_link(tmp_path):
    target = tmp_path / "real" / "r.md"
    target.parent.mkdir()
    target.write_text("old")
    link = tmp_path / "link.md"
    link.symlink_to(target)
    report.write_atomic(link, "new")
    assert link.is_symlink() and target.read_text() == "new"
    assert sorted(p.name for p in target.parent.iterdir()) == ["r.md"]


@pytest.mark.parametrize("kind", ["device", "fifo", "dir", "link-to-device"])
def test_a_non_regular_output_is_refused_before_the_run(tmp_path, kind, capsys):
    if kind == "device":
        path = "/dev/null"
    elif kind == "fifo":
        path = str(tmp_path / "fifo")
        os.mkfifo(path)
    elif kind == "dir":
        path = str(tmp_path)
    else:
        path = str(tmp_path / "null-link")
        os.symlink("/dev/null", path)
    before = os.stat(path)
    code = cli.main(
        ["check", f"{HOSTILE}:Correct", "--samples", f"{HOSTILE}:samples", "--json", path]
    )
    out, err = capsys.readouterr()
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--json" in err, err
    assert out == ""  # refused before anything ran
    after = os.stat(path)
    assert (after.st_mode, after.st_ino) == (before.st_mode, before.st_ino)
    with pytest.raises(Exception, match="regular file"):
        report.write_atomic(path, "x")


def test_repro_output_to_a_device_is_refused(small_report, capsys):
    code = cli.main(
        [
            "repro",
            "Correct/vmap/s0/in_dims=(0,)",
            f"{HOSTILE}:Correct",
            "--samples",
            f"{HOSTILE}:samples",
            "--report",
            str(small_report),
            "-o",
            "/dev/null",
        ]
    )
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "-o" in err and "character device" in err


# --- item 6: control characters and markup from a Function -----------------------------------


def test_control_characters_and_markup_are_neutralised_everywhere(tmp_path, capsys):
    r = check(hs.RaisesControl, hs.samples, checks=["vmap"])
    assert {c.status for c in r.cases} == {"error"}
    md = report.to_markdown(r)
    assert "\x1b" not in md and "\x07" not in md and "\x00" not in md
    assert "![img](" not in md and "\\![img\\](" in md and "\\*b\\*" in md
    paths = {k: tmp_path / f"r.{k}" for k in ("md", "html", "xml", "json")}
    report.write_markdown(r, paths["md"])  # a lone surrogate does not crash the writers
    html_report.write_html(r, paths["html"])
    junit.write_junit(r, paths["xml"])
    report.write_json(r, paths["json"])
    for p in paths.values():
        p.read_bytes().decode("utf-8")  # valid UTF-8
    root = ET.fromstring(paths["xml"].read_text())
    text = "".join(e.text or "" for e in root.iter("error"))
    assert "\\x1b[31m" in text and "\x1b" not in text
    from harness.cli.check import print_check_summary

    print_check_summary(r)
    from harness.session.progress import print_summary

    print_summary(r)
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out and "\udc80" not in out
    assert "\\x1b[31mred" in out


def test_every_message_field_is_capped_in_json():
    c = CaseResult(
        "a/vmap", "a", "vmap", None, "", None, "error", "M" * 100_000, repro="R" * 50_000
    )
    d = RunResult([c]).to_json_dict()["cases"][0]
    assert (
        len(d["message"]) < 9000 and d["message"].startswith("MMM") and d["message"].endswith("MMM")
    )
    assert len(d["repro"]) < 9000


# --- item 7: bad input files -----------------------------------------------------------------


def _bad_inputs(tmp_path: Path) -> dict[str, Path]:
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    medium = tmp_path / "medium.json"
    medium.write_text(
        '{"schema": "afdb-report/1", "metadata": ' + '{"a": ' * 200 + "1" + "}" * 200 + "}"
    )
    utf = tmp_path / "utf.json"
    utf.write_bytes(b'{"schema": "afdb-report/1", "x": "\xff\xfe"}')
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    return {"deep": deep, "medium": medium, "utf": utf, "fifo": fifo}


@pytest.mark.parametrize("which", ["deep", "medium", "utf", "fifo"])
def test_bad_input_files_are_one_line_and_exit_2_for_every_reader(
    small_report, tmp_path, which, capsys
):
    bad = _bad_inputs(tmp_path)[which]
    needle = {
        "deep": "nested more than",
        "medium": "metadata.a.a.a",
        "utf": "not UTF-8",
        "fifo": "FIFO",
    }[which]
    commands = [
        ["report", str(bad)],
        ["diff", str(bad), str(small_report)],
        ["diff", str(small_report), str(bad)],
        ["repro", "Correct/vmap/s0/in_dims=(0,)", "--report", str(bad), "-o", "-"],
        [
            "check",
            f"{HOSTILE}:Correct",
            "--samples",
            f"{HOSTILE}:samples",
            "--expectations",
            str(bad),
            "--no-isolate",
        ],
    ]
    for args in commands:
        code = cli.main(args)
        err = capsys.readouterr().err.strip()
        assert code == 2, (args, err)
        assert len(err.splitlines()) == 1 and "Traceback" not in err, err
        assert needle in err, err


def test_report_renders_schema_valid_unusual_metadata(small_report, tmp_path):
    def unusual(d):
        md = d["metadata"]
        md.update(
            axes={"an axis": "not a list", "other": [1, None], "int": 5},
            torch_git_version=None,
            checks="vmap",
            command=[],
            expectations=["a", "list"],
            batch_size_note="",
            unknown_field={"nested": [1, 2]},
        )

    p = _variant(small_report, tmp_path / "unusual.json", unusual)
    for flag in ("--markdown", "--html", "--junit"):
        out = tmp_path / f"out{flag.strip('-')}"
        assert cli.main(["report", str(p), flag, str(out)]) == 0
        assert out.stat().st_size > 0


# --- item 8: I/O errors while writing --------------------------------------------------------


def test_a_full_disk_prints_the_summary_then_one_line_per_failed_write(
    tmp_path, monkeypatch, capsys
):
    real_fsync = os.fsync

    def full(fd):
        real_fsync(fd)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(report.os, "fsync", full)
    json_path, md_path = tmp_path / "r.json", tmp_path / "r.md"
    code = cli.main(
        [
            "check",
            f"{HOSTILE}:Correct",
            "--samples",
            f"{HOSTILE}:samples",
            "--checks",
            "vmap",
            "--no-isolate",
            "--json",
            str(json_path),
            "--markdown",
            str(md_path),
        ]
    )
    out, err = capsys.readouterr()
    assert code == 2
    assert re.search(r"^PASS: \d+ cases", out, re.M), out
    lines = err.strip().splitlines()
    assert len(lines) == 2 and all("No space left on device" in ln for ln in lines), err
    assert "--json" in lines[0] and "--markdown" in lines[1]
    assert not json_path.exists() and not list(tmp_path.glob(".r.*"))


class _ReplacesParent(hs.Double):
    """Replaces the report's folder by a file while the run is going on (first call)."""

    folder: Path | None = None

    @staticmethod
    def vmap(info, in_dims, x):
        f = _ReplacesParent.folder
        if f is not None and f.is_dir():
            for p in f.iterdir():
                p.unlink()
            f.rmdir()
            f.write_text("now a file")
        return x * 2, in_dims[0]


def test_the_output_folder_replaced_by_a_file_mid_run(tmp_path, capsys):
    folder = tmp_path / "out"
    folder.mkdir()
    _ReplacesParent.folder = folder
    from harness.session.execute import execute
    from harness.session.outputs import check_output_paths
    from harness.session.settings import options_from_args
    from harness.sources.entries import make_entry

    parser = cli.build_parser()
    args = parser.parse_args(["run", "--checks", "vmap", "--json", str(folder / "r.json")])
    args.argv, args.command = [], "run"
    check_output_paths(args)
    entry = make_entry(_ReplacesParent, hs.samples)
    execute([entry], options_from_args(args), args, source="user")
    out, err = capsys.readouterr()
    assert "FAIL" in out or "PASS" in out
    assert args.write_failures and "Not a directory" in err, err
    assert len(err.strip().splitlines()) == 1
    assert threading.active_count() >= 1
