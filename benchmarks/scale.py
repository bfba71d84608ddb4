"""Scale benchmarks: workers, gate start-up, the pytorch source, peak memory; ratios in one run.

    python -m benchmarks.scale [--only workers,check,pytorch] [--rounds 3]

Every measurement runs whole processes (``afdb ...`` through ``benchmarks.rss``,
which reports the process's peak RSS and its largest child's), so start-up,
imports and worker start are counted as a user sees them. Ratios are taken
between measurements of the same run, so a busy machine slows both sides; the
table says how busy it was (the load average). Prints the README's
"Performance" table as Markdown.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ROT = ROOT / "examples" / "rotations.py"
SMALL_CHECK = [
    "check",
    f"{ROT}:RotatePoints",
    "--samples",
    f"{ROT}:rotation_samples",
    "--checks",
    "vmap,vmap_nested,contract",
]
#: Wall time of PyTorch's own functorch tests over its autograd_function_db entries, as
#: measured in issue 11 on this machine class (54 s, 12 s of it collection). PyTorch's test
#: files are not in the torch wheel, so they cannot be rerun here; set AFDB_FUNCTORCH_TESTS_S
#: to a fresh measurement (see the README's "Performance" section for the command).
FUNCTORCH_TESTS_S = float(os.environ.get("AFDB_FUNCTORCH_TESTS_S", "54"))


@dataclass(frozen=True)
class Measure:
    wall_s: float
    cpu_s: float
    rss_mb: float  # peak RSS of the process itself
    child_rss_mb: float  # peak RSS of its largest (waited-for) descendant


def measure(argv: list[str], *, python: bool = False) -> Measure:
    """Run ``afdb ARGV`` (or ``python ARGV`` with python=True) as a whole process."""
    cmd = [sys.executable, "-m", "benchmarks.rss", "--python" if python else "--afdb", *argv]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env)
    wall = time.perf_counter() - start
    last = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "{}"
    try:
        info = json.loads(last)
    except json.JSONDecodeError:
        raise RuntimeError(f"{cmd} failed ({proc.returncode}): {proc.stderr[-2000:]}") from None
    if info.get("rc") not in (0, 1):
        raise RuntimeError(f"{cmd} exited {info.get('rc')}: {proc.stderr[-2000:]}")
    return Measure(wall, info["cpu_s"], info["rss_mb"], info["child_rss_mb"])


def median_of(argv: list[str], rounds: int, *, python: bool = False) -> Measure:
    ms = [measure(argv, python=python) for _ in range(rounds)]
    return Measure(
        statistics.median(m.wall_s for m in ms),
        statistics.median(m.cpu_s for m in ms),
        max(m.rss_mb for m in ms),
        max(m.child_rss_mb for m in ms),
    )


def interleaved(a: list[str], b: list[str], rounds: int, *, b_python: bool = False):
    """Medians of A and B measured alternately (a load spike then hits both)."""
    ma, mb = [], []
    for _ in range(rounds):
        ma.append(measure(a))
        mb.append(measure(b, python=b_python))

    def med(ms: list[Measure]) -> Measure:
        return Measure(
            statistics.median(m.wall_s for m in ms),
            statistics.median(m.cpu_s for m in ms),
            max(m.rss_mb for m in ms),
            max(m.child_rss_mb for m in ms),
        )

    return med(ma), med(mb)


def bench_workers(rounds: int = 1) -> dict[str, float]:
    """Goal 1 and 5: the whole database with one worker and with two; peak RSS of each."""
    one, two = interleaved(["run", "-q", "-n", "1"], ["run", "-q", "-n", "2"], rounds)
    small = measure(["run", "NumpyCube", "-q", "-n", "2"])
    return {
        "n1_wall_s": one.wall_s,
        "n2_wall_s": two.wall_s,
        "speedup": one.wall_s / two.wall_s,
        "n1_cpu_s": one.cpu_s,
        "n2_cpu_s": two.cpu_s,
        "n1_rss_mb": one.rss_mb,
        "n1_worker_rss_mb": one.child_rss_mb,
        "n2_rss_mb": two.rss_mb,
        "n2_worker_rss_mb": two.child_rss_mb,
        "one_entry_n2_rss_mb": small.rss_mb,
    }


def bench_check(rounds: int = 5) -> dict[str, float]:
    """Goal 2: `afdb check` of a small Function (isolated) vs a bare `import torch, harness`."""
    check, bare = interleaved(SMALL_CHECK, ["-c", "import torch, harness"], rounds, b_python=True)
    return {
        "check_wall_s": check.wall_s,
        "import_wall_s": bare.wall_s,
        "ratio": check.wall_s / bare.wall_s,
        "check_cpu_s": check.cpu_s,
        "import_cpu_s": bare.cpu_s,
    }


def bench_pytorch(rounds: int = 3) -> dict[str, float]:
    """Goal 3: `afdb run --source pytorch` against PyTorch's own tests; the harness's share."""
    from harness.core.options import Options

    from .profile_share import profile_run

    run = median_of(["run", "--source", "pytorch", "-q"], rounds)
    shares = profile_run(Options(), "pytorch")
    return {
        "wall_s": run.wall_s,
        "cpu_s": run.cpu_s,
        "functorch_tests_s": FUNCTORCH_TESTS_S,
        "ratio": run.wall_s / FUNCTORCH_TESTS_S,
        "harness_share": shares["share_harness"],
        "torch_share": shares["share_torch"],
    }


def load_average() -> str:
    try:
        return ", ".join(f"{v:.1f}" for v in os.getloadavg())
    except OSError:
        return "unknown"


def _met(ok: bool) -> str:
    return "yes" if ok else "no"


def table(results: dict[str, dict[str, float]]) -> str:
    """The README's "Performance" table."""
    rows = ["| goal | measured | target | met |", "|---|---|---|---|"]
    w = results.get("workers")
    if w:
        rows += [
            f"| whole database, `-n 1` / `-n 2` wall | {w['n1_wall_s']:.1f} s / "
            f"{w['n2_wall_s']:.1f} s = **{w['speedup']:.2f}x** | >= 1.6x | "
            f"{_met(w['speedup'] >= 1.6)} |",
            f"| whole database, CPU of `-n 2` / `-n 1` | {w['n2_cpu_s']:.1f} s / "
            f"{w['n1_cpu_s']:.1f} s = **{w['n2_cpu_s'] / w['n1_cpu_s']:.2f}x** | ~1x (no work "
            f"repeated per worker) | {_met(w['n2_cpu_s'] / w['n1_cpu_s'] < 1.2)} |",
            f"| peak RSS, `-n 1` | controller {w['n1_rss_mb']:.0f} MB, worker "
            f"{w['n1_worker_rss_mb']:.0f} MB | reported | - |",
            f"| peak RSS, `-n 2` | controller {w['n2_rss_mb']:.0f} MB (a one-entry run: "
            f"{w['one_entry_n2_rss_mb']:.0f} MB), largest worker {w['n2_worker_rss_mb']:.0f} MB "
            "| reported | - |",
        ]
    c = results.get("check")
    if c:
        rows.append(
            "| `afdb check` small Function (isolated) / `import torch, harness` | "
            f"{c['check_wall_s']:.2f} s / {c['import_wall_s']:.2f} s = **{c['ratio']:.2f}x** "
            f"(CPU {c['check_cpu_s']:.2f} s / {c['import_cpu_s']:.2f} s) | <= 1.5x | "
            f"{_met(c['ratio'] <= 1.5)} |"
        )
    p = results.get("pytorch")
    if p:
        rows += [
            f"| `afdb run --source pytorch` / PyTorch's functorch tests | {p['wall_s']:.1f} s / "
            f"{p['functorch_tests_s']:.0f} s = **{p['ratio']:.2f}x** (CPU {p['cpu_s']:.1f} s) "
            f"| <= 0.1x | {_met(p['ratio'] <= 0.1)} |",
            "| harness share of self-time (`--source pytorch`) | "
            f"**{100 * p['harness_share']:.0f} %** (torch {100 * p['torch_share']:.0f} %) "
            f"| < 10 % | {_met(p['harness_share'] < 0.1)} |",
        ]
    return "\n".join(rows)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--only", default="workers,check,pytorch")
    p.add_argument("--rounds", type=int, default=0, help="rounds per measurement (0: defaults)")
    args = p.parse_args()
    benches = {"workers": bench_workers, "check": bench_check, "pytorch": bench_pytorch}
    results = {}
    before = load_average()
    for name in args.only.split(","):
        fn = benches[name]
        results[name] = fn(args.rounds) if args.rounds else fn()
        print(f"{name}: {json.dumps({k: round(v, 3) for k, v in results[name].items()})}")
    print(f"\n{os.cpu_count()} CPUs, load average {before} before, {load_average()} after\n")
    print(table(results))


if __name__ == "__main__":
    main()
