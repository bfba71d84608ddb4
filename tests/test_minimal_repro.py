"""``afdb repro`` writes a minimal plain-torch script by default: short, and failing the same way.

Planted bugs in a user's module (a vmap rule, a jvp, a backward, a vmap rule whose autodiff
is wrong only under a composite transform) and their correct twin: each script is run on
its own, from another folder than the module's, and must exit 1 (the failure reproduced)
for the bug and 0 for the twin. ``--full`` still writes the self-checking script.
"""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import harness.cli.main as cli
from harness.cli.repro import script_name

#: The user's library: ``Sin`` is correct, each other class plants one bug.
LIBRARY = """
import torch


class Sin(torch.autograd.Function):
    @staticmethod
    def forward(x):
        return torch.sin(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])
        ctx.save_for_forward(inputs[0])

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * torch.cos(x)

    @staticmethod
    def jvp(ctx, t):
        (x,) = ctx.saved_tensors
        return t * torch.cos(x)

    @staticmethod
    def vmap(info, in_dims, x):
        return Sin.apply(x), in_dims[0]


class WrongOutDim(Sin):
    @staticmethod
    def vmap(info, in_dims, x):  # moves the batch dim to 0, reports where it came from
        return WrongOutDim.apply(x.movedim(in_dims[0], 0)), in_dims[0]


class WrongSignJvp(Sin):
    @staticmethod
    def jvp(ctx, t):
        (x,) = ctx.saved_tensors
        return -t * torch.cos(x)


class ScaledBackward(Sin):
    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return 2 * grad * torch.cos(x)


class RuleCallsScaled(Sin):
    @staticmethod
    def vmap(info, in_dims, x):  # right values, through a Function with the wrong backward
        return ScaledBackward.apply(x), in_dims[0]


class NanBackward(Sin):
    @staticmethod
    def backward(ctx, grad):  # overflows: inf / inf where the forward is finite
        (x,) = ctx.saved_tensors
        big = torch.exp(1000 + x.abs())
        return grad * torch.cos(x) * big / big


def samples(seed):
    gen = torch.Generator().manual_seed(seed)
    return [(torch.randn(3, 2, generator=gen, dtype=torch.float64),)]
"""

#: (planted bug, the case that fails for it); the twin Sin passes the same case.
PLANTED = {
    "vmap rule": ("WrongOutDim", "vmap/s0/in_dims=(1,),B=4"),
    "jvp": ("WrongSignJvp", "jvp/s0"),
    "backward (vjp)": ("ScaledBackward", "vjp/s0"),
    "jacrev": ("ScaledBackward", "jacrev/s0"),
    "grad of vmap": ("RuleCallsScaled", "grad_of_vmap/s0/in_dims=(1,),B=4"),
    "jvp of vmap": ("WrongSignJvp", "jvp_of_vmap/s0/in_dims=(1,),B=4"),
    "vmap of vjp (raises)": ("WrongOutDim", "vmap_of_vjp/s0/in_dims=(1,),B=4,cotangents=0"),
    # NaN from the backward and NaN in the loop reference: reported, never "not reproduced"
    "grad of vmap (NaN backward)": ("NanBackward", "grad_of_vmap/s0/in_dims=(1,),B=4"),
}
MAX_LINES = 45  # 31 (vmap) to 45 (vmap of jvp) lines here: the work, and the exit-status guards


def _write(project: Path, name: str, case: str, *extra: str) -> Path:
    out = project / "repros" / f"{name}-{len(list((project / 'repros').glob('*')))}.py"
    lib = "lib/minimal_repro_lib.py"
    argv = ["repro", f"{name}/{case}", f"{lib}:{name}", "--samples", f"{lib}:samples"]
    assert cli.main([*argv, "-o", str(out), *extra]) == 0
    return out


def _run(script: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(
        [sys.executable, str(script)],
        cwd=script.parent.parent.parent,  # neither the script's folder nor the module's
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="module")
def scripts(tmp_path_factory):
    """Every planted case's minimal script and its twin's, written and run."""
    project = tmp_path_factory.mktemp("project")
    (project / "lib").mkdir()
    (project / "repros").mkdir()
    (project / "lib" / "minimal_repro_lib.py").write_text(LIBRARY)
    mp = pytest.MonkeyPatch()
    mp.chdir(project)
    try:
        written = {
            what: (_write(project, bug, case), _write(project, "Sin", case))
            for what, (bug, case) in PLANTED.items()
        }
    finally:
        mp.undo()
    paths = [p for pair in written.values() for p in pair]
    with ThreadPoolExecutor(max_workers=4) as pool:
        runs = dict(zip(paths, pool.map(_run, paths)))
    return {what: [(p, p.read_text(), runs[p]) for p in pair] for what, pair in written.items()}


@pytest.mark.parametrize("what", list(PLANTED))
def test_the_minimal_repro_fails_the_same_way_and_its_twin_passes(scripts, what):
    (bug, bug_text, bug_run), (twin, twin_text, twin_run) = scripts[what]
    for text in (bug_text, twin_text):
        assert len(text.splitlines()) <= MAX_LINES, text
        assert "harness" not in text  # plain torch and the user's module
        compile(text, "repro.py", "exec")
    assert bug_run.returncode == 1, bug_run.stdout + bug_run.stderr
    if "raises" in what:  # the exception the suite reported, raised by the same call
        assert "RuntimeError: Mismatch in shape" in bug_run.stderr, bug_run.stderr
    else:
        assert "REPRODUCED" in bug_run.stdout, bug_run.stdout + bug_run.stderr
    assert twin_run.returncode == 0, twin_run.stdout + twin_run.stderr
    assert "not reproduced" in twin_run.stdout


def test_full_writes_the_self_checking_script(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "lib").mkdir()
    (tmp_path / "repros").mkdir()
    (tmp_path / "lib" / "minimal_repro_lib.py").write_text(LIBRARY)
    full = _write(tmp_path, "WrongOutDim", "vmap/s0/in_dims=(1,),B=4", "--full")
    text = full.read_text()
    assert len(text.splitlines()) > 200 and "def main():" in text
    run = _run(full)
    assert run.returncode == 1 and "REPRODUCED" in run.stdout, run.stdout + run.stderr


def test_a_case_the_short_form_does_not_cover_gets_the_full_script(tmp_path, capsys):
    out = tmp_path / "nested.py"
    case = "NumpyMul/vmap_nested/s0/in_dims=(0,0),B=2|in_dims=(0,0),B=3"
    assert cli.main(["repro", case, "-o", str(out)]) == 0
    said = capsys.readouterr().out
    assert "the full script (the minimal one does not cover nested vmap levels)" in said
    assert "def main():" in out.read_text()


def test_a_database_case_gets_a_minimal_script_that_passes(tmp_path, capsys):
    """NumpyTake: an integer index argument (not differentiable), the general form."""
    out = tmp_path / "take.py"
    assert (
        cli.main(["repro", "NumpyTake/grad_of_vmap/s0/in_dims=(None,0,0,None)", "-o", str(out)])
        == 0
    )
    text = out.read_text()
    assert "from autograd_function_db.numpy_ops import NumpyTake" in text
    assert "DIFF, OUTS = (0,), (0,)" in text
    run = _run_here(out)
    assert run.returncode == 0 and "not reproduced" in run.stdout, run.stdout + run.stderr


def _run_here(script: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=300
    )


def test_script_names_keep_the_sign():
    minus = script_name("F/vmap/s0/in_dims=(0,),B=4,out_dims=-1")
    plus = script_name("F/vmap/s0/in_dims=(0,),B=4,out_dims=1")
    assert minus != plus
    assert minus == "repro_F_vmap_s0_in_dims_0_B_4_out_dims_-1.py"
    long_a = script_name("F/vmap_nested/s0/" + "in_dims=(0,1,2,3),B=4|" * 5 + "x")
    long_b = script_name("F/vmap_nested/s0/" + "in_dims=(0,1,2,3),B=4|" * 5 + "y")
    assert long_a != long_b and len(long_a) <= len("repro_.py") + 80
