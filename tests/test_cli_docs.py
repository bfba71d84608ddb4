"""docs/cli.md matches the command line (issue 30, part 6): every flag of every subcommand's
``--help`` is documented where that command is, the exit-status table has every status,
``-q`` prints the summary line only, and ``--help`` answers without importing torch."""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cli.main import build_parser, main

ROOT = Path(__file__).resolve().parent.parent
DOCS = (ROOT / "docs" / "cli.md").read_text()
ROT = ROOT / "examples" / "rotations.py"


def _sections(docs: str) -> list[tuple[str, str]]:
    """(heading, text) of each ``## `` section of the page."""
    parts = re.split(r"^## ", docs, flags=re.M)[1:]
    return [(p.split("\n", 1)[0], p) for p in parts]


def _where(command: str | None, docs: str) -> str:
    """The text documenting ``command``'s flags: its own section (``afdb NAME``) and the
    shared ones whose heading names it (``(`run`, `check`, `certify`)``); for the top-level
    parser, the global flags."""
    if command is None:
        return "\n".join(t for h, t in _sections(docs) if h.startswith("Global flags"))
    return "\n".join(
        t for h, t in _sections(docs) if f"`afdb {command}" in h or f"`{command}`" in h
    )


def _flags(parser: argparse.ArgumentParser) -> dict[str | None, list[str]]:
    """Every option string ``--help`` shows, per subcommand (None: ``afdb`` itself)."""
    out: dict[str | None, list[str]] = {None: []}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out[name] = [
                    o
                    for a in sub._actions
                    if a.help != argparse.SUPPRESS
                    for o in a.option_strings
                    if o not in ("-h", "--help")
                ]
        elif action.help != argparse.SUPPRESS:
            out[None] += [o for o in action.option_strings if o not in ("-h", "--help")]
    return out


def undocumented(parser: argparse.ArgumentParser, docs: str) -> list[str]:
    """``COMMAND FLAG`` for each flag of ``--help`` that the command's docs do not name
    (a whole word: ``--dtype`` does not document ``--dtypes``); ``COMMAND`` alone for a
    command with no section."""
    missing = []
    for command, flags in _flags(parser).items():
        text = _where(command, docs)
        if not text:
            missing.append(f"afdb {command}")
            continue
        for flag in flags:
            if not re.search(r"(?<![\w-])" + re.escape(flag) + r"(?![\w-])", text):
                missing.append(f"afdb {command or ''} {flag}".replace("  ", " "))
    return missing


def test_every_flag_of_every_subcommand_is_in_docs_cli():
    assert undocumented(build_parser(), DOCS) == []


def test_the_comparison_catches_an_undocumented_flag_and_command():
    """The planted twins: a flag dropped from the docs, a new flag, a new subcommand."""
    parser = build_parser()
    # every mention in check's section goes (its table row and the float32-leg sentence)
    dropped = DOCS.replace("`--dtypes LIST`", "`LIST`").replace("--dtypes float64 to skip", "skip")
    assert undocumented(parser, dropped) == ["afdb check --dtypes"]
    # --dtype is documented for repro; --dtypes must not pass on its strength
    repro = DOCS.replace("`--dtypes`, `--name`", "`--name`")
    assert undocumented(parser, repro) == ["afdb repro --dtypes"]
    # a flag documented for another command only does not count for this one
    assert undocumented(parser, DOCS.replace("`--partial`", "")) == ["afdb merge --partial"]
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    sub.choices["check"].add_argument("--frobnicate", action="store_true", help="new")
    new = sub.add_parser("frobnicate", help="a new command")
    new.add_argument("--level")
    found = undocumented(parser, DOCS)
    assert found == ["afdb check --frobnicate", "afdb frobnicate"], found


def test_the_exit_status_table_has_every_status():
    table = DOCS.split("## Exit statuses", 1)[1].split("\n## ", 1)[0]
    codes = re.findall(r"^\| (\d+) \|", table, flags=re.M)
    assert codes == ["0", "1", "2", "3", "5", "130"], codes


# --- -q: the summary line only --------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "rc", "line"),
    [
        (["check", f"{ROT}:BrokenRotatePoints"], 1, "FAIL: 18 cases: 10 pass, 8 fail"),
        (["check", f"{ROT}:RotatePoints"], 0, "PASS: 18 cases: 18 pass"),
        (["run", "NumpyMul", "--checks", "contract", "--no-expectations"], 0, "PASS: "),
        (
            ["certify", "--subclass", "torch.testing._internal.two_tensor:TwoTensor"]
            + ["MulGenerated", "--checks", "vmap"],
            0,
            "verdict: conforms on 65 cases",
        ),
    ],
    ids=["check-fails", "check-passes", "run", "certify"],
)
def test_quiet_prints_the_summary_line_only(capsys, tmp_path, argv, rc, line):
    """Before: the per-check table, the root causes (and a blank line) came first."""
    if argv[0] == "check":
        argv = [*argv, "--samples", f"{ROT}:rotation_samples", "--checks", "vmap", "--no-isolate"]
    report = tmp_path / "r.json"
    assert main([*argv, "-q", "--json", str(report)]) == rc
    out = capsys.readouterr().out
    assert out.startswith(line) and out.count("\n") == 1, out
    assert report.exists()  # the reports are written all the same
    loud = main([*argv, "--json", str(report)])
    assert loud == rc and capsys.readouterr().out.count("\n") > 2  # the twin: not quiet


# --- --help without torch -------------------------------------------------------------------

HELP_WITHOUT_TORCH = """
import contextlib, io, json, sys
from harness.cli.main import main
with contextlib.redirect_stdout(io.StringIO()) as out:
    rc = main(sys.argv[1:])
print(json.dumps({"rc": rc, "torch": "torch" in sys.modules, "usage": "usage:" in out.getvalue()}))
"""


@pytest.mark.parametrize("argv", [["--help"], ["check", "--help"], ["run", "-h"]])
def test_help_answers_without_importing_torch(argv):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        [sys.executable, "-c", HELP_WITHOUT_TORCH, *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got == {"rc": 0, "torch": False, "usage": True}, got


def test_version_still_names_torch(capsys):
    assert main(["--version"]) == 0
    assert re.match(r"afdb \S+ \(torch 2\.\d+", capsys.readouterr().out)
