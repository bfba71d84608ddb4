"""The minimal scripts of the autodiff checks: the Function's one transform call
(``jvp``, ``vjp``, ``jacfwd``/``jacrev``, the eager ``eager_vjp``/``eager_jvp``) against float64
central differences at the suite's step, or eager autograd for ``gradient=custom``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from autograd_function_db.entry import Entry
from harness.checks import finite_diff as fd
from harness.core.options import Options
from harness.engine.cases import Case
from harness.plans.slices import derive_seed, sample_seed
from harness.repro.literal import literal
from harness.repro.minimal_facts import CaseFacts, DiffNames
from harness.repro.minimal_source import ScriptSource
from harness.repro.subcheck import SubCheck

#: ``eager_jvp(fn, xs, ts)``: the primals then the tangents of ``fn``'s outputs, by eager
#: forward-mode AD (the reference of the composites with jvp, and the eager_jvp check's call).
EAGER_JVP = [
    "",
    "def eager_jvp(fn, xs, ts):  # eager forward-mode AD, primals then tangents",
    "    with fwAD.dual_level():",
    "        out = [fwAD.unpack_dual(o) for o in fn(*[fwAD.make_dual(x, t) for x, t in "
    "zip(xs, ts)])]",
    "        return tuple(o.primal for o in out) + tuple(o.tangent for o in out)",
    "",
]


def _h(
    entry: Entry,
    primals: Sequence[torch.Tensor],
    tangents: Sequence[torch.Tensor],
    outs64: Sequence[Any],
) -> float:
    """The step ``harness.checks.finite_diff.directional`` takes for these tangents."""
    moved = fd.held_fixed(primals, tangents)  # finite elements only, as the suite steps
    scale = max(
        1.0,
        max(
            (
                float(x.abs()[t.ne(0)].max())
                for x, t in zip(primals, moved)
                if t is not None and bool(t.ne(0).any())
            ),
            default=0.0,
        ),
    )
    tmax = (
        max((float(t.abs().max()) for t in moved if t is not None and t.numel()), default=1.0)
        or 1.0
    )
    return fd.base_step(outs64, entry.tolerances.fd_step) * scale / tmax


def _randn_like(seed: int, likes: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(t.shape, generator=gen, dtype=torch.float64) for t in likes]


def _fd(h: float, diff: DiffNames) -> list[str]:
    """``fd(ts)``: ``J t`` as ``harness.checks.finite_diff.directional`` computes it (float64
    central differences, one Richardson step, its step for these tangents)."""
    g = "call(*" if diff.simple else "f(*"
    end = ")" if diff.simple else ", base=a64)"
    plus = f"{g}[x + h * t.double() for x, t in zip(x64, ts)]{end}"
    minus = f"{g}[x - h * t.double() for x, t in zip(x64, ts)]{end}"
    return [
        "",
        f"def fd(ts, h={literal(h)}):  # J t: central differences in float64, the suite's step",
        f"    d = lambda h: [(p - m) / (2 * h) for p, m in zip({plus}, {minus})]  # noqa: E731",
        "    return [(4 * u - v) / 3 for u, v in zip(d(h / 2), d(h))]",
        "",
    ]


def _draw(seed: int, what: str, likes: str) -> list[str]:
    return [
        f"gen = torch.Generator().manual_seed({seed})  # the suite's {what}",
        f"{what[0]}s = [torch.randn(v.shape, generator=gen, dtype=torch.float64).to(v.dtype) "
        f"for v in {likes}]",
    ]


def autodiff_body(
    entry: Entry,
    options: Options,
    case: Case,
    facts: CaseFacts,
    src: ScriptSource,
    diff: DiffNames,
    sub: SubCheck | None = None,
) -> tuple[list[str], str]:
    check = case.check
    seed = sample_seed(options.seed, entry.name, "slice", ())
    a64 = [fd.upcast(a) for a in facts.args]
    x64 = [a64[i] for i in facts.diff]
    outs64 = [o for j, o in enumerate(_flat(entry, *a64)) if j in facts.outs]
    xs = [facts.args[i] for i in facts.diff]
    lines = [f"args = {src.draw.format(seed=seed)}  # {src.what}, as the suite draws it"]
    if diff.simple:
        lines += ["xs, x64 = list(args), [x.double() for x in args]  # float64: for the reference"]
    else:
        lines += [
            "a64 = [a.double() if torch.is_tensor(a) and a.is_floating_point() else a for a in "
            "args]",
            *diff.defs("args"),
            "xs, x64 = [args[i] for i in DIFF], [a64[i] for i in DIFF]",
        ]
    if sub is not None:
        lines.append(f"# the sub-check the case failed: {sub.text}")
    strided = sub is not None and sub.strided
    if strided:  # the suite's non-contiguous layout: the same values at stride 2
        lines += [
            "strided = lambda v: torch.stack([v, torch.zeros_like(v)], -1).select(-1, 0)  # noqa: E731",
            "xs = [strided(x) for x in xs]",
        ]

    def draw(seed: int, what: str, likes: str) -> list[str]:
        out = _draw(seed, what, likes)
        return out + [f"{what[0]}s = [strided(v) for v in {what[0]}s]"] if strided else out

    seeds = {name: derive_seed(options.seed, case.id, name) for name in ("tangents", "cotangents")}
    fx = diff.of("args")
    h = _h(entry, x64, _randn_like(seeds["tangents"], xs), outs64)
    if check == "jvp":
        return [
            *lines,
            *_fd(h, diff),
            *draw(seeds["tangents"], "tangents", "xs"),
            f"actual = torch.func.jvp({fx}, tuple(xs), tuple(ts))[1]",
            "expected = fd(ts)",
        ], "torch.func.jvp"
    if check == "eager_jvp":  # a Function torch.func cannot differentiate: eager forward AD
        return [
            *lines,
            *_fd(h, diff),
            *EAGER_JVP,
            *draw(seeds["tangents"], "tangents", "xs"),
            f"actual = eager_jvp({fx}, xs, ts)[{len(facts.outs)}:]  # the tangents of the outputs",
            "expected = fd(ts)",
        ], "eager forward-mode AD (the Function's jvp)"
    cotangents = draw(seeds["cotangents"], "cotangents", f"{fx}(*xs)")
    names = f"NAMES = [f'grad of input {{i}}' for i in {facts.diff!r}]  # as the suite names them"
    if check == "vjp" and entry.gradient == "custom":
        return [
            *lines,
            *cotangents,
            f"actual = torch.func.vjp({fx}, *xs)[1](tuple(cs))",
            "leaves = [x.detach().requires_grad_() for x in xs]  # the reference: eager backward",
            f"expected = torch.autograd.grad({fx}(*leaves), leaves, cs, allow_unused=True, "
            "materialize_grads=True)",
            names,
            "ATOLS = [ATOL] * len(xs)",
        ], "torch.func.vjp"
    if check in ("vjp", "eager_vjp"):  # <vjp(cs)_i, t_i> against <cs, J_i t_i>, input by input
        # a Function torch.func cannot differentiate, or a sub-check only autograd.grad failed
        eager = check == "eager_vjp" or (sub is not None and sub.eager)
        grads = (
            f"grads = torch.autograd.grad({fx}(*leaves), leaves, cs, allow_unused=True, "
            "materialize_grads=True)"
            if eager
            else f"grads = torch.func.vjp({fx}, *xs)[1](tuple(cs))"
        )
        leaves = ["leaves = [x.detach().requires_grad_() for x in xs]"] if eager else []
        return [
            *lines,
            *_fd(h, diff),
            *draw(seeds["tangents"], "tangents", "xs"),
            *cotangents,
            *leaves,
            grads,
            "alone = lambda i: [t if k == i else 0 * t for k, t in enumerate(ts)]  # noqa: E731",
            "actual = [(g.double() * t.double()).sum() for g, t in zip(grads, ts)]  # <grad_i, t_i>",
            "expected = [sum((c.double() * j).sum() for c, j in zip(cs, fd(alone(i)))) for i in "
            "range(len(ts))]  # <c, J_i t_i>",
            names,
            "ATOLS = [ATOL * float(t.abs().sum()) for t in ts]  # a sum of products: its tolerance",
        ], "<torch.autograd.grad(cotangents), tangents> (the eager backward)" if eager else (
            "<torch.func.vjp(cotangents), tangents>"
        )
    jac = f"torch.func.{check}"
    return [
        *lines,
        *_fd(h, diff),
        *draw(seeds["tangents"], "tangents", "xs"),
        f"jac = {jac}({fx}, argnums=tuple(range(len(xs))))(*xs)  # [output][input]",
        "actual = [sum(j.reshape(o.numel(), -1) @ t.reshape(-1) for j, t in zip(row, ts))"
        f".reshape(o.shape) for row, o in zip(jac, {fx}(*xs))]  # J t",
        "expected = fd(ts)",
    ], f"{jac} times the tangents"


def _flat(entry: Entry, *a: Any) -> tuple[Any, ...]:
    with torch.no_grad():
        out = entry.call(*a)
    return (out,) if isinstance(out, torch.Tensor) else tuple(out)
