"""What ``pytest --afdb`` costs over the plain run of the same tests (issue 41, part 2:
at most 3x): a small project whose Function's forward takes tens of milliseconds on a
large input (a separable blur of a 4 x 8 x 192 x 192 image, a legacy
``forward(ctx, ...)`` Function as pytorch_wavelets' are, and a modern one), three tests.

``pytest benchmarks/test_bench_afdb_ratio.py --benchmark-only -s``: each round runs the
plain session and the ``--afdb`` session back to back (fresh interpreters, the same
bytecode cache) and the ratio of their wall times is printed per round and kept in the
benchmark's ``extra_info`` (median ``ratio``). A ratio, never a timed assertion.
``AFDB_BENCH_BASE=DIR`` (a checkout of another revision, e.g. ``git archive REV | tar -x -C
DIR``) measures that revision's harness instead, for a before/after table."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

MODULE = '''
import torch
import torch.nn.functional as F


def _blur(x, k):
    c = x.shape[1]
    rows = k.reshape(1, 1, -1, 1).expand(c, 1, -1, 1)
    cols = k.reshape(1, 1, 1, -1).expand(c, 1, 1, -1)
    pad = k.numel() // 2
    y = F.conv2d(x, rows, padding=(pad, 0), groups=c)
    return F.conv2d(y, cols, padding=(0, pad), groups=c)


class LegacyBlur(torch.autograd.Function):
    """A separable blur, legacy style: the kernel is symmetric, so backward is the blur."""

    @staticmethod
    def forward(ctx, x, k):
        ctx.save_for_backward(k)
        return _blur(x, k)

    @staticmethod
    def backward(ctx, g):
        (k,) = ctx.saved_tensors
        return _blur(g, k), None


class Blur(torch.autograd.Function):
    @staticmethod
    def forward(x, k):
        return _blur(x, k)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[1])

    @staticmethod
    def backward(ctx, g):
        (k,) = ctx.saved_tensors
        return _blur(g, k), None
'''

TESTS = """
import torch
from blur import Blur, LegacyBlur

K = torch.tensor([1.0, 4.0, 6.0, 4.0, 1.0]) / 16


def _image(seed, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(4, 8, 192, 192, generator=g, dtype=dtype)


def test_legacy_blur_keeps_the_mean():
    x = _image(0)
    y = LegacyBlur.apply(x, K)
    assert torch.allclose(y.mean(), x.mean(), atol=1e-2)


def test_legacy_blur_gradient():
    x = _image(1, torch.float64).requires_grad_()
    LegacyBlur.apply(x, K.double()).sum().backward()
    assert x.grad.shape == x.shape


def test_blur_gradient():
    x = _image(2).requires_grad_()
    Blur.apply(x, K).square().sum().backward()
    assert torch.isfinite(x.grad).all()
"""


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("afdb_ratio")
    (root / "blur.py").write_text(textwrap.dedent(MODULE))
    (root / "test_blur.py").write_text(textwrap.dedent(TESTS))
    (root / "pytest.ini").write_text("[pytest]\n")
    return root


def _session(root: Path, *extra: str) -> float:
    # AFDB_BENCH_BASE: a checkout of another revision to measure instead (put first on the path)
    path = os.pathsep.join(p for p in (os.environ.get("AFDB_BENCH_BASE", ""), str(root)) if p)
    env = dict(os.environ, PYTHONPATH=path, PYTHONPYCACHEPREFIX=str(root / ".pyc"))
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *extra],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    took = time.perf_counter() - start
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return took


def test_afdb_over_plain(benchmark, project):
    ratios: list[float] = []

    def one_round() -> None:
        plain = _session(project)
        checked = _session(project, "--afdb", "--afdb-report-only", "--afdb-json=report.json")
        ratios.append(checked / plain)
        print(f"plain {plain:.2f} s, --afdb {checked:.2f} s, ratio {checked / plain:.2f}x")

    benchmark.pedantic(one_round, rounds=2, iterations=1)
    benchmark.extra_info["ratio"] = statistics.median(ratios)
    benchmark.extra_info["ratios"] = ratios
    print(f"--afdb / plain: median {statistics.median(ratios):.2f}x over {len(ratios)} rounds")
