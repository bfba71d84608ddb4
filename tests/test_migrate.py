"""``afdb migrate``'s rewrite and verification: each legacy Function of
tests/migrate_functions.py migrates (or is refused) as expected and verifies, bytes outside
the class are kept, the output stays ruff-formatted, planted wrong migrations are caught.
The command line, targets and ``--write``: tests/test_migrate_cli.py."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from harness.migrate import codemod, run
from harness.migrate.run import DIFFERS, MIGRATED, NEW_STYLE, REFUSED
from harness.migrate.verify import verify
from tests.migrate_support import (
    FIXTURE,
    MIGRATES,
    copy_fixture,
)
from tests.migrate_support import class_span as _class_span
from tests.migrate_support import plant as _planted
from tests.migrate_support import run_one as _run


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    return copy_fixture(tmp_path)


@pytest.mark.parametrize("cls", sorted(MIGRATES))
def test_each_legacy_function_migrates_and_verifies(copy: Path, cls: str) -> None:
    out = _run(copy, cls)
    (c,) = out.classes
    assert c.status == MIGRATED, c.message
    assert c.verdict is not None and c.verdict.ok and c.verdict.compared >= 4
    new = out.rewritten.decode()
    old = out.original.decode()
    assert re.search(
        r"def setup_context\((cls, )?ctx, inputs, output\):", new[slice(*_class_span(new, cls))]
    )
    assert re.search(r"def forward\((?!ctx)", new[slice(*_class_span(new, cls))])
    # Byte for byte outside the class.
    s_old, e_old = _class_span(old, cls)
    s_new, e_new = _class_span(new, cls)
    assert old[:s_old] == new[:s_new] and old[e_old:] == new[e_new:]
    assert copy.read_bytes() == out.original  # not written without write=True


def _rewrite(cls: str) -> tuple[str, codemod.Migration]:
    """The codemod alone (no verification): the fixture file with ``cls`` migrated."""
    module, info = codemod.migrate_class(codemod.parse(FIXTURE.read_bytes(), "fixture"), cls)
    code = module.code
    return code[slice(*_class_span(code, cls))], info


def test_what_moves_where() -> None:
    """Outputs are read from `output`, inputs from `inputs`, intermediates recomputed."""
    body, info = _rewrite("SortWithIndices")
    assert "x, dim = inputs" in body and "indices = output[1]" in body
    assert body.index("return values, indices") < body.index("def setup_context")
    assert info.nondiff_outputs == (1,)
    _, info = _rewrite("ReluMask")
    assert [n for n, _ in info.recomputed] == ["x", "mask"]
    _, info = _rewrite("InplaceScale")
    assert info.inplace_args == (0,)
    body, _ = _rewrite("ClassmethodSoftSquare")
    assert "    @classmethod\n    def forward(cls, x, dim=-1):" in body
    assert "    @classmethod\n    def setup_context(cls, ctx, inputs, output):" in body
    body, _ = _rewrite("WeightedStack")
    assert "def forward(*xs):" in body and "        xs = inputs\n" in body
    body, _ = _rewrite("MulSavesInputs")  # comments and docstring stay where they were
    assert (
        '    """x * y, saving both inputs."""\n\n    @staticmethod\n    def forward(x, y):' in body
    )


def test_requires_grad_of_an_input_becomes_needs_input_grad(copy: Path) -> None:
    """Under torch.func setup_context sees unwrapped inputs (requires_grad False): the
    rewritten test works there, the literal one saves nothing and backward fails."""
    out = _run(
        copy,
        "SurrogateSpike",
        generate_vmap=True,
        func_checks=("grad_of_vmap",),
        check_options={"gradient": "custom"},
    )
    (c,) = out.classes
    body = out.rewritten.decode()[slice(*_class_span(out.rewritten.decode(), "SurrogateSpike"))]
    assert "        if ctx.needs_input_grad[0]:\n" in body and "x.requires_grad" not in body
    assert c.status == MIGRATED and c.checks is not None
    assert {r.status for r in c.checks.cases} == {"pass"}, [r.message for r in c.checks.cases]
    literal = copy.with_name("literal.py")
    literal.write_bytes(
        out.rewritten.replace(b"if ctx.needs_input_grad[0]:", b"if x.requires_grad:")
    )
    from harness import check
    from harness.sources.imports import import_module

    cls = import_module(str(literal), "literal").SurrogateSpike
    twins = check(cls, _samples("spike_samples"), checks=["grad_of_vmap"], gradient="custom").cases
    assert twins and {t.status for t in twins} == {"error"}, [t.message for t in twins]


def _samples(name: str) -> list:  # type: ignore[type-arg]
    from tests import migrate_functions as mf

    return getattr(mf, name)()


def test_non_recomputable_intermediate_is_refused_with_the_two_options(copy: Path) -> None:
    (c,) = _run(copy, "DropoutMask", samples="one_samples").classes
    assert c.status == REFUSED
    assert "`keep`" in c.message and "mark_non_differentiable" in c.message
    assert "recompute it in backward" in c.message and "\n" not in c.message
    line = (
        copy.read_text()
        .splitlines()
        .index("        keep = (torch.rand_like(x) > 0.5).to(x.dtype) * 2.0")
    )
    assert f"(line {line + 1})" in c.message


def test_already_new_style_says_so(copy: Path) -> None:
    out = _run(copy, "AlreadyNew", samples="one_samples")
    assert [c.status for c in out.classes] == [NEW_STYLE]
    assert out.rewritten == out.original and run.exit_status([out]) == 0


def _ruff() -> str:
    exe = shutil.which("ruff", path=os.path.dirname(sys.executable)) or shutil.which("ruff")
    if exe is None:
        pytest.skip("ruff is not installed")
    return exe


def test_migrated_file_passes_ruff_format(tmp_path: Path) -> None:
    """Every class of the (ruff-formatted) fixture rewritten: the file is still formatted.
    (Each rewrite's verification is test_each_legacy_function_migrates_and_verifies.)"""
    ruff = _ruff()
    path = tmp_path / "formatted.py"
    check = [ruff, "format", "--check", "--line-length", "100", "--quiet", str(path)]
    path.write_bytes(FIXTURE.read_bytes())
    assert subprocess.run(check).returncode == 0  # the original is formatted
    module = codemod.parse(FIXTURE.read_bytes(), "fixture")
    for cls in MIGRATES:
        module = codemod.migrate_class(module, cls)[0]
        if cls in ("MulSavesInputs", "ReluMask"):
            module = codemod.add_generated_rule(module, cls)
    path.write_text(module.code)
    assert module.code.count("def setup_context(") == len(MIGRATES) + 1  # + AlreadyNew's
    diff = subprocess.run([*check[:2], "--diff", *check[3:]], capture_output=True, text=True)
    assert diff.returncode == 0, diff.stdout


def test_generated_vmap_rule_kept_when_the_vmap_checks_pass(copy: Path) -> None:
    (c,) = (out := _run(copy, "MulSavesInputs", generate_vmap=True)).classes
    assert c.status == MIGRATED and c.vmap.startswith("generate_vmap_rule = True added"), c.vmap
    body = out.rewritten.decode()[slice(*_class_span(out.rewritten.decode(), "MulSavesInputs"))]
    assert "    generate_vmap_rule = True\n" in body


def test_numpy_forward_gets_no_generated_rule_and_the_line_named(copy: Path) -> None:
    out = _run(copy, "NumpySin", generate_vmap=True)
    (c,) = out.classes
    assert c.status == MIGRATED
    assert (
        "generate_vmap_rule = True not kept" in c.vmap and "a vmap staticmethod is needed" in c.vmap
    )
    line = copy.read_text().splitlines().index("        y = np.sin(x.detach().cpu().numpy())") + 1
    assert f"line {line} `y = np.sin(x.detach().cpu().numpy())` (numpy)" in c.vmap
    assert (
        b"generate_vmap_rule"
        not in out.rewritten[slice(*_class_span(out.rewritten.decode(), "NumpySin"))]
    )


def test_the_lines_that_prevent_a_generated_rule() -> None:
    from harness.migrate.vmaprule import blockers

    src = (
        "class F:\n    @staticmethod\n    def forward(ctx, x, dim=None):\n"
        "        if ctx.needs_input_grad[0]:\n            ctx.k = 1\n"  # ctx: not data
        "        if dim is None or x.dim() == 2:\n            dim = 0\n"  # metadata: fine
        "        s = x.sum().item()\n"
        "        if x.max() > 0:\n            x = x * 2\n"
        "        idx = x.nonzero()\n"
        "        return x * s, idx\n"
    )
    found = [(b.line, b.why) for b in blockers(src, "F")]
    assert found == [
        (8, ".item()"),
        (9, "control flow on tensor data"),
        (11, "nonzero: a data-dependent shape"),
    ]


# --- the verification catches a wrong migration -------------------------------------------------


def test_planted_dropped_saved_tensor_is_caught(
    copy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _planted(monkeypatch, "ctx.save_for_backward(x, weight)", "ctx.save_for_backward(x)")
    out = _run(copy, "LinearNeedsInputGrad", write=True)
    (c,) = out.classes
    assert c.status == DIFFERS and "backward raises ValueError" in c.message
    assert not out.written and copy.read_bytes() == out.original  # nothing written
    assert run.exit_status([out]) == 1


def test_planted_silent_wrong_save_is_caught(copy: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The input saved where the original saves its output: no error, wrong gradients."""
    _planted(monkeypatch, "result = output\n", "result = x\n")
    (c,) = _run(copy, "ExpSavesOutput").classes
    assert c.status == DIFFERS and "gradient of input 0" in c.message


def test_planted_lost_mark_non_differentiable_is_caught(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A float output the original marks non-differentiable: losing the mark is a difference."""
    path = tmp_path / "clamp.py"
    path.write_text(
        "import torch\n\n\nclass ClampWithMask(torch.autograd.Function):\n"
        "    @staticmethod\n    def forward(ctx, x):\n        inside = (x.abs() < 1).to(x.dtype)\n"
        "        ctx.mark_non_differentiable(inside)\n        ctx.save_for_backward(inside)\n"
        "        return x.clamp(-1, 1), inside\n\n"
        "    @staticmethod\n    def backward(ctx, g, g_inside):\n        (inside,) = ctx.saved_tensors\n"
        "        return g * inside\n\n\n"
        "def samples():\n    return [(2 * torch.randn(6, generator=torch.Generator().manual_seed(0)),)]\n"
    )
    (c,) = _run(path, "ClampWithMask", samples="samples").classes
    assert c.status == MIGRATED, c.message  # the correct twin
    _planted(monkeypatch, "        ctx.mark_non_differentiable(inside)\n", "")
    (c,) = _run(path, "ClampWithMask", samples="samples").classes
    assert c.status == DIFFERS and "mark_non_differentiable" in c.message


def test_force_writes_a_migration_that_differs(copy: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _planted(monkeypatch, "result = output\n", "result = x\n")
    out = _run(copy, "ExpSavesOutput", write=True, force=True)
    assert out.written and copy.read_bytes() == out.rewritten != out.original


def test_verify_against_hand_written_twins() -> None:
    """The comparison itself: a correct new-style twin passes, one with a dropped factor fails."""
    from tests import migrate_functions as mf

    class Good(torch.autograd.Function):
        @staticmethod
        def forward(x, y):
            return x * y

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(*inputs)

        @staticmethod
        def backward(ctx, grad):
            x, y = ctx.saved_tensors
            return grad * y, grad * x

    class Bad(Good):
        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(inputs[0], inputs[0])  # y dropped, x saved twice

    samples = mf.pair_samples()
    good = verify(mf.MulSavesInputs, Good, samples)
    assert good.ok and good.double_backward == 2
    bad = verify(mf.MulSavesInputs, Bad, samples)
    assert not bad.ok and any("gradient of input 0" in d for d in bad.differences)


def test_verify_gives_each_call_its_own_containers() -> None:
    """A list argument changed in place: each call gets a fresh copy (the original's change
    does not leak into the migrated call), and a different change is a difference."""

    class Bump(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, ts):
            ts[0].add_(1)
            return x * ts[0]

        @staticmethod
        def backward(ctx, g):
            return g * 2, None

    class BumpTwice(Bump):
        @staticmethod
        def forward(ctx, x, ts):
            ts[0].add_(2)
            return x * 2

    sample = [(torch.ones(3), [torch.ones(3)])]
    assert verify(Bump, Bump, sample).ok
    bad = verify(Bump, BumpTwice, sample)
    assert any("input 1 after the call" in d for d in bad.differences), bad.differences
    assert sample[0][1][0].tolist() == [1.0, 1.0, 1.0]  # the caller's sample untouched


CHEAP = ["x > 0", "x.shape", "x.contiguous().view(-1)", "len(xs)", "x * 2 - 1", "x.abs() <= 1"]
NOT_CHEAP = ["x.exp()", "x @ w", "torch.rand_like(x)", "x.max()", "x.sum(0)", "np.sin(x)", "f(x)"]


@pytest.mark.parametrize("expr", CHEAP + NOT_CHEAP)
def test_what_counts_as_exact_and_cheap(expr: str) -> None:
    import libcst as cst

    from harness.migrate.statements import cheap

    assert cheap(cst.parse_expression(expr)) == (expr in CHEAP)


# --- refusals of constructs it does not handle ----------------------------------------------------

CONSTRUCTS = {
    "early return": (
        "        if x.dim() == 0:\n            return x\n        ctx.save_for_backward(x)\n"
        "        return x * 2\n",
        "single final return",
    ),
    "ctx read in forward": (
        "        ctx.scale = 2.0\n        return x * ctx.scale\n",
        "forward reads ctx",
    ),
    "ctx passed on": ("        return helper(ctx, x)\n", "forward passes ctx to another function"),
    "ctx in a loop": (
        "        for i in range(2):\n            ctx.k = i\n            x = x * 2\n        return x\n",
        "inside a `for` block",
    ),
    "mixed line": ("        ctx.k = 2; y = x * 2\n        return y\n", "mixes ctx work"),
    "kwargs": ("        return x\n", "keyword-only or **kwargs"),
    "custom_fwd": ("        return x\n", "decorated with @custom_fwd"),
}


@pytest.mark.parametrize("what", sorted(CONSTRUCTS))
def test_unhandled_constructs_are_refused_in_one_line(tmp_path: Path, what: str) -> None:
    body, words = CONSTRUCTS[what]
    src = (
        "import torch\n\n\ndef helper(ctx, x):\n    return x\n\n\n"
        "class F(torch.autograd.Function):\n    @staticmethod\n"
        + ("    @torch.amp.custom_fwd(device_type='cpu')\n" if what == "custom_fwd" else "")
        + f"    def forward(ctx, x{', **kw' if what == 'kwargs' else ''}):\n"
        f"{body}\n    @staticmethod\n    def backward(ctx, g):\n        return g\n\n\n"
        "def samples():\n    return [(torch.ones(3),)]\n"
    )
    path = tmp_path / "construct.py"
    path.write_text(src)
    out = _run(path, "F", samples="samples")
    (c,) = out.classes
    assert c.status == REFUSED and words in c.message and "\n" not in c.message, c.message
    assert out.rewritten == out.original
