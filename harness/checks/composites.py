"""Autodiff composed with vmap: ``grad_of_vmap``, ``jvp_of_vmap``, ``vmap_of_vjp``, ``vmap_of_jvp``.

The plans and the slices with their extras are ``harness.plans.composite``'s. References
are loops of per-slice eager calls, which never run a vmap rule.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch

from autograd_function_db.entry import Entry
from harness.checks import noise
from harness.checks.autodiff_refs import (
    LOOP_JVP_REFERENCE,
    LOOP_VJP_REFERENCE,
    DiffView,
    Findings,
    Watch,
    all_outputs,
    attempt,
    random_like,
    restricted,
    sample_view,
)
from harness.checks.catalogue import (
    CaseContext,
    ReferenceRaised,
    TorchBug,
    Unsupported,
)
from harness.checks.forward_outputs import compare_forward, forward_torch_bug, note_left_out
from harness.checks.references import eager_jvp, eager_vjp
from harness.checks.unbatching import raised_in_unbatching, unbatching_bug
from harness.core.locations import describe_exception
from harness.plans.batching import as_tuple, concrete_out_dims, loop_reference, vmapped
from harness.plans.composite import (
    CompositePlan,
    WithExtras,
    loop_of_grads,
    stacked_extra,
    with_extra_dims,
)
from harness.plans.plan import MID, LevelPlan, Plan
from harness.plans.slices import PlanSlices, build_batched_args, derive_seed

#: What the per-slice references call, naming the outputs they keep: the composite checks
#: of one sample share them (``loop_reference``'s ``reuse``, ``PlanSlices.outputs_kept``).
EAGER_VJP = "eager vjp (reference)"
EAGER_JVP = "eager jvp (reference)"


def extras_source(
    ctx: CaseContext, kind: str, likes: Sequence[torch.Tensor], view: DiffView
) -> WithExtras:
    """The slices of the case's sample, each followed by its own random ``kind``
    (cotangents or tangents shaped like ``likes``), drawn from a seed of the sample and the
    slice path, so every case of the sample reads the same ones.

    Kept by the sample's slice source, with the per-slice reference outputs it keeps, for
    the sample's later cases of every composite check: a plan differs from another in where
    the batch dims sit, not in the slices and extras it reads. A random entry's seeded call
    is a new callable per case: nothing is kept for it (``reusing``)."""
    kept = getattr(ctx.slices, "views", None) if reusing(ctx) else None
    key = ("extras", kind, ctx.entry.call, view.diff, view.outs)
    try:
        source = kept.get(key) if kept is not None else None
    except TypeError:  # an unhashable callable
        kept, source = None, None
    if source is not None:
        return source  # type: ignore[no-any-return]
    parts = (ctx.options.seed, ctx.entry.name, ctx.sample_index, kind)

    def make(path: tuple[int, ...]) -> list[torch.Tensor]:
        gen = torch.Generator().manual_seed(derive_seed(*parts, path))
        return random_like(gen, likes)

    source = WithExtras(ctx.slices, make)
    if kept is not None:
        kept[key] = source
    return source


def reusing(ctx: CaseContext) -> bool:
    """Whether per-slice reference outputs may be kept for the sample's later cases: the
    eager call is deterministic on its inputs (not a random entry's seeded call)."""
    return not ctx.entry.caps.randomness


def _reference_key(ctx: CaseContext, what: str, view: DiffView) -> Any:
    return (what, ctx.entry.call, view.diff, view.outs) if reusing(ctx) else None


def _run_composite(
    ctx: CaseContext,
    check: str,
    kind: str,
    source: WithExtras,
    n_extras: int,
    actual_fn: Callable[..., tuple[Any, ...]],
    reference_fn: Callable[..., tuple[Any, ...]],
    reuse: Any,
    names: Sequence[str],
    sides: str,
    reference_name: str = "",
    meaning: str = "",
) -> None:
    plan = ctx.plan
    assert isinstance(plan, CompositePlan)
    findings = Findings.of(ctx)
    full = plan.combined(n_extras)
    label = f"{check} {plan.id}"
    try:
        expected, returned_tuple = loop_reference(reference_fn, full, source, reuse=reuse)  # type: ignore[arg-type]
    except Exception as exc:
        raise ReferenceRaised(
            reference_raised(ctx, label, full, source, actual_fn, reference_name, meaning, exc)
        ) from exc
    out_dims = concrete_out_dims(full, expected, returned_tuple)
    batched = build_batched_args(full, source)  # type: ignore[arg-type]
    n = len(ctx.sample.args)
    watch = Watch()
    for i, a in enumerate(batched):
        watch.add(f"input {i}" if i < n else f"batched {kind} {i - n}", a)

    def torch_bug() -> None:
        """A known torch bug (``xfail``) rather than the Function's failure, if it is one."""
        message = unbatching_bug(
            actual_fn,
            full,
            out_dims,
            lambda: build_batched_args(full, source),  # type: ignore[arg-type]
            expected,
            rtol=findings.rtol,
            atol=findings.atol,
            randomness=ctx.vmap_randomness,
        )
        if message:
            raise TorchBug(f"{label}: {message}")

    try:
        actual = as_tuple(
            attempt(
                label, vmapped(actual_fn, full, out_dims, randomness=ctx.vmap_randomness), *batched
            )
        )
    except Exception as raised:
        if raised_in_unbatching(raised):
            torch_bug()
        raise
    watch.verify(label, findings, f"the Function must leave its inputs and {kind} unchanged")
    if len(actual) != len(expected):
        findings.add(f"{label}: {len(actual)} results, reference {len(expected)}")
    start = len(findings.problems)
    compared = [(f"{label}: {nm}, {sides}", a, e) for nm, a, e in zip(names, actual, expected)]
    for text, a, e in compared:
        findings.compare(text, a, e, e.dtype)
    noise.recheck_findings(
        ctx, findings, start, compared, lambda: noise.wide_loop(reference_fn, full, source)
    )
    if findings.problems:
        torch_bug()
    findings.raise_if_any()


def reference_raised(
    ctx: CaseContext,
    label: str,
    full: Plan,
    source: WithExtras,
    actual_fn: Callable[..., tuple[Any, ...]],
    reference_name: str,
    meaning: str,
    exc: BaseException,
) -> str:
    """The message of a case whose reference raised: which side, what it means, and whether
    the transform under test itself ran (it is run here, once, to say so)."""
    batched = build_batched_args(full, source)  # type: ignore[arg-type]
    out_dims = [0 if lv.out_dims == MID else lv.out_dims for lv in full.levels]
    try:
        with torch.random.fork_rng(devices=[]):
            vmapped(actual_fn, full, out_dims, randomness=ctx.vmap_randomness)(*batched)
        ran = f"the transform under test ({check_words(label)}) itself ran without error"
    except Exception as e:
        ran = f"the transform under test also raised {describe_exception(e)}"
    return (
        "the reference raised, not the transform under test: the "
        f"{reference_name or 'reference'} raised {describe_exception(exc)}. "
        f"{meaning + '; ' if meaning else ''}{ran}, but without a reference this case "
        "compares nothing"
    )


def check_words(label: str) -> str:
    """The check's name in words, from a case label: ``vmap of vjp``."""
    return label.split(" ", 1)[0].replace("_of_", " of ")


def run_vmap_of_vjp(ctx: CaseContext) -> str:
    view = sample_view(ctx)
    entry = ctx.entry
    n = len(view.args)

    def actual(*a: Any) -> tuple[Any, ...]:
        f = restricted(entry, a[:n], view.diff, view.outs)
        vjp_fn = torch.func.vjp(f, *(a[i] for i in view.diff))[1]
        return tuple(vjp_fn(tuple(a[n:])))

    def reference(*a: Any) -> tuple[Any, ...]:
        return eager_vjp(entry, a[:n], view.diff, view.outs, list(a[n:]))

    likes = [view.outputs[j] for j in view.outs]
    _run_composite(
        ctx,
        "vmap_of_vjp",
        "cotangents",
        extras_source(ctx, "cotangents", likes, view),
        len(likes),
        actual,
        reference,
        _reference_key(ctx, EAGER_VJP, view),
        [f"grad of input {i}" for i in view.diff],
        f"vmap of torch.func.vjp (the Function's backward under vmap) vs {LOOP_VJP_REFERENCE} (reference)",
        "loop of per-slice eager vjps (torch.autograd.grad, the reference)",
        "Eager backward of the Function (torch.autograd.grad, .backward()) fails for its users",
    )
    note_left_out(ctx, "vmap_of_vjp", view)
    return LOOP_VJP_REFERENCE


def refuse_unbatched_inplace_tangent(
    entry: Entry, n: int, levels: Iterable[tuple[LevelPlan, int | None]]
) -> None:
    """``Unsupported`` when a level batches an argument the Function modifies in place but
    not its tangent (``levels``: each level with its tangents' batch dim): vmap cannot write
    the batched update into the unbatched tangent, as for torch's own in-place ops."""
    for lv, tangent_dim in levels:
        batched_inplace = [
            i for i in entry.caps.inplace_args if i < n and lv.in_dims[i] is not None
        ]
        if batched_inplace and tangent_dim is None:
            raise Unsupported(
                f"argument {batched_inplace[0]} is modified in place (mark_dirty), so jvp must "
                "update its tangent in place; with the argument batched and the tangent not, "
                "vmap cannot write batched values into the unbatched tangent (torch's own "
                "in-place ops such as exp_ raise the same way)"
            )


def run_vmap_of_jvp(ctx: CaseContext) -> str:
    view = sample_view(ctx)
    entry = ctx.entry
    n = len(view.args)
    plan = ctx.plan
    assert isinstance(plan, CompositePlan)
    refuse_unbatched_inplace_tangent(entry, n, zip(plan.levels, plan.extra_dims))

    def actual(*a: Any) -> tuple[Any, ...]:
        f = restricted(entry, a[:n], view.diff, view.outs)
        result = torch.func.jvp(f, tuple(a[i] for i in view.diff), tuple(a[n:]))
        return (*result[0], *result[1])

    def reference(*a: Any) -> tuple[Any, ...]:
        return eager_jvp(entry, a[:n], view.diff, view.outs, list(a[n:]))

    likes = view.primals()
    _run_composite(
        ctx,
        "vmap_of_jvp",
        "tangents",
        extras_source(ctx, "tangents", likes, view),
        len(likes),
        actual,
        reference,
        _reference_key(ctx, EAGER_JVP, view),
        [f"primal {view.out_name(j)}" for j in view.outs]
        + [f"tangent of {view.out_name(j)}" for j in view.outs],
        f"vmap of torch.func.jvp (the Function's jvp under vmap) vs {LOOP_JVP_REFERENCE} (reference)",
        "loop of per-slice eager forward-mode jvps (torch.autograd.forward_ad, the reference)",
        "Eager forward-mode AD of the Function (torch.autograd.forward_ad dual tensors) fails "
        "for its users",
    )
    note_left_out(ctx, "vmap_of_jvp", view)
    return LOOP_JVP_REFERENCE


def slice_vjp(
    entry: Entry,
    view: DiffView,
    slices: PlanSlices,
    kept: dict[tuple[int, ...], Any] | None,
    path: tuple[int, ...],
) -> tuple[torch.Tensor, ...]:
    """A slice's eager vjp from its arguments and cotangents in ``slices``, kept in ``kept``
    (as ``loop_reference`` keeps a slice's outputs) for the sample's later cases."""
    hit = kept.get(path) if kept is not None else None
    if hit is None:
        n = len(view.args)
        a = slices.call_args(path)
        grads = attempt(
            "per-slice eager vjp (reference)",
            eager_vjp,
            entry,
            a[:n],
            view.diff,
            view.outs,
            list(a[n:]),
        )
        hit = (tuple(grads), None)
        if kept is not None:
            kept[path] = hit
    return hit[0]  # type: ignore[no-any-return]


def wide_slice_vjp(
    entry: Entry, view: DiffView, slices: PlanSlices, path: tuple[int, ...]
) -> tuple[torch.Tensor, ...]:
    """A slice's eager vjp from the float64 upcast of its arguments and cotangents."""
    n = len(view.args)
    a = [noise.widened(x) for x in slices.call_args(path)]
    return tuple(eager_vjp(entry, a[:n], view.diff, view.outs, list(a[n:])))


def _or_none(fn: Callable[[], list[torch.Tensor]]) -> list[torch.Tensor] | None:
    """``fn()`` under a forked RNG, None when it raises (the widened recheck is optional)."""
    try:
        with torch.random.fork_rng(devices=[]):
            return fn()
    except Exception:
        return None


def run_grad_of_vmap(ctx: CaseContext) -> str:
    view = sample_view(ctx)
    entry = ctx.entry
    plan = ctx.plan
    assert plan is not None
    findings = Findings.of(ctx)
    fn = all_outputs(entry)
    stacked, returned_tuple = loop_reference(
        fn, plan, ctx.slices, reuse=("all outputs", entry.call)
    )
    out_dims = concrete_out_dims(plan, stacked, returned_tuple)
    batched = PlanSlices.of(plan, ctx.slices).batched()
    n = len(view.args)
    # Each slice's cotangents are the sample's (``extras_source``): the batched cotangent
    # stacks them at out_dims, and each slice's eager vjp is the one vmap_of_vjp keeps for
    # the plans that batch the same arguments with the cotangents batched.
    source = extras_source(ctx, "cotangents", [view.outputs[j] for j in view.outs], view)
    full = with_extra_dims(plan, lambda lv: [0] * len(view.outs))
    slices_with_cots = PlanSlices.of(full, source)  # type: ignore[arg-type]
    key = _reference_key(ctx, EAGER_VJP, view)
    kept = slices_with_cots.outputs_kept(key) if key is not None else None
    cots = [stacked_extra(source, n + m, plan, out_dims, j) for m, j in enumerate(view.outs)]
    grads = functools.partial(slice_vjp, entry, view, slices_with_cots, kept)
    expected = loop_of_grads(plan, view.diff, grads)
    label = f"grad_of_vmap {plan.id}"
    watch = Watch()
    for i, a in enumerate(batched):
        watch.add(f"input {i}", a)
    for j, c in zip(view.outs, cots):  # fresh stacks, only this case holds them
        watch.add(f"the cotangent of {view.out_name(j)}", c)
    vf = vmapped(fn, plan, out_dims, randomness=ctx.vmap_randomness)

    def f(*xs: Any) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        call = list(batched)
        for i, x in zip(view.diff, xs):
            call[i] = x
        outs = vf(*call)
        return tuple(outs[j] for j in view.outs), tuple(outs)

    try:
        _, vjp_fn, returned = attempt(
            f"{label} forward", torch.func.vjp, f, *(batched[i] for i in view.diff), has_aux=True
        )
        actual = attempt(label, vjp_fn, tuple(cots))
    except Exception as raised:
        if raised_in_unbatching(raised):
            _unbatching_under(ctx, "vjp", plan, out_dims, stacked, findings, label)
        raise
    watch.verify(label, findings, "inputs and cotangents must be left unchanged")
    start = len(findings.problems)
    compared = [
        (
            f"{label}: grad of input {i}, torch.func.vjp of vmap (the Function's vmap rule and "
            f"backward) vs {LOOP_VJP_REFERENCE} (reference; unbatched inputs summed over slices)",
            a,
            e,
        )
        for i, a, e in zip(view.diff, actual, expected)
    ]
    for text, a, e in compared:
        findings.compare(text, a, e, e.dtype)
    wide = functools.partial(wide_slice_vjp, entry, view, slices_with_cots)
    noise.recheck_findings(
        ctx,
        findings,
        start,
        compared,
        lambda: _or_none(lambda: loop_of_grads(plan, view.diff, wide)),
    )
    grads_ok = not findings.problems
    if compare_forward(ctx, findings, label, view, returned, stacked, fn, plan) and grads_ok:
        forward_torch_bug(ctx, label, fn, plan, out_dims, stacked, findings)
    if findings.problems:
        _unbatching_under(ctx, "vjp", plan, out_dims, stacked, findings, label)
    findings.raise_if_any()
    return LOOP_VJP_REFERENCE


def _unbatching_under(
    ctx: CaseContext,
    transform: str,
    plan: Plan,
    out_dims: Sequence[Any],
    forward_expected: Sequence[Any] | None,
    findings: Findings,
    label: str,
) -> None:
    """Raise ``TorchBug`` when a failed ``grad_of_vmap`` / ``jvp_of_vmap`` case is torch's
    un-batching bug (``harness.checks.unbatching``, under torch.func's ``transform`` of the
    vmap and the case's randomness; a random entry's call is reseeded per call, so its
    draws match the loop's). ``forward_expected``: the loop reference of every output of
    the forward at out_dims (computed here when None)."""
    fn = all_outputs(ctx.entry)
    if forward_expected is None:
        forward_expected, _ = loop_reference(fn, plan, ctx.slices)
    message = unbatching_bug(
        fn,
        plan,
        out_dims,
        lambda: PlanSlices.of(plan, ctx.slices).batched(),
        forward_expected,
        rtol=findings.rtol,
        atol=findings.atol,
        randomness=ctx.vmap_randomness,
        transform=transform,
    )
    if message:
        raise TorchBug(f"{label}: {message}")


def run_jvp_of_vmap(ctx: CaseContext) -> str:
    """``torch.func.jvp`` of ``vmap(f)``: forward mode through the vmap rule.

    Each tangent is batched like its primal (same in_dims at every level), so the
    reference is a loop of per-slice eager jvps (``torch.autograd.forward_ad``) on the
    matching slices of primals and tangents, stacked at out_dims.
    """
    view = sample_view(ctx)
    entry = ctx.entry
    plan = ctx.plan
    assert plan is not None
    n = len(view.args)
    findings = Findings.of(ctx)
    full = with_extra_dims(plan, lambda lv: [lv.in_dims[i] for i in view.diff])
    source = extras_source(ctx, "tangents", view.primals(), view)

    def reference(*a: Any) -> tuple[Any, ...]:
        return eager_jvp(entry, a[:n], view.diff, view.outs, list(a[n:]))

    expected, _ = loop_reference(
        lambda *a: attempt("per-slice eager jvp (reference)", reference, *a),
        full,
        source,  # type: ignore[arg-type]
        reuse=_reference_key(ctx, EAGER_JVP, view),
    )
    batched = build_batched_args(full, source)  # type: ignore[arg-type]
    label = f"jvp_of_vmap {plan.id}"
    watch = Watch()
    for i, a in enumerate(batched):
        watch.add(f"input {i}" if i < n else f"the tangent of input {view.diff[i - n]}", a)
    every = all_outputs(entry)
    out_dims = [lv.out_dims for lv in plan.levels]
    vf = vmapped(every, plan, out_dims, randomness=ctx.vmap_randomness)

    def f(*xs: Any) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        call = list(batched[:n])
        for i, x in zip(view.diff, xs):
            call[i] = x
        outs = as_tuple(vf(*call))
        return tuple(outs[j] for j in view.outs), tuple(outs)

    try:
        primals_out, tangents_out, returned = attempt(
            label,
            torch.func.jvp,
            f,
            tuple(batched[i] for i in view.diff),
            tuple(batched[n:]),
            has_aux=True,
        )
    except Exception as raised:
        if raised_in_unbatching(raised):
            _unbatching_under(ctx, "jvp", plan, out_dims, None, findings, label)
        raise
    watch.verify(label, findings, "inputs and tangents must be left unchanged")
    names = [f"primal output {j}" for j in view.outs] + [
        f"tangent of output {j}" for j in view.outs
    ]
    actual = (*as_tuple(primals_out), *as_tuple(tangents_out))
    start = len(findings.problems)
    compared = [
        (
            f"{label}: {nm}, torch.func.jvp of vmap (the Function's vmap rule and jvp) vs "
            f"{LOOP_JVP_REFERENCE} (reference)",
            a,
            e,
        )
        for nm, a, e in zip(names, actual, expected)
    ]
    for text, a, e in compared:
        findings.compare(text, a, e, e.dtype)
    noise.recheck_findings(
        ctx, findings, start, compared, lambda: noise.wide_loop(reference, full, source)
    )
    # the outputs the tangents leave out (not differentiable): against the forward's loop
    left_out = [j for j in range(len(returned)) if j not in view.outs]
    if left_out:
        stacked, _ = loop_reference(every, plan, ctx.slices, reuse=("all outputs", entry.call))
        values_ok = not findings.problems
        if (
            compare_forward(ctx, findings, label, view, returned, stacked, every, plan, left_out)
            and values_ok
        ):
            forward_torch_bug(ctx, label, every, plan, out_dims, stacked, findings)
    if findings.problems:
        _unbatching_under(ctx, "jvp", plan, out_dims, None, findings, label)
    findings.raise_if_any()
    return LOOP_JVP_REFERENCE
