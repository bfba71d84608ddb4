"""The README's commands are the ones CI runs."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    assert ".venv/bin/python -m pytest -n auto\n" in readme
    assert ".venv/bin/python -m pytest -n auto\n" in ci
    assert '-c constraints.txt -e ".[test]"' in readme and '-c constraints.txt -e ".[test]"' in ci


def test_constraints_pin_the_cpu_torch():
    assert "torch==2.13.0" in (ROOT / "constraints.txt").read_text().split()
