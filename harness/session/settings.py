"""A run's settings as ``Options``: what every running command and ``pytest --afdb`` share.

``Settings`` holds every setting a run reads, with the defaults ``afdb check`` gives, so
``pytest --afdb`` and ``harness.check_recorded`` make a run without the CLI's parser; the
CLI passes its parsed ``argparse.Namespace``, which carries the same attributes.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from harness.core.errors import CliError

if TYPE_CHECKING:
    from harness.core.options import Options


def parse_int_list(text: str, what: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.replace(",", " ").split())
    except ValueError:
        raise CliError(f"{what} must be integers, e.g. 2 or 2,3; got {text!r}") from None
    if not values or any(v < 2 for v in values):
        raise CliError(
            f"{what} must be integers >= 2 (a batch of 1 hides batching bugs); got {text!r}"
        )
    return values


def options_from_args(args: argparse.Namespace) -> Options:
    import torch

    from harness.checks.catalogue import check_names
    from harness.core.options import DTYPES, Options
    from harness.engine.cores import parse_workers

    parse_workers(getattr(args, "workers", None))  # a bad -n is refused before anything prints
    if getattr(args, "shard", None) is not None:  # --shard "" is a bad value, not no shard
        from harness.engine.shard import Shard, baseline_durations

        Shard.parse(args.shard)
        if getattr(args, "shard_durations", None):
            baseline_durations(args.shard_durations, "")  # an unreadable file: refused now
    if getattr(args, "expectations", None) and not _to_create(args):
        from harness import expectations as ex

        try:
            ex.load(args.expectations)
        except ex.ExpectationsError as e:
            raise CliError(str(e)) from None
    checks = None
    if args.checks:
        checks = tuple(c.strip() for c in args.checks.split(",") if c.strip())
        known = check_names()
        for c in checks:
            if c not in known:
                raise CliError(f"unknown check {c!r}; known checks: {', '.join(known)}")
    if args.dtype is not None and args.dtype not in DTYPES:
        raise CliError(f"unknown dtype {args.dtype!r}; use one of {', '.join(DTYPES)}")
    if args.device != "cpu":
        try:
            torch.empty(0, device=args.device)
        except Exception as e:
            raise CliError(
                f"device {args.device!r} is not usable here ({str(e).splitlines()[0]})"
            ) from None
    opts = Options(
        checks=checks,
        seed=args.seed,
        dtype=DTYPES[args.dtype] if args.dtype is not None else None,
        device=args.device,
        plan_cap=args.plan_cap,
        timeout_s=args.timeout,
        hazard_probe=bool(getattr(args, "hazard_probe", False)),
    )
    if args.batch_size:
        opts = opts.replace(batch_sizes=parse_int_list(args.batch_size, "--batch-size"))
    if args.nested_batch_sizes:
        sizes = parse_int_list(args.nested_batch_sizes, "--nested-batch-sizes")
        if len(set(sizes)) != len(sizes) or len(sizes) < 2:
            raise CliError("--nested-batch-sizes needs two or more different sizes, e.g. 2,3")
        opts = opts.replace(nested_batch_sizes=sizes)
    if args.plan_cap < 1:
        raise CliError("--plan-cap must be >= 1")
    if args.timeout is not None and not 0 < args.timeout < float("inf"):  # nan, inf too
        raise CliError("--timeout must be a positive number of seconds")
    return opts


def _to_create(args: argparse.Namespace) -> bool:
    """``--accept`` with an expectations file that does not exist yet: it writes it."""
    import os

    return bool(getattr(args, "accept", False)) and not os.path.exists(args.expectations)


#: Every setting a run reads, with the value ``afdb check`` gives when its flag is absent
#: (``tests/test_session_settings.py`` keeps the two equal).
DEFAULTS: dict[str, Any] = {
    "command": "check",
    "accept": False,
    "batch_size": None,
    "checks": None,
    "declare": None,
    "device": "cpu",
    "dtype": None,
    "dtypes": None,
    "expectations": None,
    "gradient": "derivative",
    "hazard_probe": False,
    "html": None,
    "inplace_args": None,
    "isolate": True,
    "json": None,
    "jvp": None,
    "junit": None,
    "last_failed": None,
    "markdown": None,
    "maxfail": None,
    "name": None,
    "nested_batch_sizes": None,
    "no_double_backward": False,
    "nondiff_args": None,
    "nondiff_outputs": None,
    "plan_cap": 16,
    "quiet": False,
    "randomness": False,
    "recorded": None,
    "samples": None,
    "seed": 0,
    "target": [],
    "timeout": None,
    "workers": None,
}


class Settings(argparse.Namespace):
    """A run's settings without the CLI's parser (``pytest --afdb``): ``afdb check``'s
    defaults, then the given ones; the session reads them as it reads a parsed command line."""

    def __init__(self, **given: Any) -> None:
        unknown = sorted(
            set(given) - set(DEFAULTS) - {"argv", "declare_lines", "live_calls", "replay"}
        )
        if unknown:
            raise TypeError(f"unknown settings: {', '.join(unknown)}")
        values = {k: (list(v) if isinstance(v, list) else v) for k, v in DEFAULTS.items()}
        super().__init__(**{**values, **given})
