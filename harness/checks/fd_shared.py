"""Finite differences shared by the sub-checks of one ``vjp`` or ``eager_vjp`` case.

Past ``FULL_JACOBIAN_MAX`` Jacobian columns (and for complex tensors) a vjp is checked
through the identity ``<t, J^T c> = <J t, c>`` with a few random directions ``t``. Each
sub-check (input subset x output subset x how: ``torch.func.vjp`` and
``torch.autograd.grad``, and the non-contiguous call) used to draw its own directions
and difference the forward along each, with the forward at the point and its precision
measure (eight evaluations, ``fd_precision``) taken again per direction. On a large
recorded call that is hundreds of forward evaluations per case, the same ones again and
again (pytorch_wavelets' ``AFB2D``: 19 sub-checks x 3 directions x 15 evaluations).

Here the directions depend on the input subset only, and ``J t`` is differenced once per
input subset for every differentiable output: an output subset reads its outputs, both
hows and the non-contiguous call (all inputs) read the same references. The forward at
the point is evaluated once per input subset (``AtPoint``) and so is its precision (its
cache keys on the function object and the primals, kept here). The reference is the one
each sub-check computed before (float64 central differences with their error estimate);
only which random directions are drawn changed: they are drawn per input subset, from
the case's seed. What it cannot see is what three random directions cannot see.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from harness.checks import finite_diff as fd
from harness.checks.autodiff_refs import IDENTITY_DIRECTIONS, attempt, random_like
from harness.checks.catalogue import CaseContext

#: The label the references' exceptions carry (as the per-sub-check differences did).
FD_LABEL = "finite differences (reference, float64 forward)"


class AtPoint:
    """``fn`` with its value at ``primals`` (the very objects) evaluated once: finite
    differences call the function at the point itself for every direction."""

    def __init__(self, fn: Callable[..., Any], primals: Sequence[Any]) -> None:
        self.fn = fn
        self.primals = list(primals)
        self.value: tuple[Any, ...] | None = None

    def __call__(self, *xs: Any) -> tuple[Any, ...]:
        at_point = len(xs) == len(self.primals) and all(x is p for x, p in zip(xs, self.primals))
        if not at_point:
            return tuple(self.fn(*xs))
        if self.value is None:
            self.value = tuple(self.fn(*xs))
        return self.value


@dataclass(frozen=True)
class Differences:
    """Random directions over an input subset and ``J t`` along each, per output of
    ``view.outs`` (float64 tensors carrying their finite-difference estimate)."""

    directions: list[list[torch.Tensor]]
    jts: list[list[torch.Tensor]]


class SharedDifferences:
    """The identity checks' references of one case, per input subset (kept: all inputs,
    and the latest other subset; the sub-checks come in that order)."""

    def __init__(self, ctx: CaseContext, view: Any, args64: Sequence[Any]) -> None:
        self.ctx = ctx
        self.view = view
        self.args64 = tuple(args64)
        self.kept: dict[tuple[int, ...], Differences] = {}
        self.evaluated = 0  # input subsets differenced (for tests)

    def along(self, ins: Sequence[int]) -> Differences:
        key = tuple(ins)
        hit = self.kept.get(key)
        if hit is not None:
            return hit
        view = self.view
        gen = self.ctx.generator("directions", "inputs", *key)
        directions = [
            random_like(gen, [view.args[i] for i in key]) for _ in range(IDENTITY_DIRECTIONS)
        ]
        primals = [self.args64[i] for i in key]
        f64 = AtPoint(view.fd_fn(self.args64, key, view.outs), primals)
        step = self.ctx.entry.tolerances.fd_step
        jts = [attempt(FD_LABEL, fd.directional, f64, primals, t, step=step) for t in directions]
        found = Differences(directions, jts)
        everything = tuple(view.diff)
        for old in [k for k in self.kept if k != everything]:
            del self.kept[old]
        self.kept[key] = found
        self.evaluated += 1
        return found

    def for_outputs(
        self, ins: Sequence[int], outs: Sequence[int]
    ) -> tuple[list[list[torch.Tensor]], list[list[torch.Tensor]]]:
        """The directions over ``ins`` and ``J t`` at the outputs ``outs`` (in that order)."""
        found = self.along(ins)
        where = [self.view.outs.index(j) for j in outs]
        return found.directions, [[jt[k] for k in where] for jt in found.jts]
