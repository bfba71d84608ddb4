"""Comparing a Function's result with a reference, with messages that say exactly what differs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch


def _fmt(x: float) -> str:
    return f"{x:.3g}"


def _index_str(flat_index: int, shape: torch.Size) -> str:
    if not shape:
        return "()"
    idx = []
    for s in reversed(shape):
        idx.append(flat_index % s)
        flat_index //= s
    return "(" + ", ".join(map(str, reversed(idx))) + ")"


def compare_tensors(
    actual: torch.Tensor,
    expected: torch.Tensor,
    *,
    rtol: float,
    atol: float,
    label: str,
    check_dtype: bool = True,
) -> str | None:
    """None when close; else one line naming the label, the kind of mismatch and the numbers.

    Floating point values compare with ``|a - e| <= atol + rtol * |e|``; integer
    and bool values compare exactly. NaN equals NaN.
    """
    if actual.shape != expected.shape:
        return f"{label}: shape {tuple(actual.shape)}, reference {tuple(expected.shape)}"
    if check_dtype and actual.dtype != expected.dtype:
        return f"{label}: dtype {actual.dtype}, reference {expected.dtype}"
    if actual.device != expected.device:
        return f"{label}: device {actual.device}, reference {expected.device}"
    if actual.numel() == 0:
        return None
    a = actual.detach().cpu()
    e = expected.detach().cpu()
    if not (a.is_floating_point() or a.is_complex()) and not (
        e.is_floating_point() or e.is_complex()
    ):
        diff = a != e
        if not bool(diff.any()):
            return None
        flat = int(diff.flatten().nonzero()[0])
        return (
            f"{label}: {int(diff.sum())} of {a.numel()} values differ; first at "
            f"{_index_str(flat, a.shape)}: {a.flatten()[flat].item()} vs reference "
            f"{e.flatten()[flat].item()}"
        )
    wide = torch.complex128 if (a.is_complex() or e.is_complex()) else torch.float64
    a64, e64 = a.to(wide), e.to(wide)
    both_nan = torch.isnan(a64) & torch.isnan(e64)
    err = (a64 - e64).abs()
    err = torch.where(both_nan, torch.zeros_like(err), err)
    err = torch.nan_to_num(err, nan=float("inf"))
    bound = atol + rtol * e64.abs()
    bad = err > bound
    if not bool(bad.any()):
        return None
    flat_err = err.flatten()
    worst = int(flat_err.argmax())
    ref_abs = e64.abs().flatten()
    rel = (flat_err / ref_abs.clamp_min(torch.finfo(torch.float64).tiny)).max()
    return (
        f"{label}: {int(bad.sum())} of {a.numel()} values outside tolerance; "
        f"max abs error {_fmt(float(flat_err[worst]))} at {_index_str(worst, a.shape)} "
        f"(got {_fmt_val(a64.flatten()[worst])}, reference {_fmt_val(e64.flatten()[worst])}), "
        f"max rel error {_fmt(float(rel))}; rtol={rtol:g}, atol={atol:g}"
    )


def _fmt_val(v: torch.Tensor) -> str:
    item = v.item()
    if isinstance(item, complex):
        return f"{item.real:.6g}{item.imag:+.6g}j"
    return f"{item:.6g}"


def compare_outputs(
    actual: Sequence[Any],
    expected: Sequence[Any],
    *,
    rtol: float,
    atol: float,
    label: str,
    names: Sequence[str] | None = None,
) -> list[str]:
    """Messages for every output that differs (an empty list when all match)."""
    if len(actual) != len(expected):
        return [f"{label}: {len(actual)} outputs, reference {len(expected)}"]
    problems = []
    for k, (a, e) in enumerate(zip(actual, expected)):
        name = names[k] if names else f"output {k}"
        if isinstance(e, torch.Tensor):
            if not isinstance(a, torch.Tensor):
                problems.append(f"{label}, {name}: got {type(a).__name__}, reference a tensor")
                continue
            msg = compare_tensors(a, e, rtol=rtol, atol=atol, label=f"{label}, {name}")
            if msg:
                problems.append(msg)
        elif a != e:
            problems.append(f"{label}, {name}: got {a!r}, reference {e!r}")
    return problems
