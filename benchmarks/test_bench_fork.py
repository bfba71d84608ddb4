"""What the process model costs where forking is unsafe (issue 34, part 5):
`pytest benchmarks/test_bench_fork.py --benchmark-only` (one run: the table's ratios compare).

* ``fork``: a worker as the fork pool starts it, from this process with torch and the
  harness imported (the child inherits them: it writes one byte and exits);
* ``spawn``: the least a fresh worker interpreter pays before its first case (``import
  torch`` and the harness's case runner), which fresh workers (pytest-xdist, the engine for
  an unsafe parent outside a recording) pay per worker and per restart after a crash;
* ``safety check``: ``fork_safety.unsafe_reason()`` (``/proc/self/task``), taken once per
  engine choice and once per samples probe;
* ``cases``: the vjp and vmap cases of one Function, in this process and in one forked
  worker, for scale (in-process is what a recorded check in an unsafe parent runs).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _fork_once() -> None:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.write(write, b"x")
        os._exit(0)
    os.close(write)
    assert os.read(read, 1) == b"x"
    os.close(read)
    os.waitpid(pid, 0)


def _spawn_once() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    code = "import torch, harness.engine.runner"
    subprocess.run([sys.executable, "-c", code], check=True, env=env)


def test_worker_start_fork(benchmark):
    import torch  # noqa: F401

    import harness.engine.runner  # noqa: F401

    benchmark.pedantic(_fork_once, rounds=20, warmup_rounds=2)


def test_worker_start_spawn(benchmark):
    benchmark.pedantic(_spawn_once, rounds=3, warmup_rounds=1)


def test_safety_check(benchmark):
    from harness.engine.fork_safety import unsafe_reason

    assert benchmark(unsafe_reason) == ""


@pytest.mark.parametrize("model", ["in-process", "fork"])
def test_cases(benchmark, monkeypatch, model):
    from harness.core.options import Options
    from harness.engine import parallel
    from harness.sources.entries import make_entry
    from tests.verdict_functions import Double, plain_samples

    monkeypatch.setattr(parallel, "process_model", lambda source="", entries=(): (model, ""))
    entry = make_entry(Double, plain_samples)
    options = Options(checks=("vjp", "vmap"), timeout_s=60)

    def run() -> None:
        results = parallel.run_parallel([entry], options, 1, source="user")
        assert results and all(r.status == "pass" for r in results)

    benchmark.pedantic(run, rounds=3, warmup_rounds=1)
