"""The migrated class against the original, on samples: same forward outputs (and which of
them require grad), same inputs afterwards (in-place), same eager gradients for every
input, same double backward where the original has one, at float64 and at the samples'
own dtype, with the suite's default tolerances (``harness.checks.compare``).

The reference is the original class run the same way: nothing of the migrated class is
compared with itself. Both calls start from the same seed, so a Function that draws random
numbers draws the same ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.utils._pytree as pytree

from harness.checks.compare import compare_tensors
from harness.core.locations import describe_exception

SEED = 1234


@dataclass(frozen=True)
class Verdict:
    """What the comparison found: differences (each one line) and how much it compared."""

    differences: tuple[str, ...]
    compared: int
    double_backward: int  # legs where a double backward was compared
    notes: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.differences and self.compared > 0


@dataclass
class _Trace:
    error: tuple[str, str] | None = None  # (stage, description)
    outputs: list[Any] = field(default_factory=list)
    requires_grad: list[bool] = field(default_factory=list)
    inputs_after: list[Any] = field(default_factory=list)
    grads: list[torch.Tensor] | None = None
    double: list[torch.Tensor] | None = None
    double_error: str = ""


def _differentiable(a: Any) -> bool:
    return isinstance(a, torch.Tensor) and (a.is_floating_point() or a.is_complex())


def _cast(a: Any, dtype: torch.dtype | None) -> Any:
    if not isinstance(a, torch.Tensor):  # containers: fresh tensors, so no call sees another's
        return pytree.tree_map_only(torch.Tensor, lambda t: t.detach().clone(), a)
    a = a.detach().clone()
    if dtype is not None and _differentiable(a):
        a = a.to(torch.complex128 if a.is_complex() else dtype)
    return a


def _randn_like(t: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    return torch.randn(t.shape, generator=gen, dtype=t.dtype)


def _trace(cls: Any, args: Sequence[Any], dtype: torch.dtype | None) -> _Trace:
    tr = _Trace()
    leaves = [_cast(a, dtype) for a in args]
    wrt = [a for a in leaves if _differentiable(a)]
    for a in wrt:
        a.requires_grad_(True)
    call = [a.clone() if _differentiable(a) else a for a in leaves]  # in-place safe
    torch.manual_seed(SEED)
    try:
        with torch.enable_grad():
            out = cls.apply(*call)
    except Exception as e:
        tr.error = ("forward", describe_exception(e))
        return tr
    flat = pytree.tree_leaves(out)
    tr.outputs = [o.detach().clone() if isinstance(o, torch.Tensor) else o for o in flat]
    tr.requires_grad = [isinstance(o, torch.Tensor) and o.requires_grad for o in flat]
    tr.inputs_after = [
        pytree.tree_map_only(torch.Tensor, lambda t: t.detach().clone(), a) for a in call
    ]
    diff = [o for o in flat if isinstance(o, torch.Tensor) and o.requires_grad]
    if not diff or not wrt:
        return tr
    gen = torch.Generator().manual_seed(SEED)
    cots = [_randn_like(o, gen) for o in diff]
    try:
        grads = torch.autograd.grad(diff, wrt, cots, allow_unused=True, create_graph=True)
    except Exception as e:
        tr.error = ("backward", describe_exception(e))
        return tr
    tr.grads = [torch.zeros_like(w) if g is None else g for g, w in zip(grads, wrt)]
    live = [g for g in grads if g is not None and g.requires_grad]
    if not live:
        tr.double_error = "its backward's result does not require grad"
        return tr
    try:
        total = (live[0] * _randn_like(live[0], gen)).sum()
        for g in live[1:]:
            total = total + (g * _randn_like(g, gen)).sum()
        second = torch.autograd.grad(total, wrt, allow_unused=True)
    except Exception as e:
        tr.double_error = describe_exception(e)
        return tr
    tr.double = [torch.zeros_like(w) if g is None else g for g, w in zip(second, wrt)]
    tr.grads = [g.detach() for g in tr.grads]
    return tr


class _Diff:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.compared = 0

    def tensors(self, label: str, actual: Any, expected: Any) -> None:
        """Compare two values leaf by leaf (tensors within the tolerances, others by ==)."""
        a_leaves, a_spec = pytree.tree_flatten(actual)
        e_leaves, e_spec = pytree.tree_flatten(expected)
        if a_spec != e_spec:
            self.compared += 1
            self.lines.append(f"{label}: structure {a_spec}, the original gives {e_spec}")
            return
        for k, (a, e) in enumerate(zip(a_leaves, e_leaves)):
            where = label if len(e_leaves) == 1 else f"{label}, leaf {k}"
            self.compared += 1
            if isinstance(e, torch.Tensor) and isinstance(a, torch.Tensor):
                msg = compare_tensors(
                    a.detach(),
                    e.detach(),
                    rtol=None,
                    atol=None,
                    label=where,
                    finite_reference=False,
                )
                if msg:
                    self.lines.append(msg)
            elif isinstance(e, torch.Tensor) or isinstance(a, torch.Tensor):
                self.lines.append(
                    f"{where}: {type(a).__name__}, the original gives {type(e).__name__}"
                )
            elif type(a) is not type(e) or a != e:
                self.lines.append(f"{where}: {a!r}, the original gives {e!r}")


def _legs(args: Sequence[Any]) -> list[tuple[str, torch.dtype | None]]:
    from harness.core.options import sample_dtype_name

    floats = [a for a in args if _differentiable(a)]
    legs: list[tuple[str, torch.dtype | None]] = [("float64", torch.float64)] if floats else []
    own = sample_dtype_name(args)
    if not floats or own not in ("float64", "complex128"):
        legs.append((own or "samples", None))
    return legs


def verify(original: Any, migrated: Any, samples: Sequence[Any]) -> Verdict:
    """Compare ``migrated`` with ``original`` on every sample (``Sample`` objects or tuples)."""
    d = _Diff()
    doubles = 0
    notes: list[str] = []
    for k, sample in enumerate(samples):
        args = tuple(getattr(sample, "args", sample))
        for leg, dtype in _legs(args):
            where = f"sample {k} at {leg}"
            ref = _trace(original, args, dtype)
            got = _trace(migrated, args, dtype)
            doubles += _compare(d, where, ref, got, notes)
    return Verdict(tuple(dict.fromkeys(d.lines)), d.compared, doubles, tuple(dict.fromkeys(notes)))


def _compare(d: _Diff, where: str, ref: _Trace, got: _Trace, notes: list[str]) -> int:
    stage = ref.error[0] if ref.error else None
    if got.error and (not ref.error or _order(got.error[0]) < _order(ref.error[0])):
        d.lines.append(f"{where}: the migrated {got.error[0]} raises {got.error[1]}")
        return 0
    if ref.error and stage == "forward":
        notes.append(f"{where}: the original forward raises {ref.error[1]}; not compared")
        return 0
    if len(got.outputs) != len(ref.outputs):
        d.lines.append(
            f"{where}: {len(got.outputs)} outputs, the original gives {len(ref.outputs)}"
        )
        return 0
    for i, (a, e) in enumerate(zip(got.outputs, ref.outputs)):
        d.tensors(f"{where}: output {i}", a, e)
    for i, (a, e) in enumerate(zip(got.requires_grad, ref.requires_grad)):
        if a != e:
            d.lines.append(
                f"{where}: output {i} {'requires' if a else 'does not require'} grad, the "
                f"original's {'does' if e else 'does not'} (mark_non_differentiable?)"
            )
    for i, (a, e) in enumerate(zip(got.inputs_after, ref.inputs_after)):
        d.tensors(f"{where}: input {i} after the call", a, e)
    if ref.error:  # the original's backward raises: the migrated's must too
        if not got.error:
            d.lines.append(
                f"{where}: the original backward raises {ref.error[1]}, the migrated's does not"
            )
        else:
            notes.append(f"{where}: both backwards raise ({ref.error[1]})")
        return 0
    if ref.grads is None:
        if got.grads is not None:
            d.lines.append(f"{where}: the migrated has a gradient, the original none")
        return 0
    if got.grads is None:
        d.lines.append(f"{where}: the migrated has no gradient (no output requires grad)")
        return 0
    for i, (a, e) in enumerate(zip(got.grads, ref.grads)):
        d.tensors(f"{where}: gradient of input {i}", a, e)
    if ref.double is None:
        if ref.double_error:
            notes.append(f"no double backward in the original ({ref.double_error[:120]})")
        return 0
    if got.double is None:
        d.lines.append(
            f"{where}: the original has a double backward, the migrated's fails "
            f"({got.double_error[:200]})"
        )
        return 0
    for i, (a, e) in enumerate(zip(got.double, ref.double)):
        d.tensors(f"{where}: double backward, input {i}", a, e)
    return 1


def _order(stage: str) -> int:
    return {"forward": 0, "backward": 1}.get(stage, 2)
