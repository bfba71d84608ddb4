"""Run metadata: what ran, where, with which torch, so two reports can be compared honestly."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import time
from typing import Any

import torch

from harness.core.locations import portable_argv, portable_spec
from harness.core.options import Options, dtype_name
from harness.core.paths import SUITE_ROOT

SUITE_VERSION = "0.1.0"


def suite_revision() -> str:
    """The suite's git revision when run from a checkout, else ''."""
    root = SUITE_ROOT
    if not (root / ".git").exists():
        return ""
    try:
        out = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
        )
        return out.stdout.strip() if out.returncode == 0 else ""
    except (OSError, subprocess.SubprocessError):
        return ""


def command_line() -> list[str]:
    """The command as a user would type it (``python -m harness.cli.main`` shows as ``afdb``)."""
    prog = os.path.basename(sys.argv[0]) if sys.argv else ""
    return ["afdb" if prog in ("cli.py", "__main__.py") else prog, *sys.argv[1:]]


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def run_metadata(
    options: Options,
    *,
    started: float,
    finished: float | None = None,
    source: str = "afdb",
    target: str | None = None,
    command: list[str] | None = None,
) -> dict[str, Any]:
    finished = finished if finished is not None else time.time()
    return {
        "suite_version": SUITE_VERSION,
        "suite_revision": suite_revision(),
        "torch_version": torch.__version__,
        "torch_git_version": getattr(torch.version, "git_version", ""),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "device": options.device,
        "dtype": dtype_name(options.dtype),
        "seed": options.seed,
        "batch_sizes": list(options.batch_sizes),
        "nested_batch_sizes": list(options.nested_batch_sizes),
        "chunk": list(options.chunk),
        "batch_size_note": options.batch_size_note,
        "slice_note": options.slice_note,
        "samples_note": options.samples_note,
        "hazard_probe": options.hazard_probe,
        "plan_strategy": (
            f"one level: exhaustive up to {options.plan_cap} in_dims plans per sample, pairwise "
            "beyond (a strength-2 covering array over each tensor leaf's positions None, 0, "
            "interior, -1); nested: fixed set plus pairwise per level; composite checks: "
            "pairwise over the arguments and the cotangents/tangents; chunked: fixed set "
            "(see harness/plans/plan.py)"
        ),
        "checks": list(options.checks) if options.checks else "all",
        "source": source,
        "target": portable_spec(target),
        "started": _iso(started),
        "finished": _iso(finished),
        "wall_s": round(finished - started, 3),
        # paths under the working directory relative to it: a report reads the same anywhere
        "command": portable_argv(command if command is not None else command_line()),
        "interrupted": False,
    }
