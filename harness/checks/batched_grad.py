"""``vmap_of_autograd_grad``: eager autograd inside vmap (PyTorch's ``test_vmap_autograd_grad``).

The Function is called once, outside any transform, on leaves that require grad; then
``torch.func.vmap`` maps ``torch.autograd.grad(outputs, leaves, cotangents,
retain_graph=True)`` over a batch of cotangents. The Function's backward therefore runs on
batched gradients (as ``torch.autograd.grad(..., is_grads_batched=True)`` runs it): a
backward that leaves torch (numpy, ``.item()``, data-dependent control flow) or calls ops
without batching rules fails here although plain eager backward works.

Plans: the Function's arguments unbatched, the cotangents batched at 0 and at -1, in the run's dtype and, PyTorch's tests running both, in float64 (floating
arguments cast; ids end ``,float64``). The reference is a loop of per-slice
``torch.autograd.grad`` calls on the same graph, one cotangent slice at a time.

The forward never runs under a transform, so a legacy ``forward(ctx, ...)`` Function (which
torch.func refuses) is checked too: this is the only check of batched gradients for it
(``jacrev``, ``vmap_of_vjp`` and the others need ``setup_context``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from harness.checks.autodiff import needs_backward, with_fixed_rng
from harness.checks.autodiff_refs import (
    Findings,
    Watch,
    attempt,
    random_like,
    restricted,
    sample_view,
)
from harness.checks.catalogue import (
    CaseContext,
    CheckSpec,
    ReferenceRaised,
    Unsupported,
    register,
)
from harness.checks.references import refuses_grad
from harness.core.locations import describe_exception
from harness.core.options import Options
from harness.plans.composite import CompositePlan
from harness.plans.plan import ArgLayout, LevelPlan, Plan, normalize_dim

LOOP_AUTOGRAD_GRAD = "loop of per-slice torch.autograd.grad on the same graph"

#: The dtype PyTorch's test also runs in (besides float32).
WIDE = torch.float64


@dataclass(frozen=True)
class CastPlan(CompositePlan):
    """A CompositePlan run with the sample's floating arguments cast to ``dtype_name`` ("":
    the run's own dtype, and the id of a plain CompositePlan)."""

    dtype_name: str = ""

    def _make_id(self) -> str:
        base = super()._make_id()
        return f"{base},{self.dtype_name}" if self.dtype_name else base

    def to_dict(self) -> dict[str, Any]:
        d = super().to_dict()
        d["id"] = self.id
        if self.dtype_name:
            d["dtype"] = self.dtype_name
        return d


def _plans(layout: ArgLayout, options: Options) -> list[Plan | None]:
    if not layout.units():
        return []
    b = options.batch_sizes[0]
    unbatched = layout.in_dims({})
    casts = [""]
    if options.dtype != WIDE:
        casts.append(str(WIDE).replace("torch.", ""))
    plans: list[Plan | None] = []
    for cast in casts:
        for dim in (0, -1):
            level = LevelPlan(b, unbatched, 0)
            plans.append(CastPlan((level,), "fixed", "cotangents", (dim,), cast))
    return plans


def _cast(a: Any, dtype: torch.dtype) -> Any:
    if dtype == torch.float64 and not isinstance(a, torch.Tensor):
        from harness.checks.finite_diff import upcast

        return upcast(a)  # a live module (or its bound method) in float64 too
    if isinstance(a, torch.Tensor) and (a.is_floating_point() or a.is_complex()):
        if a.is_complex():
            return a.to(torch.complex128)
        return a.to(dtype)
    return a


def _stack(parts: Sequence[torch.Tensor], dim: int) -> torch.Tensor:
    return torch.stack(list(parts), dim=normalize_dim(dim, parts[0].dim() + 1))


def _reraise(exc: BaseException) -> Any:
    raise exc


def _own_dtype_only(plan: CastPlan, exc: BaseException, what: str) -> None:
    """The cast leg (``,float64``) of a Function that raises at that dtype: ``unsupported``,
    naming the raise; its own dtype (which ran the sample's plain call) is what the plans
    without the cast check, so nothing is hidden (a raise there is its ``error``)."""
    if not plan.dtype_name:
        return
    raise Unsupported(
        f"the {plan.dtype_name} leg: the Function's {what} raises on the sample cast to "
        f"{plan.dtype_name} ({describe_exception(exc, limit=200)}) while it runs at the "
        "sample's own dtype: the plans without the cast check it there"
    ) from exc


def run_vmap_of_autograd_grad(ctx: CaseContext) -> str:
    plan = ctx.plan
    assert isinstance(plan, CastPlan)
    view = sample_view(ctx)
    entry = ctx.entry
    level = plan.levels[0]
    cot_dim = plan.extra_dims[0]
    out_dim = level.out_dims
    assert isinstance(cot_dim, int) and isinstance(out_dim, int)
    args: tuple[Any, ...] = view.args
    likes = [view.outputs[j] for j in view.outs]
    if plan.dtype_name:
        wide = getattr(torch, plan.dtype_name)
        args = tuple(_cast(a, wide) for a in args)
        likes = [_cast(t, wide) for t in likes]
    label = f"vmap_of_autograd_grad {plan.id}"
    findings = Findings.of(ctx)
    if plan.dtype_name:
        findings.rtol, findings.atol = entry.tolerances.for_dtype(getattr(torch, plan.dtype_name))
    per_slice = [
        random_like(ctx.generator("cotangents", b), likes) for b in range(level.batch_size)
    ]
    batched = [_stack([s[k] for s in per_slice], cot_dim).clone() for k in range(len(likes))]
    with torch.enable_grad():
        leaves = [args[i].detach().clone().requires_grad_(True) for i in view.diff]
        call = list(args)
        for i, x in zip(view.diff, leaves):
            call[i] = x
        try:
            outs = restricted(entry, call, view.diff, view.outs)(*leaves)
        except Exception as exc:
            _own_dtype_only(plan, exc, "forward")
            outs = attempt("eager call", _reraise, exc)
        connected = [
            k for k, o in enumerate(outs) if isinstance(o, torch.Tensor) and o.requires_grad
        ]

        def grad(*cots: torch.Tensor) -> tuple[torch.Tensor, ...]:
            return torch.autograd.grad(
                [outs[k] for k in connected],
                leaves,
                [cots[k] for k in connected],
                retain_graph=True,
                allow_unused=True,
                materialize_grads=True,
            )

        if not connected:
            raise Unsupported("no output is connected to the inputs' graph: nothing to batch")
        try:
            loop = [grad(*(c.clone() for c in s)) for s in per_slice]
        except Exception as exc:
            if refuses_grad(exc):  # reentrant checkpointing: only .backward() works
                raise Unsupported(
                    "the Function refuses torch.autograd.grad (only .backward() differentiates "
                    f"it: {describe_exception(exc, limit=200)}), and torch.autograd.grad with "
                    "is_grads_batched is what this check runs; its users call .backward()"
                ) from exc
            _own_dtype_only(plan, exc, "backward")
            raise ReferenceRaised(
                "the reference raised, not the transform under test: per-slice eager "
                f"torch.autograd.grad raised {describe_exception(exc)}. Eager backward of the "
                "Function (torch.autograd.grad, .backward()) fails for its users"
            ) from exc
        expected = [_stack([g[m] for g in loop], out_dim) for m in range(len(leaves))]
        watch = Watch()
        for k, c in enumerate(batched):
            watch.add(f"the batched cotangent of {view.out_name(view.outs[k])}", c)
        vf = torch.func.vmap(grad, in_dims=cot_dim, out_dims=out_dim)
        actual = attempt(label, vf, *batched)
    watch.verify(label, findings, "backward must not modify grad_output")
    for i, a, e in zip(view.diff, actual, expected):
        findings.compare(
            f"{label}: grad of input {i}, vmap of torch.autograd.grad (the Function's backward "
            f"on batched gradients) vs {LOOP_AUTOGRAD_GRAD} (reference)",
            a,
            e,
            e.dtype,
        )
    findings.raise_if_any()
    return LOOP_AUTOGRAD_GRAD


register(
    CheckSpec(
        "vmap_of_autograd_grad",
        with_fixed_rng(run_vmap_of_autograd_grad),
        _plans,
        needs_backward,
        "autodiff",
        LOOP_AUTOGRAD_GRAD,
        "vmap over the cotangents of eager torch.autograd.grad on a graph built outside vmap "
        "(PyTorch's test_vmap_autograd_grad): the Function's backward on batched gradients, "
        "in the run's dtype and in float64",
    )
)
