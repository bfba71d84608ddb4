"""A typo in the file or module a target or samples names gets "did you mean" (issue 30,
part 6), as a typo in the attribute does: one line, exit 2."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from harness import UsageError
from harness.cli.main import main
from harness.sources.imports import load_attr

ROT = Path(__file__).resolve().parent.parent / "examples" / "rotations.py"


@pytest.fixture
def project(tmp_path, monkeypatch):
    """``rotations.py`` and ``pkg/rotmod.py`` in the working directory."""
    shutil.copy(ROT, tmp_path / "rotations.py")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    shutil.copy(ROT, tmp_path / "pkg" / "rotmod.py")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


@pytest.mark.parametrize(
    ("spec", "hint"),
    [
        ("rotatoins.py:RotatePoints", "no such file 'rotatoins.py'; did you mean 'rotations.py'?"),
        ("pkg/rotmood.py:RotatePoints", "did you mean 'pkg/rotmod.py'?"),
        (
            "pkgg/rotmod.py:RotatePoints",
            "no such file 'pkgg/rotmod.py'; did you mean 'pkg/rotmod.py'?",
        ),
        ("pkg.rotmood:RotatePoints", "no module named 'pkg.rotmood'; did you mean 'pkg.rotmod'?"),
        ("rotatoins:RotatePoints", "no module named 'rotatoins'; did you mean 'rotations'"),
        ("rotations.py:RotatePonits", "no attribute 'RotatePonits'; did you mean 'RotatePoints'"),
    ],
)
def test_a_typo_gets_the_close_names(project, spec, hint):
    with pytest.raises(UsageError) as info:
        load_attr(spec, "TARGET")
    assert hint in str(info.value), str(info.value)
    fixed = spec.replace("rotatoins", "rotations").replace("rotmood", "rotmod")
    fixed = fixed.replace("pkgg", "pkg").replace("Ponits", "Points")
    assert load_attr(fixed, "TARGET").__name__ == "RotatePoints"  # the correct twin loads


@pytest.mark.parametrize("spec", ["zzqx.py:F", "zzqx_afdb_nothing:F", "rotations.py:Zzqx"])
def test_nothing_close_gets_no_guess(project, spec):
    with pytest.raises(UsageError) as info:
        load_attr(spec, "TARGET")
    assert "did you mean" not in str(info.value), str(info.value)


def test_the_command_line_says_it_in_one_line(project, capsys):
    rc = main(["check", "rotations.py:RotatePoints", "--samples", "rotatoins.py:rotation_samples"])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert "--samples: no such file 'rotatoins.py'; did you mean 'rotations.py'?" in err
