"""The README's commands are the ones CI runs."""

from __future__ import annotations

import shlex
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    assert ".venv/bin/python -m pytest -n auto\n" in readme
    assert ".venv/bin/python -m pytest -n auto\n" in ci
    assert '-c constraints.txt -e ".[test]"' in readme and '-c constraints.txt -e ".[test]"' in ci


def test_constraints_pin_the_cpu_torch():
    assert "torch==2.13.0" in (ROOT / "constraints.txt").read_text().split()


# --- the console blocks: every command shown runs, and prints what the README shows --------

from tests import readme_blocks as rb  # noqa: E402

BLOCKS = rb.blocks((ROOT / "README.md").read_text())


def test_the_readme_shows_console_blocks_with_summaries():
    titles = [b.title for b in BLOCKS]
    assert any("examples/rotations.py:RotatePoints" in t for t in titles), titles
    assert any("examples/rotations.py:BrokenRotatePoints" in t for t in titles), titles
    summaries = [ln for b in BLOCKS for s in b.steps for ln in s.expected if rb._SUMMARY.match(ln)]
    assert len(summaries) >= 2 and all("..." not in s for s in summaries), summaries


@pytest.mark.parametrize("block", BLOCKS, ids=[b.title[:60] for b in BLOCKS])
def test_readme_console_block_matches_a_real_run(block, tmp_path):
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    for step, output, _ in rb.run_block(block, tmp_path):
        assert rb.matches(step.expected, output), rb.problem(step, output)


def test_the_block_matcher_catches_drift():
    expected = (
        "head",
        "...",
        "  FAIL vmap           9 pass, 8 fail",
        "  ...",
        "FAIL: 9 cases: 9 fail",
    )
    good = "head\nnoise\nmore\n  FAIL vmap           9 pass, 8 fail\n  ok   jvp 1 pass\nFAIL: 9 cases: 9 fail\n"
    assert rb.matches(expected, good)
    assert not rb.matches(expected, good.replace("9 fail\n", "8 fail\n"))  # the summary drifted
    assert not rb.matches(expected, good.replace("8 fail", "7 fail"))  # a check's counts drifted
    assert not rb.matches(("a ... b",), "a x\nb\n")  # an in-line ... never spans lines
    assert (
        rb.refreshed(expected, good.replace("9 fail\n", "8 fail\n"))[-1] == "FAIL: 9 cases: 8 fail"
    )
    message = rb.problem(rb.Step("afdb check x", expected), "FAIL: 9 cases: 8 fail\n")
    assert "README shows: FAIL: 9 cases: 9 fail" in message
    assert "actual:       FAIL: 9 cases: 8 fail" in message and rb.UPDATE in message


# --- the GitHub Actions snippet for Function authors ----------------------------------------


def _yaml_snippet() -> str:
    readme = (ROOT / "README.md").read_text()
    start = readme.index("```yaml\nname: conformance")
    return readme[start : readme.index("```\n", start + 8)]


def test_the_ci_snippet_pins_a_cpu_torch_and_installs_the_suite_from_its_repository():
    snippet = _yaml_snippet()
    pinned = next(
        ln for ln in (ROOT / "constraints.txt").read_text().split() if ln.startswith("torch==")
    )
    assert f"pip install {pinned} --index-url https://download.pytorch.org/whl/cpu" in snippet
    assert "pip install autograd-function-db " not in snippet  # no index has it
    assert "autograd-function-db @ git+https://" in snippet


def test_the_ci_snippet_command_is_a_valid_afdb_check():
    from harness.cli.main import build_parser

    snippet = _yaml_snippet()
    command = snippet[snippet.index("afdb check") :].split("\n      - name")[0]
    argv = shlex.split(command.replace("\\\n", " "))
    args = build_parser().parse_args(argv[1:])
    assert args.command == "check" and args.junit and args.markdown and args.json
