"""What every command shares: the common options, their parsing, and the report files they write.

Output paths are checked before a run starts (a bad one is one line, exit 2, before any
case runs); a report that could not be written is one line after the summary.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from harness.core.dtype_names import DTYPE_NAMES

if TYPE_CHECKING:  # torch loads when a command runs, never for `afdb --help`
    pass


# --- option parsing shared by the subcommands -----------------------------------------


def add_common_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--checks", help="comma-separated check names (default: all); see `afdb list --checks`"
    )
    p.add_argument("--device", default="cpu", help="device for the samples (default: cpu)")
    p.add_argument(
        "--dtype", default="float32", help=f"one of {', '.join(DTYPE_NAMES)} (default: float32)"
    )
    p.add_argument("--batch-size", help="batch size(s) for one vmap level, e.g. 2 or 2,4")
    p.add_argument("--nested-batch-sizes", help="batch sizes per nested level, e.g. 2,3")
    p.add_argument("--seed", type=int, default=0, help="seed for every random choice (default: 0)")
    p.add_argument(
        "--plan-cap",
        type=int,
        default=16,
        help="max in_dims plans per sample and level before the covering strategy",
    )
    p.add_argument(
        "--timeout", type=float, default=None, help="seconds per case before it counts as timeout"
    )
    p.add_argument("--expectations", help="expectations file (xfail/skip per case id)")
    p.add_argument("--json", help="write the JSON report here")
    p.add_argument("--markdown", help="write the Markdown report here")
    p.add_argument("--html", help="write the HTML report here")
    p.add_argument("--junit", help="write JUnit XML here")
    p.add_argument(
        "-n",
        dest="workers",
        default=None,
        help="run cases in N worker processes, or auto (the physical cores); 0: in this process",
    )
    p.add_argument("-q", "--quiet", action="store_true", help="print only the summary line")
    p.add_argument(
        "--hazard-probe",
        action="store_true",
        help="also run vmap_hazard: batch sizes equal to sample dim sizes, which catch rules that "
        "find the batch dim by its size (off by default: a collision can hide a misplaced dim)",
    )


# --- printing ---------------------------------------------------------------------------
