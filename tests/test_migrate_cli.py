"""``afdb migrate`` as a command: targets (files, packages by name or folder), ``--write``
(atomic, only the file named), exit statuses, ``--recorded``, and the documented example."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from harness.cli.main import main
from harness.core.errors import UsageError
from harness.migrate import run
from harness.migrate.run import MIGRATED, REFUSED, Settings, migrate
from tests.migrate_support import FIXTURE, copy_fixture
from tests.migrate_support import plant as _planted
from tests.migrate_support import run_one as _run


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    return copy_fixture(tmp_path)


# --- targets, packages, --write ----------------------------------------------------------------


@pytest.fixture
def fresh_pkg() -> Iterator[None]:
    """``mig_pkg`` is another folder in each test: none of its modules outlives one."""

    def drop() -> None:
        for name in [m for m in sys.modules if m == "mig_pkg" or m.startswith("mig_pkg.")]:
            del sys.modules[name]

    drop()
    yield
    drop()


def _package(tmp_path: Path, samples: bool = True) -> Path:
    """A package whose ``ops.py`` (relative import) holds a legacy Function, and a
    module-level ``samples`` beside it unless ``samples=False``."""
    pkg = tmp_path / "mig_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "consts.py").write_text("FACTOR = 3.0\n")
    (pkg / "ops.py").write_text(
        "import torch\n\nfrom .consts import FACTOR\n\n\n"
        "class Triple(torch.autograd.Function):\n"
        "    @staticmethod\n    def forward(ctx, x):\n        ctx.save_for_backward(x)\n"
        "        return x * FACTOR\n\n"
        "    @staticmethod\n    def backward(ctx, g):\n        (x,) = ctx.saved_tensors\n"
        "        return g * FACTOR\n"
        + (
            "\n\ndef samples():\n"
            "    return [(torch.randn(3, generator=torch.Generator().manual_seed(0)),)]\n"
            if samples
            else ""
        )
    )
    return pkg


def test_file_in_a_package_with_relative_imports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_pkg: object
) -> None:
    pkg = _package(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    settings = Settings(samples="mig_pkg.ops:samples", func_checks=(), write=True)
    (out,) = migrate("mig_pkg.ops:Triple", settings)
    assert out.classes[0].status == MIGRATED, out.classes[0].message
    assert out.written and "def setup_context" in (pkg / "ops.py").read_text()
    assert (pkg / "consts.py").read_text() == "FACTOR = 3.0\n"
    assert sorted(p.name for p in pkg.iterdir() if p.is_file()) == [
        "__init__.py",
        "consts.py",
        "ops.py",
    ]


@pytest.mark.parametrize("how", ["dotted", "folder"])
def test_whole_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str, fresh_pkg: object
) -> None:
    """A package by name or folder: every file with a Function, each imported in its package.
    Without samples (no --samples, no samples attribute, none beside the class) it is refused."""
    pkg = _package(tmp_path, samples=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    before = (pkg / "ops.py").read_bytes()
    outs = migrate("mig_pkg" if how == "dotted" else str(pkg), Settings(func_checks=()))
    assert [(o.source.module, [c.name for c in o.classes]) for o in outs] == [
        ("mig_pkg.ops", ["Triple"])
    ]
    # No samples attribute and no --samples: refused, never written unverified.
    assert outs[0].classes[0].status == REFUSED and "no samples" in outs[0].classes[0].message
    assert outs[0].rewritten == outs[0].original == before


def test_write_replaces_only_the_named_file_atomically(
    copy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = copy.with_name("neighbour.py")
    other.write_text("x = 1\n")
    os.chmod(copy, 0o640)
    before = {p.name: p.read_bytes() for p in copy.parent.iterdir()}

    def broken_replace(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(run.os, "replace", broken_replace)
    with pytest.raises(UsageError, match="cannot write"):
        _run(copy, "MulSavesInputs", write=True)
    assert {p.name: p.read_bytes() for p in copy.parent.iterdir()} == before  # no temp file left
    monkeypatch.undo()
    out = _run(copy, "MulSavesInputs", write=True)
    assert out.written and copy.read_bytes() == out.rewritten
    assert other.read_text() == "x = 1\n" and os.stat(copy).st_mode & 0o777 == 0o640
    assert sorted(p.name for p in copy.parent.iterdir()) == sorted(before)


# --- the command line and its exit statuses ----------------------------------------------------


def test_cli_exit_statuses(copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    s = f"--samples={copy}:one_samples"
    assert main(["migrate", f"{copy}:ExpSavesOutput", s, "--checks", "none"]) == 0
    out = capsys.readouterr().out
    assert "+    def setup_context(ctx, inputs, output):" in out and "pass --write" in out
    assert main(["migrate", f"{copy}:DropoutMask", s, "--checks", "none"]) == 2
    assert "refused: DropoutMask" in capsys.readouterr().out
    assert main(["migrate", f"{copy}:AlreadyNew", s, "--checks", "none"]) == 0
    assert "already new-style" in capsys.readouterr().out
    assert main(["migrate", f"{copy}:pair_samples", s]) == 2
    assert "not a torch.autograd.Function" in capsys.readouterr().err
    assert main(["migrate", f"{copy}:ExpSavesOutput", "--checks", "none"]) == 2
    assert "no samples to verify" in capsys.readouterr().out
    bad = copy.with_name("broken.py")
    bad.write_text("class F(:\n")
    assert main(["migrate", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "does not parse" in err and len(err.strip().splitlines()) == 1
    assert main(["migrate", f"{copy}:ExpSavesOutput", s, "--force"]) == 2  # --force needs --write
    capsys.readouterr()
    assert main(["migrate", f"{copy}:ReluMask", s, "--checks", "none"]) == 0
    printed = capsys.readouterr()
    assert "legacy_fns.py:ReluMask: migrated and verified" in printed.out
    assert str(copy.parent) not in printed.out + printed.err  # no absolute path


def test_cli_difference_exits_1_and_writes_nothing(
    copy: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _planted(monkeypatch, "result = output\n", "result = x\n")
    before = copy.read_bytes()
    code = main(["migrate", f"{copy}:ExpSavesOutput", f"--samples={copy}:one_samples", "--write"])
    out = capsys.readouterr().out
    assert code == 1 and copy.read_bytes() == before
    assert "differs from the original" in out and "nothing written" in out and "+++ b/" in out


def test_cli_runs_the_torch_func_checks_on_the_migrated_class(
    copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        [
            "migrate",
            f"{copy}:MulSavesInputs",
            f"--samples={copy}:pair_samples",
            "--vmap",
            "generate",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    assert "generate_vmap_rule = True added" in out
    assert "torch.func checks on the migrated MulSavesInputs" in out
    assert re.search(r"ok   vmap_nested +\d+ pass", out) and "PASS:" in out


def test_whole_file_migrates_every_legacy_class(tmp_path: Path) -> None:
    path = tmp_path / "two.py"
    path.write_text(
        "import torch\n\n\ndef _s():\n    return [(torch.randn(3, generator=torch.Generator().manual_seed(0)),)]\n"
        "\n\nclass A(torch.autograd.Function):\n    samples = staticmethod(_s)\n\n"
        "    @staticmethod\n    def forward(ctx, x):\n        ctx.save_for_backward(x)\n        return x * x\n\n"
        "    @staticmethod\n    def backward(ctx, g):\n        (x,) = ctx.saved_tensors\n        return 2 * g * x\n\n\n"
        "class B(torch.autograd.Function):\n    samples = staticmethod(_s)\n\n"
        "    @staticmethod\n    def forward(ctx, x):\n        return x + 1\n\n"
        "    @staticmethod\n    def backward(ctx, g):\n        return g\n\n\n"
        "class NotAFunction(torch.nn.Module):\n"  # a staticmethod forward, but no Function
        "    @staticmethod\n    def forward(ctx, x):\n        return x\n"
    )
    (out,) = migrate(str(path), Settings(func_checks=()))
    assert [(c.name, c.status) for c in out.classes] == [("A", MIGRATED), ("B", MIGRATED)]
    assert out.rewritten.decode().count("def setup_context") == 2


def test_recorded_calls_verify_the_migration(copy: Path, tmp_path: Path) -> None:
    """--recorded DIR: the calls a program made, recorded by harness.recording (its own
    branch; skipped where that recorder is not installed)."""
    recording = pytest.importorskip("harness.recording")
    from harness.sources.imports import import_module

    module = import_module(str(copy), "recorded")
    folder = tmp_path / "rec"
    with recording.recording(folder):
        for x, y in (module.pair_samples()[0], (torch.randn(2, 5), torch.randn(2, 5))):
            module.MulSavesInputs.apply(x.requires_grad_(), y)
    (out,) = migrate(f"{copy}:MulSavesInputs", Settings(recorded=str(folder), func_checks=()))
    (c,) = out.classes
    assert c.status == MIGRATED and c.verdict is not None and c.verdict.compared >= 8, c.message
    (out,) = migrate(f"{copy}:ExpSavesOutput", Settings(recorded=str(folder), func_checks=()))
    assert out.classes[0].status == REFUSED and "no samples" in out.classes[0].message


def test_checks_that_cannot_run_are_named_not_raised(copy: Path) -> None:
    """The torch.func checks refusing (a UsageError) is one line on that class, after its
    verified migration, not the end of the command."""
    (c,) = _run(copy, "MulSavesInputs", func_checks=("no_such_check",)).classes
    assert c.status == MIGRATED and c.checks is None
    assert c.checks_note.startswith("the torch.func checks did not run: unknown check")


def test_a_generated_rule_already_there_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "ruled.py"
    path.write_text(
        "import torch\n\n\nclass Twice(torch.autograd.Function):\n    generate_vmap_rule = True\n\n"
        "    @staticmethod\n    def forward(ctx, x):\n        return 2 * x\n\n"
        "    @staticmethod\n    def backward(ctx, g):\n        return 2 * g\n\n\n"
        "def samples():\n    return [(torch.ones(3),)]\n"
    )
    out = _run(path, "Twice", samples="samples", generate_vmap=True)
    (c,) = out.classes
    assert c.status == MIGRATED and "kept as it is" in c.vmap
    assert out.rewritten.count(b"generate_vmap_rule = True") == 1


def test_the_legacy_note_points_to_the_migration() -> None:
    from harness.api import LEGACY_NOTE
    from harness.checks.catalogue import LEGACY_FIX

    assert "afdb migrate" in LEGACY_NOTE and "docs/migrating.md" in LEGACY_NOTE
    assert "afdb migrate" in LEGACY_FIX


def test_the_documented_example_prints_what_the_docs_show(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/migrating.md's console block: its diff and its verdict lines are what the
    command prints (the torch.func summary after them is left out here: --checks none)."""
    root = FIXTURE.parent.parent
    monkeypatch.chdir(root)
    spec = "examples/legacy_swish.py"
    argv = ["migrate", f"{spec}:Swish", f"--samples={spec}:swish_samples", "--vmap", "generate"]
    assert main([*argv, "--checks", "none"]) == 0
    printed = capsys.readouterr().out.splitlines()
    doc = (root / "docs" / "migrating.md").read_text()
    block = doc[doc.index("```console\n$ afdb migrate examples/legacy_swish.py") :]
    block = block[: block.index("\n```")]
    shown = [ln for ln in printed if not ln.startswith(("not written", "see docs"))]
    assert shown and all(ln in block.splitlines() for ln in shown), shown
