"""What tests/test_migrate.py and tests/test_migrate_cli.py share: the fixture file of legacy
Functions, the samples of each, one migration through the API, a planted wrong codemod."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from harness.migrate import codemod, run
from harness.migrate.run import Settings, migrate

FIXTURE = Path(__file__).with_name("migrate_functions.py")

#: class -> its samples function, for every legacy class that must migrate and verify.
MIGRATES = {
    "MulSavesInputs": "pair_samples",
    "ExpSavesOutput": "one_samples",
    "ScaledPow": "pow_samples",
    "BroadcastAdd": "broadcast_samples",
    "SortWithIndices": "sort_samples",
    "InplaceScale": "one_samples",
    "CubeOnce": "one_samples",
    "LinearNeedsInputGrad": "linear_samples",
    "ReluMask": "one_samples",
    "NumpySin": "one_samples",
    "StraightThroughSign": "away_samples",
    "WeightedStack": "stack_samples",
    "ClassmethodSoftSquare": "one_samples",
    "SurrogateSpike": "spike_samples",
}


def copy_fixture(tmp_path: Path) -> Path:
    """A copy of the fixture file, under a name of its own (never the repository's file)."""
    path = tmp_path / "legacy_fns.py"
    shutil.copyfile(FIXTURE, path)
    return path


def run_one(path: Path, cls: str, samples: str | None = None, **kw: object) -> run.FileOutcome:
    settings = Settings(
        samples=f"{path}:{samples or MIGRATES[cls]}", func_checks=kw.pop("func_checks", ()), **kw
    )  # type: ignore[arg-type]
    (outcome,) = migrate(f"{path}:{cls}", settings)
    return outcome


def class_span(text: str, cls: str) -> tuple[int, int]:
    """Character offsets of the class statement (to its last line) in the source."""
    start = text.index(f"\nclass {cls}(") + 1
    nxt = re.compile(r"^\S", re.M).search(text, text.index("\n", start) + 1)
    end = nxt.start() if nxt else len(text)
    return start, end


def plant(monkeypatch: pytest.MonkeyPatch, old: str, new: str) -> None:
    """The codemod, with one planted mistake in what it writes."""
    real = codemod.migrate_class

    def wrong(module, name):  # type: ignore[no-untyped-def]
        m, info = real(module, name)
        code = m.code
        assert old in code, old
        return codemod.parse(code.replace(old, new), "planted"), info

    monkeypatch.setattr(run, "migrate_class", wrong)
