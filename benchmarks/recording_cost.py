"""What recording costs a test suite: ``pytest`` with and without ``--afdb-record``, one run.

    python -m benchmarks.recording_cost [--tests 300] [--rounds 3] [--live]

Writes a throwaway project (a small library of five autograd.Functions: a generated vmap
rule, a legacy Function, one with int/bool/str options, one with an index tensor, one
calling another inside its forward; and a pytest suite of ``--tests`` small tests that call
them through the library's public functions, forward and backward) and runs its suite in
fresh interpreters, alternately without and with ``--afdb-record=DIR``, ``--rounds``
times. It prints each side's median wall and CPU time (the child's user + system), and
pytest's own session time (collection and the tests, torch being imported before it on
both sides by a conftest), and their ratios within this run; the target is at most 1.2x
wall (issue 28). Both sides pay for starting Python, importing torch and collecting; only
the second records (and imports the harness's recording wing and writes the files).
With ``--live`` the library's Functions take what cannot be data instead (a lambda, an
``nn.Module``, a bound method, a class made per call): the cost of live snapshots.
Then, in this process, the cost of one ``apply`` call with and without a recording active
(the part of the cost that grows with the number of calls).
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

LIB = """
import torch


class Scale(torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(x, k):
        return x * k

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.k = inputs[1]

    @staticmethod
    def backward(ctx, g):
        return g * ctx.k, None


class Tanh(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = torch.tanh(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return g * (1 - y * y)


class Pool(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, n, keep, mode):
        ctx.shape = x.shape
        out = x.sum(-1, keepdim=keep) if mode == "sum" else x.mean(-1, keepdim=keep)
        return out * n

    @staticmethod
    def backward(ctx, g):
        return g.reshape(*ctx.shape[:-1], 1).expand(ctx.shape) * 1.0, None, None, None


class Gather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, index):
        ctx.save_for_backward(index)
        ctx.n = x.shape[0]
        return x[index]

    @staticmethod
    def backward(ctx, g):
        (index,) = ctx.saved_tensors
        out = g.new_zeros((ctx.n, *g.shape[1:]))
        out.index_add_(0, index, g)
        return out, None


class Outer(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return Tanh.apply(x) * 2

    @staticmethod
    def backward(ctx, g):
        return g * 2


def scale(x, k=2.0):
    return Scale.apply(x, k)


def tanh(x):
    return Tanh.apply(x)


def pool(x, n=2, keep=False, mode="sum"):
    return Pool.apply(x, n, keep, mode)


def gather(x, index):
    return Gather.apply(x, index)


def outer(x):
    return Outer.apply(x)
"""

TESTS = """
import pytest
import torch

import benchlib as lib

N = {per}


@pytest.mark.parametrize("i", range(N))
def test_scale(i):
    x = torch.randn(4, 3 + i % 4, requires_grad=True)
    lib.scale(x, 1.0 + i % 3).sum().backward()
    assert x.grad is not None


@pytest.mark.parametrize("i", range(N))
def test_tanh(i):
    x = torch.randn(5 + i % 3, requires_grad=True)
    lib.tanh(x).sum().backward()
    assert torch.allclose(x.grad, 1 - torch.tanh(x) ** 2)


@pytest.mark.parametrize("i", range(N))
def test_pool(i):
    x = torch.randn(3, 6, requires_grad=True)
    lib.pool(x, 1 + i % 2, bool(i % 2), "sum" if i % 3 else "mean").sum().backward()
    assert x.grad.shape == x.shape


@pytest.mark.parametrize("i", range(N))
def test_gather(i):
    x = torch.randn(7, 2, requires_grad=True)
    index = torch.tensor([i % 7, (i + 3) % 7])
    lib.gather(x, index).sum().backward()
    assert x.grad.sum() == 4


@pytest.mark.parametrize("i", range(N))
def test_outer(i):
    x = torch.randn(4, requires_grad=True)
    lib.outer(x).sum().backward()
    assert torch.equal(x.grad, torch.full((4,), 2.0))
"""


LIVE_LIB = """
import torch


class Step(torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(y, h, fn):
        return y + h * fn(y)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])
        ctx.h, ctx.fn = inputs[1], inputs[2]

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        _, vjp = torch.func.vjp(ctx.fn, y)
        return g + ctx.h * vjp(g)[0], None, None


class LinearTanh(torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(x, layer):
        return torch.tanh(torch.nn.functional.linear(x, layer.weight, layer.bias))

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(output)
        ctx.weight = inputs[1].weight.detach()

    @staticmethod
    def backward(ctx, g):
        (out,) = ctx.saved_tensors
        return (g * (1 - out**2)) @ ctx.weight, None


def wrap(fn, dfn):
    class Wrapper(torch.autograd.Function):
        generate_vmap_rule = True

        @staticmethod
        def forward(x):
            return fn(x)

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(inputs[0])

        @staticmethod
        def backward(ctx, g):
            return g * dfn(ctx.saved_tensors[0])

    return Wrapper


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(3, 3)

    def forward(self, y):
        return torch.tanh(self.layer(y))


def step(y, h, fn):
    return Step.apply(y, h, fn)


def linear_tanh(x, layer):
    return LinearTanh.apply(x, layer)


def soft_sin(x):
    return wrap(torch.sin, torch.cos).apply(x)
"""

LIVE_TESTS = """
import pytest
import torch

import benchlib as lib

N = {per}


@pytest.mark.parametrize("i", range(N))
def test_lambda(i):
    y = torch.randn(4, 3, requires_grad=True)
    lib.step(y, 0.1, lambda v: -v * (1 + i % 3)).sum().backward()
    assert y.grad is not None


@pytest.mark.parametrize("i", range(N))
def test_bound_method(i):
    net = lib.Net()
    y = torch.randn(2 + i % 3, 3, requires_grad=True)
    lib.step(y, 0.1, net.forward).sum().backward()
    assert y.grad is not None


@pytest.mark.parametrize("i", range(N))
def test_module(i):
    layer = torch.nn.Linear(3, 2 + i % 2)
    x = torch.randn(4, 3, requires_grad=True)
    lib.linear_tanh(x, layer).sum().backward()
    assert x.grad.shape == x.shape


@pytest.mark.parametrize("i", range(N))
def test_class_per_call(i):
    x = torch.randn(5, requires_grad=True)
    lib.soft_sin(x).sum().backward()
    assert torch.allclose(x.grad, torch.cos(x))


@pytest.mark.parametrize("i", range(N))
def test_module_twice(i):
    layer = torch.nn.Linear(3, 3)
    x = torch.randn(3, 3, requires_grad=True)
    lib.linear_tanh(lib.linear_tanh(x, layer), layer).sum().backward()
    assert x.grad is not None
"""


def _project(root: Path, tests: int, live: bool = False) -> None:
    (root / "benchlib.py").write_text(textwrap.dedent(LIVE_LIB if live else LIB))
    (root / "tests").mkdir()
    # torch imported before the session starts on both sides (--afdb-record imports it at
    # configure time), so pytest's session time is collection and tests alone
    (root / "conftest.py").write_text("import torch  # noqa: F401\n")
    text = textwrap.dedent(LIVE_TESTS if live else TESTS).format(per=tests // 5)
    (root / "tests" / "test_lib.py").write_text(text)


def _once(root: Path, record: bool) -> tuple[float, float, float, str]:
    """(wall s, CPU s, pytest's own session time s, the afdb line) of one pytest run in a
    fresh interpreter."""
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"]
    if record:
        argv.append(f"--afdb-record={root / 'rec'}")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "PYTHON"))}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(argv, cwd=root, env=env, capture_output=True, text=True, timeout=900)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(
            f"pytest failed ({proc.returncode}):\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}"
        )
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("afdb:")]
    session = float(re.findall(r" in ([0-9.]+)s", proc.stdout)[-1])
    return wall, cpu, session, lines[-1] if lines else ""


def per_call(calls: int, rounds: int) -> tuple[float, float]:
    """Median microseconds of one ``apply`` (forward only, small tensors, from a shallow
    stack) without and with a recording active, alternated, in this process."""
    import torch

    from harness.recording import recording

    namespace: dict[str, object] = {}
    exec(textwrap.dedent(LIB), namespace)
    scale = namespace["scale"]
    x = torch.ones(4, 3)

    def loop() -> float:
        start = time.perf_counter()
        for i in range(calls):
            scale(x, float(i % 3))  # type: ignore[operator]
        return (time.perf_counter() - start) / calls * 1e6

    loop()
    plain, observed = [], []
    with tempfile.TemporaryDirectory(prefix="afdb-recording-cost-") as tmp:
        for r in range(rounds):
            plain.append(loop())
            with recording(Path(tmp) / f"rec{r}", program="benchmark"):
                observed.append(loop())
    return statistics.median(plain), statistics.median(observed)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tests", type=int, default=300, help="tests in the suite (default 300)")
    parser.add_argument("--rounds", type=int, default=3, help="alternated rounds (default 3)")
    parser.add_argument(
        "--calls", type=int, default=20000, help="apply calls per round of the per-call loop"
    )
    parser.add_argument(
        "--live", action="store_true", help="Functions that take lambdas, modules, methods"
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="afdb-recording-cost-") as tmp:
        root = Path(tmp)
        _project(root, args.tests, args.live)
        _once(root, False)  # warm the file caches and bytecode for both sides
        sides: dict[bool, list[tuple[float, float, float]]] = {False: [], True: []}
        summary = ""
        for _ in range(args.rounds):
            for record in (False, True):
                wall, cpu, session, line = _once(root, record)
                sides[record].append((wall, cpu, session))
                summary = line if record else summary

    def med(record: bool, i: int) -> float:
        return statistics.median(r[i] for r in sides[record])

    def rounds(i: int) -> str:
        return ", ".join(f"{r[i] / b[i]:.2f}" for b, r in zip(sides[False], sides[True]))

    print(
        f"load average {os.getloadavg()[0]:.1f}; {args.tests} tests"
        f"{' (live values)' if args.live else ''}, {args.rounds} rounds each side"
    )
    for i, what in enumerate(("wall (whole process)", "CPU (whole process)", "pytest session")):
        print(
            f"{what}: {med(False, i):.2f} s without, {med(True, i):.2f} s with --afdb-record: "
            f"{med(True, i) / med(False, i):.3f}x (per round: {rounds(i)})"
        )
    print(summary)
    plain, observed = per_call(args.calls, args.rounds)
    print(
        f"one apply (in process, {args.calls} calls a round): {plain:.1f} us without, "
        f"{observed:.1f} us with a recording active: {observed / plain:.2f}x "
        f"(+{observed - plain:.1f} us a call)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
