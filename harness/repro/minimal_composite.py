"""The minimal scripts of the composite checks: vmap composed with the Function's autodiff
(``grad_of_vmap``, ``jvp_of_vmap``, ``vmap_of_vjp``, ``vmap_of_jvp``), against a loop of
per-slice eager autodiff; the rest of the script is ``harness.repro.minimal``'s."""

from __future__ import annotations

from autograd_function_db.entry import Entry
from harness.core.options import Options
from harness.engine.cases import Case
from harness.plans.plan import MID, normalize_dim
from harness.plans.slices import derive_seed
from harness.repro.minimal_autodiff import EAGER_JVP
from harness.repro.minimal_facts import CaseFacts, DiffNames, NotMinimal
from harness.repro.minimal_source import ScriptSource, slice_lines


def composite_body(
    entry: Entry,
    options: Options,
    case: Case,
    facts: CaseFacts,
    src: ScriptSource,
    diff: DiffNames,
) -> tuple[list[str], str]:
    """vmap composed with the Function's autodiff, against a loop of per-slice eager
    autodiff (``torch.autograd.functional.vjp``, ``torch.autograd.forward_ad``)."""
    check = case.check
    lv = facts.level(case)
    n = len(facts.args)
    dims = facts.out_dims(lv)
    lines = [*diff.defs(), *slice_lines(options, entry, src, lv, n)]
    outs = [facts.outputs[j] for j in facts.outs]
    dtypes = f"[{', '.join(str(o.dtype) for o in outs)}]"
    if check == "grad_of_vmap":
        out_dims = dims[0] if lv.out_dims != MID else tuple(dims)
        cut = [(o, normalize_dim(dims[j], o.dim() + 1)) for j, o in enumerate(facts.outputs)]
        shapes = [(*o.shape[:d], lv.batch_size, *o.shape[d:]) for j, (o, d) in enumerate(cut)
                  if j in facts.outs]  # fmt: skip
        seed = derive_seed(options.seed, case.id, "cotangents")
        return [
            *lines,
            f"vf = torch.func.vmap(call, in_dims=in_dims, out_dims={out_dims!r})",
            f"gen = torch.Generator().manual_seed({seed})  # the suite's cotangents",
            "cs = [torch.randn(s, generator=gen, dtype=torch.float64).to(d) for s, d in "
            f"zip({shapes!r}, {dtypes})]",
            f"actual = torch.func.vjp({diff.of('batched', 'vf')}, *{diff.pick('batched')})[1]"
            "(tuple(cs))",
            "# the reference: per slice, the eager backward; an unbatched input's grads summed",
            f"per = [torch.autograd.functional.vjp({diff.of('a')}, tuple({diff.pick('a')}), "
            f"tuple(c.select(d, b) for c, d in zip(cs, {[dims[j] for j in facts.outs]!r})))[1] "
            "for b, a in enumerate(per_slice)]",
            "expected = [torch.stack([p[m] for p in per], d) if d is not None else "
            f"sum(p[m] for p in per) for m, d in enumerate({[lv.in_dims[i] for i in facts.diff]!r})]",
        ], "torch.func.vjp of torch.func.vmap"
    if lv.out_dims == MID:
        raise NotMinimal("out_dims at an interior position under this composite")
    out = lv.out_dims
    kind = "tangents" if check in ("jvp_of_vmap", "vmap_of_jvp") else "cotangents"
    extra_dim = getattr(case.plan, "extra_dims", (0,))[0]  # the extras' batch dim (vmap_of_*)
    # each slice's own extras; unbatched ones: the first slice's in every slice
    keys = [(b,) if b and extra_dim is not None else () for b in range(lv.batch_size)]
    seeds = [derive_seed(options.seed, case.id, kind, key) for key in keys]
    base = "per_slice[0]"
    likes = diff.pick(base) if kind == "tangents" else diff.apply(base, diff.pick(base))
    lines += [
        f"gens = [torch.Generator().manual_seed(s) for s in {seeds!r}]  # the suite's {kind}",
        "extras = [[torch.randn(v.shape, generator=g, dtype=torch.float64).to(v.dtype) for v in "
        f"{likes}] for g in gens]",
    ]
    if check == "jvp_of_vmap":  # each tangent batched like its primal
        tdims = [lv.in_dims[i] for i in facts.diff]
        if None in tdims:  # an unbatched primal's tangent: the first slice's in every slice
            lines += [
                "extras = [[e[k] if d is not None else extras[0][k] for k, d in "
                f"enumerate({tdims!r})] for e in extras]"
            ]
        lines += [
            "bextras = [torch.stack([e[k] for e in extras], d) if d is not None else extras[0][k] "
            f"for k, d in enumerate({tdims!r})]  # the tangents batched like the primals",
        ]
    else:
        lines += [
            f"ed = {extra_dim!r}  # the {kind}' batch dim",
            "bextras = [torch.stack([e[k] for e in extras], ed) if ed is not None else "
            "extras[0][k] for k in range(len(extras[0]))]",
        ]
    stack = f"expected = [torch.stack([p[m] for p in per], {out!r}) for m in range(len(per[0]))]"
    if check == "vmap_of_vjp":
        inner = f"torch.func.vjp({diff.of(f'ac[:{n}]')}, *{diff.pick(f'ac[:{n}]')})[1](ac[{n}:])"
        return [
            *lines,
            f"vf = torch.func.vmap(lambda *ac: {inner}, in_dims=(*in_dims, *[ed] * len(extras[0])), "
            f"out_dims={out!r})",
            "actual = vf(*batched, *bextras)",
            f"per = [torch.autograd.functional.vjp({diff.of('a')}, tuple({diff.pick('a')}), "
            "tuple(e))[1] for a, e in zip(per_slice, extras)]  # the reference: eager backward",
            stack,
        ], "torch.func.vmap of torch.func.vjp"
    if check == "vmap_of_jvp":
        at = f"at[:{n}]"
        inner = f"sum(torch.func.jvp({diff.of(at)}, tuple({diff.pick(at)}), at[{n}:]), ())"
        return [
            *lines,
            *EAGER_JVP,
            f"vf = torch.func.vmap(lambda *at: {inner}, in_dims=(*in_dims, *[ed] * len(extras[0])), "
            f"out_dims={out!r})",
            "actual = vf(*batched, *bextras)",
            f"per = [eager_jvp({diff.of('a')}, {diff.pick('a')}, e) for a, e in "
            "zip(per_slice, extras)]",
            stack,
        ], "torch.func.vmap of torch.func.jvp"
    return [
        *lines,
        *EAGER_JVP,
        f"vf = torch.func.vmap(call, in_dims=in_dims, out_dims={out!r})",
        f"actual = sum(torch.func.jvp({diff.of('batched', 'vf')}, "
        f"{'tuple(batched)' if diff.simple else 'tuple(' + diff.pick('batched') + ')'}, "
        "tuple(bextras)), ())",
        f"per = [eager_jvp({diff.of('a')}, {diff.pick('a')}, e) for a, e in "
        "zip(per_slice, extras)]",
        stack,
    ], "torch.func.jvp of torch.func.vmap"
