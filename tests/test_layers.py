"""The layering of harness/ (pyproject's import-linter contracts) holds, and it can fail."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LINT = shutil.which("lint-imports", path=os.path.dirname(sys.executable))

pytestmark = pytest.mark.skipif(
    LINT is None,
    reason="import-linter is not installed (it comes with the test extra: pip install -e '.[test]')",
)


def _lint(root: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run(
        [str(LINT), "--config", str(root / "pyproject.toml"), "--no-cache"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _copy(tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    root.mkdir()
    shutil.copy(ROOT / "pyproject.toml", root)
    for pkg in ("harness", "autograd_function_db"):
        shutil.copytree(ROOT / pkg, root / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    return root


def test_the_layers_of_this_checkout_are_kept(tmp_path):
    out = _lint(_copy(tmp_path))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0 broken" in out.stdout


@pytest.mark.parametrize(
    "module, planted, contract",
    [
        # a check that reaches up into the report writers
        ("harness/checks/compare.py", "import harness.reports.html", "harness layers"),
        # a report that runs cases
        ("harness/reports/junit.py", "import harness.engine.runner", "reports render results"),
        # recording (above core only) reaching into the engine
        ("harness/recording/store.py", "import harness.engine.runner", "harness layers"),
        # the registry importing the harness
        ("autograd_function_db/axes.py", "import harness.core.errors", "the registry never"),
        # the engine importing the pytest wing (what its generated worker module once did)
        (
            "harness/engine/xdist_pool.py",
            "from harness.plugin.workers import worker_cases",
            "the engine names the pytest wing",
        ),
        ("harness/engine/parallel.py", "import harness.pytest_plugin", "the engine names"),
        # pytest --afdb reaching into the CLI for the recording's check
        ("harness/plugin/session.py", "import harness.cli.main", "pytest runs a recording"),
        # the session (below the CLI) calling up into it
        ("harness/session/recorded.py", "import harness.cli.check_recorded", "harness layers"),
    ],
)
def test_a_planted_forbidden_import_breaks_its_contract(tmp_path, module, planted, contract):
    root = _copy(tmp_path)
    with open(root / module, "a") as f:
        f.write(f"\n{planted}  # planted\n")
    out = _lint(root)
    assert out.returncode != 0, out.stdout
    broken = [line for line in out.stdout.splitlines() if line.endswith("BROKEN")]
    assert any(line.startswith(contract) for line in broken), out.stdout
