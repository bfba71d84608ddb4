"""Comparing a Function's result with a reference, with messages that say exactly what differs."""

from __future__ import annotations

import cmath
from collections.abc import Sequence
from typing import Any

import torch
import torch.utils._pytree as pytree

from harness.checks.catalogue import NonFiniteSample
from harness.plans.pytrees import (
    describe_structure,
    flat_kind,
    kind_count,
    leaf_names,
    output_leaves,
    output_name,
    spec_names,
)

#: (rtol, atol) per dtype when an entry states none: the defaults that
#: ``torch.testing.assert_close`` documents, stated here rather than read from torch's
#: private ``torch.testing._comparison``; other dtypes (integers, bool) compare exactly.
DEFAULT_TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float16: (1e-3, 1e-5),
    torch.bfloat16: (1.6e-2, 1e-5),
    torch.float32: (1.3e-6, 1e-5),
    torch.float64: (1e-7, 1e-7),
    torch.complex32: (1e-3, 1e-5),
    torch.complex64: (1.3e-6, 1e-5),
    torch.complex128: (1e-7, 1e-7),
}


def default_tolerances(*tensors: torch.Tensor) -> tuple[float, float]:
    """The loosest documented default over the tensors' dtypes (as ``assert_close`` does)."""
    pairs = [DEFAULT_TOLERANCES.get(t.dtype, (0.0, 0.0)) for t in tensors]
    return max(r for r, _ in pairs), max(a for _, a in pairs)


def _fmt(x: float) -> str:
    return f"{x:.3g}"


def index_str(flat_index: int, shape: Sequence[int]) -> str:
    """A flat index as the element's index tuple: ``(6, 0)``."""
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
    rtol: float | None,
    atol: float | None,
    label: str,
    check_dtype: bool = True,
    finite_reference: bool = True,
) -> str | None:
    """None when close; else one line naming the label, the kind of mismatch and the numbers.

    Floating point values compare as ``torch.isclose`` does (``|a - e| <= atol + rtol * |e|``,
    NaN equal to NaN); integer and bool values compare exactly. The message shows the worst
    mismatch: its index, both values, the absolute error and (where the reference is not 0)
    the relative error. A reference with NaN or infinite values makes the comparison
    vacuous: ``NonFiniteSample`` is raised (unless ``finite_reference=False``). ``rtol`` or
    ``atol`` None takes ``torch.testing.assert_close``'s default for the two dtypes.
    """
    if actual.shape != expected.shape:
        return f"{label}: shape {tuple(actual.shape)}, reference {tuple(expected.shape)}"
    if check_dtype and actual.dtype != expected.dtype:
        return f"{label}: dtype {actual.dtype}, reference {expected.dtype}"
    if actual.device != expected.device:
        return f"{label}: device {actual.device}, reference {expected.device}"
    if actual.numel() == 0:
        return None
    if rtol is None or atol is None:  # torch.testing.assert_close's defaults for the dtypes
        default_rtol, default_atol = default_tolerances(actual, expected)
        rtol = default_rtol if rtol is None else rtol
        atol = default_atol if atol is None else atol
    a, e = actual.detach(), expected.detach()
    if a.device.type != "cpu":
        a, e = a.cpu(), e.cpu()
    a_type, e_type = a.dtype, e.dtype
    if not (a_type.is_floating_point or a_type.is_complex) and not (
        e_type.is_floating_point or e_type.is_complex
    ):
        diff = a != e
        if not bool(diff.any()):
            return None
        flat = int(diff.flatten().nonzero()[0])
        return (
            f"{label}: {int(diff.sum())} of {a.numel()} values differ; first at "
            f"{index_str(flat, a.shape)}: {a.flatten()[flat].item()} vs reference "
            f"{e.flatten()[flat].item()}"
        )
    if finite_reference:
        require_finite(e, label)
    if a_type == e_type and torch.equal(a, e):
        return None  # equal values are close (NaN is never equal: isclose decides)
    wide = torch.complex128 if (a_type.is_complex or e_type.is_complex) else torch.float64
    a64 = a if a_type == wide else a.to(wide)
    e64 = e if e_type == wide else e.to(wide)
    # torch.isclose semantics (|a - e| <= atol + rtol * |e|, NaN equal to NaN, an infinity
    # equal only to itself): the predicate of torch.testing.assert_close.
    bad = ~torch.isclose(a64, e64, rtol=rtol, atol=atol, equal_nan=True)
    if not bool(bad.any()):
        return None
    worst = _worst(a64, e64, bad)
    return (
        f"{label}: {int(bad.sum())} of {a.numel()} values outside tolerance; worst at "
        f"{index_str(worst, a.shape)}: {error_phrase(a64.flatten()[worst], e64.flatten()[worst])}"
        f"; rtol={rtol:g}, atol={atol:g}"
    )


def nonfinite_phrase(t: torch.Tensor) -> str:
    """``NaN``, ``inf`` or ``NaN and inf`` for a tensor with non-finite values, else ""."""
    if not (t.dtype.is_floating_point or t.dtype.is_complex):
        return ""
    # A finite sum has no NaN or infinity in it (one op, where isfinite().all() is two); a
    # sum that overflows is looked at element by element.
    if t.numel() == 0 or cmath.isfinite(t.sum().item()) or bool(torch.isfinite(t).all()):
        return ""
    kinds = [k for k, m in (("NaN", torch.isnan(t)), ("inf", torch.isinf(t))) if bool(m.any())]
    return " and ".join(kinds)


#: The advice that ends a message blaming the sample for non-finite values.
SAMPLE_ADVICE = "choose samples where the Function is finite"


def nonfinite_message(kinds: str, where: str) -> str:
    return f"the sample gives non-finite outputs ({kinds} in {where}): {SAMPLE_ADVICE}"


def nonfinite_outputs(outputs: Any) -> str:
    """ "" when every floating leaf of ``outputs`` is finite, else the advice naming the first
    leaf that is not (``the sample gives non-finite outputs (NaN in output 0): ...``)."""
    for name, leaf in zip(leaf_names(outputs), output_leaves(outputs)):
        if isinstance(leaf, torch.Tensor):
            kinds = nonfinite_phrase(leaf.detach())
            if kinds:
                return nonfinite_message(kinds, name)
    return ""


def require_finite(reference: torch.Tensor, label: str) -> None:
    """Raise NonFiniteSample when the reference of a comparison has NaN or infinite values."""
    kinds = nonfinite_phrase(reference)
    if kinds:
        raise NonFiniteSample(nonfinite_message(kinds, _reference_of(label)))


def _reference_of(label: str) -> str:
    """``grad of input 0 from the reference, finite differences (float64)`` from a label such as
    ``vjp: all inputs (...): grad of input 0 vs finite differences (float64) (reference)``."""
    part = label.rsplit(": ", 1)[-1]
    if " vs " not in part:
        return f"the reference of {part}"
    subject, ref = part.split(" vs ", 1)
    subject = subject.split(", ")[0]
    ref = ref.removesuffix(" (reference)").removesuffix(" Jacobian (reference)")
    return f"{subject} from the reference, {ref}"


def _worst(a: torch.Tensor, e: torch.Tensor, bad: torch.Tensor) -> int:
    """The flat index of the mismatch to show: a non-finite one first, else the largest error."""
    a, e, bad = a.flatten(), e.flatten(), bad.flatten()
    nonfinite = bad & ~(torch.isfinite(a) & torch.isfinite(e))
    if bool(nonfinite.any()):
        return int(nonfinite.nonzero()[0])
    err = torch.where(bad, (a - e).abs(), torch.zeros_like((a - e).abs()))
    return int(err.argmax())


def error_phrase(a: torch.Tensor, e: torch.Tensor) -> str:
    """Both values and the error in words that mean something (never an inf or 1e+307 ratio)."""
    got, ref = _fmt_val(a), _fmt_val(e)
    if not (bool(torch.isfinite(a)) and bool(torch.isfinite(e))):
        return f"got {got}, reference {ref} (not finite)"
    err = float((a - e).abs())
    if err == float("inf"):
        return f"got {got}, reference {ref} (their difference overflows float64)"
    phrase = f"got {got}, reference {ref}, abs error {_fmt(err)}"
    ref_abs = float(e.abs())
    if ref_abs > 0:
        phrase += f", rel error {_fmt(err / ref_abs)}"
    else:
        phrase += " (the reference is 0: no relative error)"
    return phrase


def _fmt_val(v: torch.Tensor) -> str:
    item = v.item()
    if isinstance(item, complex):
        return f"{item.real:.6g}{item.imag:+.6g}j"
    return f"{item:.6g}"


def compare_outputs(
    actual: Any,
    expected: Any,
    *,
    rtol: float,
    atol: float,
    label: str,
    names: Sequence[str] | None = None,
) -> list[str]:
    """Messages for every output leaf that differs (an empty list when all match).

    ``actual`` and ``expected`` are outputs as returned: a tensor, or tuples, lists and
    dicts of them nested in any way (pytrees). Tensors compare with the tolerances, other
    leaves with ``==``. A leaf is named by its path (``output 1['var']``); ``names``
    renames the top-level outputs (or, for flat outputs, every leaf).
    """
    a_top, e_top = _top(actual), _top(expected)
    kind = flat_kind(e_top)
    if kind is not None and flat_kind(a_top) == kind:  # flat tensors: no pytree needed
        return _compare_leaves(
            list(a_top),
            list(e_top),
            [output_name(k, names) for k in range(kind_count(kind))],
            rtol=rtol,
            atol=atol,
            label=label,
        )
    a_leaves, a_spec = pytree.tree_flatten(a_top)
    e_leaves, e_spec = pytree.tree_flatten(e_top)
    if a_spec != e_spec:
        if len(a_leaves) != len(e_leaves) and _is_flat(a_spec) and _is_flat(e_spec):
            return [f"{label}: {len(a_leaves)} outputs, reference {len(e_leaves)}"]
        return [
            f"{label}: outputs structured as {describe_structure(a_spec)}, reference "
            f"{describe_structure(e_spec)}"
        ]
    return _compare_leaves(
        a_leaves, e_leaves, spec_names(e_spec, names), rtol=rtol, atol=atol, label=label
    )


def _compare_leaves(
    a_leaves: Sequence[Any],
    e_leaves: Sequence[Any],
    leaf_names: Sequence[str],
    *,
    rtol: float,
    atol: float,
    label: str,
) -> list[str]:
    problems = []
    for name, a, e in zip(leaf_names, a_leaves, e_leaves):
        if isinstance(e, torch.Tensor):
            if not isinstance(a, torch.Tensor):
                problems.append(f"{label}, {name}: got {type(a).__name__}, reference a tensor")
                continue
            msg = compare_tensors(a, e, rtol=rtol, atol=atol, label=f"{label}, {name}")
            if msg:
                problems.append(msg)
        elif isinstance(a, torch.Tensor):
            problems.append(f"{label}, {name}: got a tensor, reference {type(e).__name__} {e!r}")
        elif not _leaf_equal(a, e):
            problems.append(f"{label}, {name}: got {a!r}, reference {e!r}")
    return problems


def _top(out: Any) -> Any:
    return out if isinstance(out, (tuple, list)) else (out,)


def _is_flat(spec: pytree.TreeSpec) -> bool:
    return all(child.is_leaf() for child in spec.children())


def _leaf_equal(a: Any, e: Any) -> bool:
    """``a == e`` for a non-tensor leaf, also when ``==`` gives an array (numpy) or raises."""
    try:
        same = a == e
        if hasattr(same, "all"):
            same = same.all()
        return bool(same)
    except Exception:
        return repr(a) == repr(e)
