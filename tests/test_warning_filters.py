"""A correct Function passes under ``-W error`` (issue 30, part 2): torch's own deprecation
warnings that the suite's use of torch sets off are never the user's failure, nor noise in
the user's pytest output; what a Function warns by itself stays its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parent.parent
ROT = ROOT / "examples" / "rotations.py"

#: A correct Function whose forward calls ``torch.jit.script`` itself: the deprecation
#: warning is the Function's own (torch attributes it to the same module as its own).
SCRIPTS_ITSELF = textwrap.dedent(
    """
    import torch


    def _double(x):
        return x * 2


    class ScriptsItself(torch.autograd.Function):
        generate_vmap_rule = True

        @staticmethod
        def forward(x):
            return torch.jit.script(_double)(x)

        @staticmethod
        def setup_context(ctx, inputs, output):
            pass

        @staticmethod
        def backward(ctx, g):
            return 2 * g


    def samples():
        return [(torch.randn(5, dtype=torch.float64),)]
    """
)

CHECK_UNDER_W_ERROR = textwrap.dedent(
    """
    import json
    import harness
    from mylib import RotatePoints, rotation_samples
    from userfns import ScriptsItself, samples

    good = harness.check(RotatePoints, rotation_samples, checks=("vmap_fallback", "jvp", "vjp"))
    own = harness.check(ScriptsItself, samples, checks=("vmap", "vmap_fallback"))
    print(json.dumps({
        "good": sorted({c.status for c in good.cases}),
        "good_messages": [c.message for c in good.cases if c.status != "pass"],
        "own": sorted({c.status for c in own.cases}),
        "own_messages": sorted({c.message.split(": ", 1)[-1] for c in own.cases}),
    }))
    """
)


def _fresh_check(tmp_path: Path, *warning_options: str) -> dict[str, object]:
    """``CHECK_UNDER_W_ERROR`` in a fresh interpreter (torch's first dual tensor not yet
    taken), with ``warning_options`` on its command line."""
    (tmp_path / "mylib.py").write_text(ROT.read_text())
    (tmp_path / "userfns.py").write_text(SCRIPTS_ITSELF)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(tmp_path)]))
    proc = subprocess.run(
        [sys.executable, *warning_options, "-c", CHECK_UNDER_W_ERROR],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "DeprecationWarning" not in proc.stderr, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_a_correct_function_passes_check_under_W_error(tmp_path):
    """Before the fix, torch's first dual tensor (in the vmap_fallback or jvp cases) raised
    "`torch.jit.script` is deprecated" as an ``internal`` error of the suite."""
    got = _fresh_check(tmp_path, "-W", "error::DeprecationWarning")
    assert got["good"] == ["pass"], got["good_messages"]
    # The Function's own torch.jit.script call is its own warning, hence its own error
    # (never the suite's ``internal``, never ignored), in the vmap check and in the
    # fallback check's warning capture alike.
    assert got["own"] == ["error"], got
    assert got["own_messages"] == [
        "the Function raised DeprecationWarning: `torch.jit.script` is deprecated. Please "
        "switch to `torch.compile` or `torch.export`. (at userfns.py:14 in forward)"
    ], got


CONFORMANCE_MODULE = """
from harness.pytest_plugin import conformance_tests
from mylib import RotatePoints, rotation_samples

test_rotate = conformance_tests(
    RotatePoints, rotation_samples, checks=["vmap_fallback", "jvp", "vjp"]
)
"""


@pytest.mark.parametrize(
    "warning_options",
    [("-W", "error::DeprecationWarning"), ()],
    ids=["W-error", "default"],
)
def test_conformance_tests_under_W_error_show_no_suite_warning(
    pytester, monkeypatch, warning_options
):
    """Before the fix: one ``internal`` failure under ``-W error`` and 18 torch.jit.script
    DeprecationWarnings in the warnings summary of a default run."""
    pytester.makepyfile(mylib=ROT.read_text(), test_conformance=CONFORMANCE_MODULE)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), str(pytester.path)]))
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-p", "no:xdist", *warning_options, timeout=240
    )
    out = result.stdout.str()
    assert result.ret == 0, out[-3000:]
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed", 0) >= 5 and "failed" not in outcomes, outcomes
    assert "warning" not in outcomes and "warnings" not in outcomes, out[-3000:]
    assert "DeprecationWarning" not in out and "jit.script" not in out, out[-3000:]
