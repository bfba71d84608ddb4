"""The verdict cache of ``pytest --afdb`` (harness.session.verdict_cache, harness.plugin.cache).

A rerun with nothing changed reuses every verdict; a change to what decides one Function's
verdict (its code, a helper of its module it calls, its recorded calls, its declaration)
rechecks that Function only, and an unrelated change (a comment outside it, a function it
never calls, another module) rechecks nothing. A cached failure is still a failure, with
its reproduce line and its cases in the JSON report. The digest of a Function's code is
tested on its own first (``code_digest``), each invalidation next to its twin.
"""

from __future__ import annotations

import importlib
import itertools
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from harness.sources.code_digest import NoSource, code_digest

_COUNT = itertools.count()

OPS = '''
import torch

SCALE = 2.0


def _helper(x):
    return x * SCALE


def _unused(x):
    return x + 1


class Double(torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return _helper(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, grad):
        return grad * SCALE


class Cube(torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return x**3

    @staticmethod
    def setup_context(ctx, inputs, output):
        (x,) = inputs
        ctx.save_for_backward(x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * 3 * x**2


def factor():
    return 2.0


class Step(torch.autograd.Function):
    """``x * fn()`` for a function passed in (recorded by reference); its backward assumes
    the factor is 2, which holds for ``factor`` as it is."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x, fn):
        return x * fn()

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, grad):
        return grad * 2.0, None


class RoundSTE(torch.autograd.Function):
    """Rounds; its backward passes the gradient straight through (not round's derivative)."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return torch.round(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, grad):
        return grad
'''

TESTS = """
import torch
from mylib.ops import Cube, Double, RoundSTE, Step, factor


def _x():
    return torch.linspace(-1.3, 1.7, 5, dtype=torch.float64).requires_grad_()


def test_double():
    Double.apply(_x()).sum().backward()


def test_cube():
    Cube.apply(_x()).sum().backward()


def test_round():
    RoundSTE.apply(_x()).sum().backward()


def test_step():
    Step.apply(_x(), factor).sum().backward()
"""


# --- the digest of a Function's code ------------------------------------------------------


def _forget(name: str) -> None:
    for key in [k for k in sys.modules if k == name or k.startswith(f"{name}.")]:
        del sys.modules[key]
    importlib.invalidate_caches()


def _import(root: Path, name: str) -> object:
    """``name`` imported from ``root`` afresh (the same name each time: a module's name is
    part of its digest)."""
    _forget(name.split(".")[0])
    sys.path.insert(0, str(root))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(root))


def _digest_of(tmp_path: Path, source: str, cls: str = "Double") -> str:
    folder = tmp_path / f"d{next(_COUNT)}"
    folder.mkdir()
    (folder / "afdb_digest_mod.py").write_text(source)
    return code_digest(getattr(_import(folder, "afdb_digest_mod"), cls))


def test_the_same_code_has_the_same_digest(tmp_path: Path):
    assert _digest_of(tmp_path, OPS) == _digest_of(tmp_path, OPS)


@pytest.mark.parametrize(
    ("what", "old", "new", "changes"),
    [
        ("its own method", "return grad * SCALE", "return grad * SCALE * 1.0", True),
        ("the helper it calls", "return x * SCALE\n", "return x * SCALE + 0\n", True),
        ("module data it reads", "SCALE = 2.0", "SCALE = 3.0", True),
        ("a function it never calls", "return x + 1", "return x + 2", False),
        ("another Function of its module", "grad * 3 * x**2", "grad * 2 * x**2", False),
        ("a comment outside it", "import torch\n", "import torch  # a note\n", False),
    ],
)
def test_a_change_to_what_it_runs_changes_the_digest(tmp_path, what, old, new, changes):
    assert old in OPS, what
    before = _digest_of(tmp_path, OPS)
    after = _digest_of(tmp_path, OPS.replace(old, new, 1))
    assert (before != after) is changes, what


def test_a_helper_in_another_module_of_its_package_counts(tmp_path: Path):
    """``from .util import scale_of``: the helper's code is the Function's code too; a
    function of that module the Function never reaches is not."""

    def package(helper: str) -> str:
        root = tmp_path / f"p{next(_COUNT)}"
        pkg = root / "afdbpkg"
        pkg.mkdir(parents=True)
        (pkg / "__init__.py").write_text("")
        (pkg / "util.py").write_text(helper)
        (pkg / "ops.py").write_text(
            "import torch\nfrom .util import scale_of\n\n"
            "class F(torch.autograd.Function):\n"
            "    @staticmethod\n    def forward(x):\n        return scale_of(x)\n"
        )
        return code_digest(_import(root, "afdbpkg.ops").F)  # type: ignore[attr-defined]

    util = "def scale_of(x):\n    return 2 * x\n\ndef other(x):\n    return x\n"
    base = package(util)
    assert package(util.replace("return 2 * x", "return 3 * x")) != base
    assert package(util.replace("return x\n", "return -x\n")) == base


FACTORY = """
import torch


def make(f):
    class Wrapper(torch.autograd.Function):
        @staticmethod
        def forward(x):
            return f(x)

    return Wrapper


def sin(x):
    return torch.sin(x)


def cos(x):
    return torch.cos(x)


SIN = make(sin)
"""


def test_a_class_a_factory_made_counts_the_function_it_was_given(tmp_path: Path):
    """Two classes of one factory share their source: what their closures hold tells
    them apart, and a change to the function given changes the digest."""
    folder = tmp_path / "f"
    folder.mkdir()
    (folder / "afdb_digest_mod.py").write_text(FACTORY)
    mod: Any = _import(folder, "afdb_digest_mod")
    assert code_digest(mod.make(mod.sin)) != code_digest(mod.make(mod.cos))
    base = _digest_of(tmp_path, FACTORY, "SIN")
    assert _digest_of(tmp_path, FACTORY.replace("torch.sin(x)", "torch.sin(2 * x)"), "SIN") != base
    assert _digest_of(tmp_path, FACTORY.replace("torch.cos(x)", "torch.cos(2 * x)"), "SIN") == base


def test_a_class_without_source_is_never_cached():
    namespace: dict = {}
    exec(  # a class made from a string has no file to read
        "import torch\nclass F(torch.autograd.Function):\n"
        "    @staticmethod\n    def forward(x):\n        return x\n",
        namespace,
    )
    with pytest.raises(NoSource):
        code_digest(namespace["F"])


# --- pytest --afdb, run twice --------------------------------------------------------------


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    (root / "mylib").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "mylib" / "__init__.py").write_text("")
    (root / "mylib" / "other.py").write_text("VALUE = 1\n")
    (root / "mylib" / "ops.py").write_text(OPS)
    (root / "tests" / "test_ops.py").write_text(TESTS)
    (root / "pytest.ini").write_text("[pytest]\ntestpaths = tests\npythonpath = .\n")
    return root


def run(cwd: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    argv = [sys.executable, "-m", "pytest", "-q", "-W", "ignore", "-p", "no:randomly"]
    argv += ["--afdb", "--afdb-checks", "vmap,vjp", "--afdb-json", "r.json", *extra]
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


ALL = {"Double", "Cube", "RoundSTE", "Step"}


def line_of(out: str, name: str) -> str:
    prefix = f"  mylib.ops:{name} "
    found = [ln for ln in out.splitlines() if ln.startswith(prefix)]
    assert len(found) == 1, out
    return found[0][len(prefix) :].strip()


def cache_line(out: str) -> str:
    found = [ln for ln in out.splitlines() if ln.startswith("verdict cache: ")]
    assert len(found) == 1, out
    return found[0]


def reused(out: str) -> set[str]:
    names = ("Double", "Cube", "RoundSTE", "Step")
    return {n for n in names if line_of(out, n).endswith("from the cache")}


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))


def test_a_rerun_reuses_what_did_not_change_and_rechecks_what_did(project: Path):
    first = run(project)
    out = first.stdout
    # RoundSTE's straight-through backward is not round's derivative: undeclared, it fails
    assert first.returncode == 1, out + first.stderr
    assert line_of(out, "RoundSTE").startswith("FAIL: ")
    assert "conforms (" in line_of(out, "Double") and "conforms (" in line_of(out, "Cube")
    assert "conforms (" in line_of(out, "Step")
    assert reused(out) == set()
    assert cache_line(out).startswith("verdict cache: 0 of 4 verdicts reused; checked: 4 not in")
    first_cases = json.loads((project / "r.json").read_text())["cases"]

    # nothing changed: every verdict reused; the cached failure still fails, reproducibly
    again = run(project)
    out = again.stdout
    assert again.returncode == 1, out + again.stderr
    assert reused(out) == ALL
    assert cache_line(out).startswith("verdict cache: 4 of 4 verdicts reused (")
    assert line_of(out, "RoundSTE").startswith("FAIL: ")
    assert "    reproduce: afdb repro mylib.ops:RoundSTE/vjp/" in out
    report = json.loads((project / "r.json").read_text())
    assert [c["id"] for c in report["cases"]] == [c["id"] for c in first_cases]
    assert report["metadata"]["verdict_cache"]["reused"] == [
        "mylib.ops:Cube",
        "mylib.ops:Double",
        "mylib.ops:RoundSTE",
        "mylib.ops:Step",
    ]

    # unrelated changes: a comment outside the Functions, a function none calls, another module
    edit(project / "mylib" / "ops.py", "import torch\n", "import torch  # reviewed\n")
    edit(project / "mylib" / "ops.py", "return x + 1", "return x + 2")
    (project / "mylib" / "other.py").write_text("VALUE = 2\n")
    out = run(project).stdout
    assert reused(out) == ALL, out

    # a helper Double calls: Double alone is checked again
    edit(project / "mylib" / "ops.py", "return x * SCALE\n", "return SCALE * x\n")
    out = run(project).stdout
    assert reused(out) == ALL - {"Double"}, out
    assert "checked: 1 whose code changed" in cache_line(out)

    # Cube's own code: a planted bug in its backward is found, not read from the cache
    edit(project / "mylib" / "ops.py", "grad * 3 * x**2", "grad * 2 * x**2")
    out = run(project).stdout
    assert reused(out) == ALL - {"Cube"}, out
    assert line_of(out, "Cube").startswith("FAIL: ")

    # Cube's recorded calls (the test's input)
    edit(
        project / "tests" / "test_ops.py",
        "def test_cube():\n    Cube.apply(_x())",
        ("def test_cube():\n    Cube.apply(_x() * 0.5)"),
    )
    out = run(project).stdout
    assert reused(out) == ALL - {"Cube"}, out
    assert "checked: 1 whose recorded calls changed" in cache_line(out)

    # the function Step's calls pass (recorded by reference): its wrong backward now shows
    edit(project / "mylib" / "ops.py", "return 2.0\n", "return 3.0\n")
    out = run(project).stdout
    assert reused(out) == ALL - {"Step"}, out
    assert line_of(out, "Step").startswith("FAIL: ")

    # a declaration: RoundSTE's gradient is declared custom, and its verdict follows
    with (project / "pytest.ini").open("a") as f:
        f.write("afdb_declare =\n    mylib.ops:RoundSTE gradient=custom\n")
    out = run(project).stdout
    assert reused(out) == ALL - {"RoundSTE"}, out
    assert "checked: 1 whose declaration changed" in cache_line(out)
    assert "conforms (" in line_of(out, "RoundSTE")


def test_cache_clear_options_start_afresh(project: Path):
    run(project)
    for option in ("--afdb-cache-clear", "--cache-clear"):
        out = run(project, option).stdout
        assert reused(out) == set(), (option, out)
    assert reused(run(project).stdout) == ALL
    # without pytest's cache provider there is no cache, and no cache line
    off = run(project, "-p", "no:cacheprovider").stdout
    assert reused(off) == set() and "verdict cache:" not in off
