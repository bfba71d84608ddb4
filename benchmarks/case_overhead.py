"""Where a whole ``afdb`` command's CPU time goes: imports, torch, the Functions, the harness.

    python -m benchmarks.case_overhead [--source pytorch] [--rounds 3] [--base DIR]
                                       [--argv "check examples/rotations.py:RotatePoints ..."]

Runs the command (default ``afdb run --source pytorch -q``, in this process as the command
runs it) in a fresh interpreter under a sampling profiler started before ``import torch``:
a CPU-time timer signal (``ITIMER_PROF``, every millisecond) notes the Python stack it
lands in. A sample is

* **import** when any frame of the stack is the import system's (``importlib._bootstrap``:
  torch, the harness, and what torch imports on first use, such as sympy on the first
  ``torch.autograd.grad`` with ``grad_outputs`` and the JIT decompositions on the first
  forward-mode dual tensor);
* else the package of the innermost frame that is not the standard library's (a
  ``contextlib`` or ``inspect`` frame counts for whoever called it): **torch**,
  **Function** (the registry, PyTorch's ``autograd_function_db``, numpy, the examples),
  **harness**, or **other**.

A signal is handled between bytecodes, so the time of a C function (a torch op the harness
calls: a clone, a stack, ``isclose``) lands in the Python frame that called it. The harness
samples therefore include the torch ops the harness itself calls; a second, in-process
``cProfile`` pass of the same command (``profile_share``'s charging of C functions to their
callers) gives the fraction of the harness's self-time that is torch ops, and **harness
outside torch** is the harness samples times the rest. Per case: that CPU time over the
number of cases.

``--base DIR`` measures a checkout of another revision the same way (alternating with this
one, ``--rounds`` times; medians), so the two are compared within one run. The
interpreter writes no bytecode caches when ``PYTHONDONTWRITEBYTECODE`` is set; the children
get a private ``PYTHONPYCACHEPREFIX`` instead, so both sides import compiled bytecode, as
an installed wheel does.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_ARGV = "run --source pytorch -q"
BUCKETS = ("import", "torch", "Function", "harness", "other")
_STDLIB = tuple(
    os.path.abspath(p)
    for p in {sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["platstdlib"]}
)


def _kind(filename: str) -> str | None:
    """The bucket of one frame's file, or None for the standard library (look further out)."""
    if filename.startswith("<frozen importlib"):
        return "import"
    if filename.startswith("<frozen") or (
        filename.startswith(_STDLIB) and "site-packages" not in filename
    ):
        return None
    if "autograd_function_db" in filename or "/numpy/" in filename or "/examples/" in filename:
        return "Function"
    if "/torch/" in filename:
        return "torch"
    if "/harness/" in filename:
        return "harness"
    return "other"


def classify(frame: Any) -> str:
    """The bucket of one sample, from the stack it landed in (see the module docstring)."""
    innermost: str | None = None
    f = frame
    while f is not None:
        kind = _kind(f.f_code.co_filename)
        if kind == "import":
            return "import"
        if innermost is None and kind is not None:
            innermost = kind
        f = f.f_back
    return innermost or "other"


def child(argv: list[str], out: str, interval_s: float) -> None:
    """The measured process: the sampler first, then the command as ``afdb`` runs it."""
    import resource

    counts = dict.fromkeys(BUCKETS, 0)

    def on_sample(_signum: int, frame: Any) -> None:
        counts[classify(frame)] += 1

    signal.signal(signal.SIGPROF, on_sample)
    signal.setitimer(signal.ITIMER_PROF, interval_s, interval_s)
    import io
    from contextlib import redirect_stdout

    from harness.cli.main import main as afdb

    buffer = io.StringIO()
    with redirect_stdout(buffer):
        rc = afdb(argv)
    signal.setitimer(signal.ITIMER_PROF, 0, 0)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    text = buffer.getvalue().strip().splitlines()
    with open(out, "w") as f:
        json.dump(
            {
                "rc": rc,
                "counts": counts,
                "cpu_s": usage.ru_utime + usage.ru_stime,
                "children_cpu_s": children.ru_utime + children.ru_stime,
                "cases": _cases(text),
                "summary": text[-1] if text else "",
            },
            f,
        )
    sys.stdout.flush()
    os._exit(0)  # as ``afdb`` ends (harness.cli.main.entry)


def _cases(lines: list[str]) -> int:
    for line in reversed(lines):
        if " cases" in line and ":" in line:
            head = line.split(":", 1)[1].strip().split(" ", 1)[0]
            if head.isdigit():
                return int(head)
    return 0


#: The children load this file (and ``profile_share``) by path, so the checkout measured
#: (PYTHONPATH) provides the harness even where its own benchmarks/ differ.
_LOAD = (
    "import sys, importlib.util; "
    "spec = importlib.util.spec_from_file_location('afdb_case_overhead', sys.argv[1]); "
    "mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod); "
)


def _env(tree: Path, pycache: str) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(tree), PYTHONPYCACHEPREFIX=pycache)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def measure(tree: Path, argv: list[str], pycache: str, interval_s: float = 0.001) -> dict[str, Any]:
    """One sampled run of ``afdb ARGV`` from the checkout ``tree`` in a fresh interpreter."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = f.name
    try:
        code = _LOAD + "mod.child(sys.argv[4:], sys.argv[2], float(sys.argv[3]))"
        start = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-c", code, __file__, out, str(interval_s), *argv],
            cwd=tree,
            env=_env(tree, pycache),
            capture_output=True,
            text=True,
        )
        wall = time.perf_counter() - start
        if proc.returncode != 0:
            raise RuntimeError(f"{argv} in {tree} failed: {proc.stderr[-2000:]}")
        with open(out) as f:
            info: dict[str, Any] = json.load(f)
    finally:
        os.unlink(out)
    info["wall_s"] = wall
    return info


def torch_op_fraction(tree: Path, argv: list[str], pycache: str) -> float:
    """The fraction of the harness's self-time (C functions charged to their callers) that
    is torch ops, from a cProfile pass of the same command in a fresh interpreter."""
    code = _LOAD.replace("case_overhead", "profile_share") + (
        "import io, cProfile, pstats, contextlib; _charged, _bucket = mod._charged, mod._bucket; "
        "from harness.cli.main import main; "
        "p = cProfile.Profile(); p.enable(); "
        "buf = io.StringIO(); ctx = contextlib.redirect_stdout(buf); ctx.__enter__(); "
        "main(sys.argv[2:]); ctx.__exit__(None, None, None); p.disable(); "
        "per = {}; "
        "[per.__setitem__(k, per.get(k, 0.0) + s) for f, s, k in _charged(pstats.Stats(p)) "
        "if _bucket(f) == 'harness']; "
        "print(per.get('torch ops', 0.0) / (sum(per.values()) or 1.0))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(Path(__file__).with_name("profile_share.py")), *argv],
        cwd=tree,
        env=_env(tree, pycache),
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"cProfile pass failed: {proc.stderr[-2000:]}")
    return float(proc.stdout.strip().splitlines()[-1])


def split(info: dict[str, Any], torch_ops: float) -> dict[str, float]:
    """CPU seconds per bucket (the process's CPU time shared out by the samples)."""
    counts = info["counts"]
    n = sum(counts.values()) or 1
    cpu = info["cpu_s"]
    out = {k: cpu * counts[k] / n for k in BUCKETS}
    out["harness outside torch"] = out["harness"] * (1.0 - torch_ops)
    out["torch ops the harness calls"] = out["harness"] * torch_ops
    return out


def report(label: str, runs: list[dict[str, Any]], torch_ops: float) -> dict[str, float]:
    cases = runs[0]["cases"] or 1
    parts = [split(r, torch_ops) for r in runs]
    med = {k: statistics.median(p[k] for p in parts) for k in parts[0]}
    med["cpu_s"] = statistics.median(r["cpu_s"] for r in runs)
    med["children_cpu_s"] = statistics.median(r["children_cpu_s"] for r in runs)
    med["wall_s"] = statistics.median(r["wall_s"] for r in runs)
    med["cases"] = cases
    med["harness_ms_per_case"] = 1000 * med["harness outside torch"] / cases
    print(f"\n{label}: {runs[0]['summary']}")
    print(
        f"  CPU {med['cpu_s']:.2f} s in the process (+{med['children_cpu_s']:.2f} s in "
        f"workers), wall {med['wall_s']:.2f} s; medians of {len(runs)}"
    )
    for k in (*BUCKETS, "harness outside torch", "torch ops the harness calls"):
        share = 100 * med[k] / (med["cpu_s"] or 1)
        print(f"  {k:<30} {med[k]:6.2f} s  {share:5.1f} %")
    print(f"  harness outside torch per case: {med['harness_ms_per_case']:.3f} ms ({cases} cases)")
    print(f"  harness self-time that is torch ops (cProfile pass): {100 * torch_ops:.1f} %")
    return med


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument(
        "--argv", default=DEFAULT_ARGV, help=f"the afdb command (default: {DEFAULT_ARGV})"
    )
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--base", help="a checkout of another revision, measured alternately")
    p.add_argument("--json", help="write the medians here")
    args = p.parse_args()
    argv = shlex.split(args.argv)
    pycache = tempfile.mkdtemp(prefix="afdb-pycache-")
    trees = {"this checkout": ROOT}
    if args.base:
        trees["base"] = Path(args.base).resolve()
    print(
        f"afdb {args.argv}; load average before: {', '.join(f'{v:.1f}' for v in os.getloadavg())}"
    )
    for tree in trees.values():  # compile the bytecode once, unmeasured
        measure(tree, argv, pycache)
    runs: dict[str, list[dict[str, Any]]] = {k: [] for k in trees}
    for _ in range(args.rounds):
        for label, tree in trees.items():
            runs[label].append(measure(tree, argv, pycache))
    fractions = {label: torch_op_fraction(tree, argv, pycache) for label, tree in trees.items()}
    results = {label: report(label, runs[label], fractions[label]) for label in trees}
    if "base" in results:
        mine, base = results["this checkout"], results["base"]
        print("\nthis checkout / base (medians of the same run):")
        for k in ("cpu_s", "import", "torch", "harness outside torch", "harness_ms_per_case"):
            print(f"  {k:<30} {mine[k] / (base[k] or 1):.2f}x")
    print(f"load average after: {', '.join(f'{v:.1f}' for v in os.getloadavg())}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
