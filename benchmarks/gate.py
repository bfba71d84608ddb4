"""The gate's cost: ``afdb check`` against a bare import, ``--watch`` reruns, workers, plain torch.

    python -m benchmarks.gate [--only check,watch,workers,torch] [--rounds 5] [--base DIR]

Whole processes, as a user runs them, measured alternately (a load spike hits every
side of a comparison) and reported as medians and as ratios between measurements of the
same round. CPU is the process's and its children's (``resource.RUSAGE_CHILDREN``).

* ``check``: ``afdb check`` of the README's small Function (isolated, every default check)
  against ``python -c "import torch, harness"``, and the same check with the dynamo shim,
  the grads shim or both off (``AFDB_DYNAMO_SHIM=0``, ``AFDB_GRADS_SHIM=0``).
* ``watch``: ``afdb check --watch`` with N runs (the file touched after each) against one
  run: (CPU(N) - CPU(1)) / (N - 1) is what each later run costs, over a fresh check's CPU.
* ``workers``: ``afdb run -n 1`` and ``-n 2`` on a part of the database (``--select``),
  this checkout and ``--base`` (a checkout of another revision): the CPU ``-n 2`` adds.
* ``torch``: plain torch, no harness: the first ``torch.func.vjp`` backward, the first
  ``torch.autograd.grad`` with ``grad_outputs`` and the first dual tensor, each in a fresh
  interpreter, against ``import torch`` (the upstream report's measurement).

The children import compiled bytecode (a private ``PYTHONPYCACHEPREFIX``; an installed
wheel has it), even where ``PYTHONDONTWRITEBYTECODE`` is set.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ROT = "examples/rotations.py"
CHECK = ["check", f"{ROT}:RotatePoints", "--samples", f"{ROT}:rotation_samples", "-q"]
BARE = ["-c", "import torch, harness"]

#: Plain torch, one first use each (the upstream report): what each costs over ``import torch``.
TORCH_SNIPPETS = {
    "import torch": "import torch",
    "+ torch.func.vjp backward": (
        "import torch\nx = torch.ones(3, dtype=torch.float64)\ntorch.func.vjp(torch.sin, x)[1](x)"
    ),
    "+ autograd.grad with grad_outputs": (
        "import torch\nx = torch.ones(3, dtype=torch.float64, requires_grad=True)\n"
        "torch.autograd.grad(torch.sin(x), x, torch.ones(3, dtype=torch.float64))"
    ),
    "+ first dual tensor": (
        "import torch\nimport torch.autograd.forward_ad as fwAD\n"
        "with fwAD.dual_level():\n    fwAD.make_dual(torch.ones(3), torch.ones(3))"
    ),
    "+ import torch._dynamo": "import torch\nimport torch._dynamo",
}

_PYCACHE = tempfile.mkdtemp(prefix="afdb-pycache-")


def env_for(tree: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(tree), PYTHONPYCACHEPREFIX=_PYCACHE, **extra)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def run(
    argv: list[str], *, tree: Path = ROOT, afdb: bool = True, **env: str
) -> tuple[float, float]:
    """(wall s, CPU s of the process and its children) of ``afdb ARGV`` or ``python ARGV``."""
    wall, cpu, _ = run_output(argv, tree=tree, afdb=afdb, **env)
    return wall, cpu


def run_output(
    argv: list[str], *, tree: Path = ROOT, afdb: bool = True, **env: str
) -> tuple[float, float, str]:
    """``run``, with what the command printed on standard output."""
    cmd = [sys.executable, *(["-m", "harness.cli"] if afdb else []), *argv]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=tree, env=env_for(tree, **env), capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"{cmd} exited {proc.returncode}: {proc.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, proc.stdout


def watch_run(iterations: int, tree: Path = ROOT) -> tuple[float, float]:
    """``afdb check --watch`` for ``iterations`` runs, the Function's file touched after each
    (a copy of the example in a temporary folder): (wall, CPU) of the whole process."""
    folder = Path(tempfile.mkdtemp(prefix="afdb-watch-"))
    src = folder / "rotations.py"
    src.write_text((tree / ROT).read_text())
    cmd = [sys.executable, "-m", "harness.cli", "check", "rotations.py:RotatePoints"]
    cmd += ["--samples", "rotations.py:rotation_samples", "-q", "--watch"]
    cmd += ["--watch-iterations", str(iterations), "--watch-interval", "0.05"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.Popen(
        cmd,
        cwd=folder,
        env=env_for(tree, PYTHONUNBUFFERED="1"),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("afdb check --watch: watching"):
            stamp = src.stat().st_mtime_ns + 10**9
            os.utime(src, ns=(stamp, stamp))
    proc.wait()
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _med(xs: list[float]) -> float:
    return statistics.median(xs)


def _fmt(xs: list[float]) -> str:
    return "[" + ", ".join(f"{x:.2f}" for x in xs) + "]"


def bench_check(rounds: int) -> None:
    variants: dict[str, dict[str, str]] = {
        "check": {},
        "dynamo shim off": {"AFDB_DYNAMO_SHIM": "0"},
        "grads shim off": {"AFDB_GRADS_SHIM": "0"},
        "both shims off": {"AFDB_DYNAMO_SHIM": "0", "AFDB_GRADS_SHIM": "0"},
    }
    sides: dict[str, list[tuple[float, float]]] = {"bare": [], **{k: [] for k in variants}}
    run(CHECK)  # compile the bytecode once, unmeasured
    for _ in range(rounds):
        sides["bare"].append(run(BARE, afdb=False))
        for name, env in variants.items():
            sides[name].append(run(CHECK, **env))
    bare = sides["bare"]
    print("\n## afdb check (isolated, every default check) vs python -c 'import torch, harness'")
    for name, ms in sides.items():
        walls = [m[0] / b[0] for m, b in zip(ms, bare)]
        cpus = [m[1] / b[1] for m, b in zip(ms, bare)]
        print(
            f"{name:<16} wall {_med([m[0] for m in ms]):.2f} s  CPU {_med([m[1] for m in ms]):.2f} s"
            f"  ratio wall {_med(walls):.2f}x {_fmt(walls)}  CPU {_med(cpus):.2f}x {_fmt(cpus)}"
        )


def bench_watch(rounds: int, later: int = 4) -> None:
    watch_run(1)
    ones, many, fresh = [], [], []
    for _ in range(rounds):
        fresh.append(run(CHECK))
        ones.append(watch_run(1))
        many.append(watch_run(later + 1))
    per = [(m[1] - o[1]) / later for m, o in zip(many, ones)]
    ratios = [p / f[1] for p, f in zip(per, fresh)]
    print(f"\n## afdb check --watch: {later} later runs against one, and a fresh afdb check")
    print(f"fresh afdb check CPU {_med([f[1] for f in fresh]):.2f} s {_fmt([f[1] for f in fresh])}")
    print(
        f"--watch, 1 run CPU {_med([o[1] for o in ones]):.2f} s; {later + 1} runs {_med([m[1] for m in many]):.2f} s"
    )
    print(
        f"each later run: CPU {_med(per):.3f} s {_fmt(per)} = {_med(ratios):.3f}x a fresh check {_fmt(ratios)}"
    )


def bench_workers(rounds: int, select: list[str], base: Path | None) -> None:
    trees = {"this checkout": ROOT} | ({"base": base} if base else {})
    argv = ["run", "-q", *select]
    cpus: dict[tuple[str, str], list[float]] = {}
    for tree in trees.values():
        run([*argv, "-n", "1"], tree=tree)
    for _ in range(rounds):
        for label, tree in trees.items():
            for n in ("1", "2"):
                cpus.setdefault((label, n), []).append(run([*argv, "-n", n], tree=tree)[1])
    print(f"\n## afdb run {' '.join(select)}: CPU of -n 2 over -n 1 (medians of {rounds})")
    for label in trees:
        one, two = cpus[(label, "1")], cpus[(label, "2")]
        ratio = [b / a for a, b in zip(one, two)]
        print(
            f"{label:<14} -n 1 CPU {_med(one):.2f} s  -n 2 CPU {_med(two):.2f} s  "
            f"-n 2 / -n 1 {_med(ratio):.3f}x {_fmt(ratio)}"
        )


def bench_torch(rounds: int) -> None:
    runs: dict[str, list[tuple[float, float]]] = {k: [] for k in TORCH_SNIPPETS}
    for _ in range(rounds):
        for name, code in TORCH_SNIPPETS.items():
            runs[name].append(run(["-c", code], afdb=False))
    base = runs["import torch"]
    print("\n## plain torch (no harness): a first use in a fresh interpreter vs import torch")
    for name, ms in runs.items():
        extra = [m[1] - b[1] for m, b in zip(ms, base)]
        ratio = [m[0] / b[0] for m, b in zip(ms, base)]
        print(
            f"{name:<36} CPU {_med([m[1] for m in ms]):.2f} s (+{_med(extra):.2f} s)  wall ratio "
            f"{_med(ratio):.2f}x {_fmt(ratio)}"
        )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--only", default="check,watch,workers,torch")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--base", help="a checkout of another revision (for --only workers)")
    p.add_argument(
        "--select",
        default="tag:backend:numpy",
        help="entries for --only workers (default: tag:backend:numpy)",
    )
    args = p.parse_args()
    only = set(args.only.split(","))
    print(
        f"load average before: {', '.join(f'{v:.1f}' for v in os.getloadavg())}; {os.cpu_count()} CPUs"
    )
    if "check" in only:
        bench_check(args.rounds)
    if "watch" in only:
        bench_watch(args.rounds)
    if "workers" in only:
        bench_workers(args.rounds, args.select.split(), Path(args.base) if args.base else None)
    if "torch" in only:
        bench_torch(args.rounds)
    print(f"\nload average after: {', '.join(f'{v:.1f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    main()
