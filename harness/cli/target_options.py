"""A user target's flags (``afdb check`` and ``afdb repro``) and the ``TargetSpec`` they make.

The capability flags double as the default declaration of every recorded Function under
``--recorded`` (``harness.cli.check_recorded.default_declaration``).
"""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING, Any

from harness.core.errors import CliError, UsageError
from harness.core.locations import portable_spec

if TYPE_CHECKING:
    from harness.core.options import Options


def arg_positions(text: str) -> tuple[int, ...]:
    """``1,2`` -> (1, 2): argument positions (integers >= 0), for ``--nondiff-args``."""
    try:
        values = tuple(int(v) for v in text.replace(",", " ").split())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected argument positions such as 1,2; got {text!r}"
        ) from None
    if not values or any(v < 0 for v in values):
        raise argparse.ArgumentTypeError(
            f"expected argument positions >= 0, e.g. 1,2; got {text!r}"
        )
    return tuple(sorted(set(values)))


def add_target_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--samples",
        metavar="SAMPLES",
        help="module:attr or path/file.py:attr of a callable returning argument tuples or "
        "Sample objects (default: the target's `samples` attribute)",
    )
    p.add_argument(
        "--inplace-arg",
        dest="inplace_args",
        type=int,
        action="append",
        metavar="N",
        help="argument N is modified in place (mark_dirty); repeatable",
    )
    p.add_argument(
        "--nondiff-output",
        dest="nondiff_outputs",
        type=int,
        action="append",
        metavar="N",
        help="output N is not differentiable (mark_non_differentiable); repeatable",
    )
    p.add_argument(
        "--nondiff-args",
        dest="nondiff_args",
        type=arg_positions,
        metavar="N,M",
        help="argument positions never differentiated (float parameter tables, masks stored as "
        "floats): no tangent, cotangent or gradient for them, e.g. 1,2",
    )
    p.add_argument(
        "--randomness", action="store_true", help="the Function uses randomness (vmap randomness)"
    )
    p.add_argument(
        "--gradient",
        choices=("derivative", "custom"),
        default="derivative",
        help="custom: backward is deliberately not the derivative (straight-through, clipping)",
    )
    p.add_argument(
        "--jvp",
        choices=("true-derivative",),
        default=None,
        help="with --gradient custom: the jvp is deliberately the true derivative while the "
        "backward follows the custom rule (otherwise forward and reverse mode must agree)",
    )
    p.add_argument(
        "--no-double-backward",
        action="store_true",
        help="backward is not differentiable (skip second-order checks)",
    )
    p.add_argument(
        "--dtypes",
        metavar="LIST",
        help="the dtypes the Function supports, e.g. float64 (a float64-only Function: no "
        "float32 leg for its float64 samples) or float32,float64",
    )
    p.add_argument("--name", help="entry name in case ids (default: the class name)")
    p.add_argument(
        "--debug", action="store_true", default=argparse.SUPPRESS, help="tracebacks for errors"
    )


def spec_from_args(args: argparse.Namespace, target: str) -> Any:
    from harness.sources.target import TargetSpec

    caps: dict[str, Any] = {}
    if args.inplace_args:
        caps["inplace_args"] = tuple(args.inplace_args)
    if args.nondiff_outputs:
        caps["nondiff_outputs"] = tuple(args.nondiff_outputs)
    if getattr(args, "nondiff_args", None):
        caps["nondiff_args"] = tuple(args.nondiff_args)
    if args.randomness:
        caps["randomness"] = True
    if args.no_double_backward:
        caps["double_backward"] = False
    if getattr(args, "jvp", None) == "true-derivative":
        caps["jvp_true_derivative"] = True
    if getattr(args, "dtypes", None):
        from harness.sources.entries import declared_dtypes

        names = tuple(n.strip() for n in args.dtypes.split(",") if n.strip())
        try:
            declared_dtypes(names)
        except UsageError as e:
            raise CliError(f"--dtypes {args.dtypes}: {e}") from None
        caps["dtypes"] = names
    # A file under the working directory is recorded relative to it (reports travel); the
    # directory itself stays in base_dir for this process only (never in a report).
    return TargetSpec(
        portable_spec(target) or target,
        portable_spec(args.samples),
        gradient=args.gradient,
        capabilities=caps,
        name=args.name,
        batch_size=getattr(args, "batch_size", None) or None,
        nested_batch_sizes=getattr(args, "nested_batch_sizes", None) or None,
        base_dir=os.getcwd(),
    )


def prepared(spec: Any, options: Options) -> tuple[Any, Options]:
    """The entry and options for a user target (``harness.sources.target.TargetSource``)."""
    from harness.sources.target import TargetSource

    source = TargetSource(spec)
    (entry,) = source.entries()
    return entry, source.options([entry], options)
