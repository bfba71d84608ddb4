"""The pytest plugin costs nothing until used: any project's pytest runs as if it were absent.

Installing the suite registers its plugin in every pytest run of the environment. These
tests run pytest in a throwaway project (a subprocess, plugin autoloading on, as a user's
``python -m pytest`` does) and look at what the plugin did to it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: A test that says what the run loaded: the suite's plugin is there, torch and the
#: harness are not.
PROBE = """
import sys


def test_probe(request):
    assert request.config.pluginmanager.has_plugin("afdb"), "the afdb plugin is not loaded"
    loaded = sorted(m for m in ("torch", "harness", "numpy") if m in sys.modules)
    print("LOADED", loaded)
    assert "torch" not in sys.modules
    assert "harness" not in sys.modules or getattr(sys.modules["harness"], "OWN", False)
"""


def _pytest(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "PYTHON"))}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", *args],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_entry_point_is_a_light_module_of_its_own():
    pyproject = (ROOT / "pyproject.toml").read_text()
    section = pyproject.split("[project.entry-points.pytest11]", 1)[1].split("\n[", 1)[0]
    assert section.strip() == 'afdb = "afdb_pytest_plugin"'
    assert 'py-modules = ["afdb_pytest_plugin"]' in pyproject  # shipped in the wheel
    installed = {ep.name: ep.value for ep in entry_points(group="pytest11")}
    # an environment installed before the rename still names harness.pytest_plugin:
    # `pip install -e .` again
    assert installed.get("afdb") == "afdb_pytest_plugin", installed


def test_loading_the_plugin_imports_neither_torch_nor_the_harness(tmp_path):
    (tmp_path / "test_probe.py").write_text(PROBE)
    proc = _pytest(tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "LOADED []" in proc.stdout, proc.stdout


def test_a_project_with_its_own_harness_module_runs_its_tests(tmp_path):
    (tmp_path / "harness.py").write_text("OWN = True\nVALUE = 41\n")
    (tmp_path / "test_probe.py").write_text(PROBE)
    (tmp_path / "test_own.py").write_text(
        "import harness\n\n\ndef test_own_harness():\n    assert harness.VALUE + 1 == 42\n"
    )
    proc = _pytest(tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2 passed" in proc.stdout
    assert "Error while loading plugin" not in proc.stdout + proc.stderr


def test_a_project_with_its_own_harness_package_runs_its_tests(tmp_path):
    (tmp_path / "harness").mkdir()
    (tmp_path / "harness" / "__init__.py").write_text("OWN = True\n")
    (tmp_path / "test_probe.py").write_text(PROBE)
    proc = _pytest(tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 passed" in proc.stdout


def test_the_afdb_marker_is_registered_without_loading_anything(tmp_path):
    proc = _pytest(tmp_path, "--markers", "--strict-markers")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "@pytest.mark.afdb:" in proc.stdout
