"""The vmap checks: one level, nested levels and chunked, each against a loop over slices."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import sys
import tempfile
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

import torch

from autograd_function_db.entry import VMAP_NONE, Entry
from harness.checks import noise
from harness.checks.catalogue import (
    CaseContext,
    CheckFailure,
    CheckSpec,
    TorchBug,
    Unsupported,
    needs_vmap,
    register,
)
from harness.checks.compare import compare_outputs
from harness.checks.unbatching import raised_in_unbatching, unbatching_bug
from harness.core.options import Options
from harness.plans.batching import as_tuple, concrete_out_dims, loop_reference, vmapped
from harness.plans.layouts import NonContiguousPlan, with_layout
from harness.plans.plan import (
    ArgLayout,
    HazardPlan,
    Plan,
    chunked_plans,
    hazard_plans,
    nested_plans,
    normalize_dim,
    single_level_plans,
)
from harness.plans.pytrees import FlatCall, describe_structure
from harness.plans.slices import RepeatedSlices, build_batched_args, seeded_call

# --- custom ops without a vmap rule: torch falls back to a slow loop ------------------------

#: Text of torch's C++ warning when vmap falls back to a per-slice loop (BatchedFallback.cpp).
FALLBACK_MARK = "we have not yet implemented the batching rule"


def lacks_batching_rule(entry: Entry) -> bool:
    """True for a torch.library custom op with no FuncTorchBatched kernel (no register_vmap):
    vmap then runs it through the slow per-slice fallback instead of raising."""
    op = entry.custom_op
    qualname = getattr(op, "_qualname", None) or getattr(getattr(op, "_schema", None), "name", None)
    if qualname is None:
        return False
    return not torch._C._dispatch_has_kernel_for_dispatch_key(qualname, "FuncTorchBatched")


def needs_vmap_or_fallback(entry: Entry) -> str | None:
    """Like ``needs_vmap``, but a custom op without a rule still runs: the fallback is reported."""
    if entry.custom_op is not None and entry.caps.vmap == VMAP_NONE:
        return None
    return needs_vmap(entry)


@contextlib.contextmanager
def captured_fallback_warnings() -> Iterator[list[str]]:
    """Collect torch's vmap fallback warnings while the block runs.

    The warning comes from C++ and goes straight to file descriptor 2 (not through
    Python's warnings), so fd 2 is redirected to a temporary file for the block; lines
    that are not the fallback warning are written back to stderr afterwards. Python
    warnings carrying the same text are collected too; other Python warnings are shown again
    as they came. The list is filled on exit.
    """
    lines: list[str] = []
    caught: list[warnings.WarningMessage] = []
    sys.stderr.flush()
    with tempfile.TemporaryFile() as tmp:
        saved = os.dup(2)
        os.dup2(tmp.fileno(), 2)
        try:
            with warnings.catch_warnings(record=True) as record:
                # Only the fallback warning is forced through; every other warning meets the
                # caller's filters as it would without this block (a warning torch's own
                # internals set off stays ignored, a Function's own stays the Function's).
                warnings.filterwarnings("always", message=f".*{re.escape(FALLBACK_MARK)}")
                try:
                    yield lines
                finally:
                    caught.extend(record)
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            text = tmp.read().decode(errors="replace")
            others: list[str] = []
            for line in text.splitlines():
                (lines if FALLBACK_MARK in line else others).append(line.strip())
            if others:
                sys.stderr.write("\n".join(others) + "\n")
            for w in caught:
                if FALLBACK_MARK in str(w.message):
                    lines.append(str(w.message))
                else:
                    warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)


def fallback_message(entry: Entry, name: str, plan: Plan, captured: list[str]) -> str:
    warning = ""
    if captured:
        text = captured[0]
        text = text[text.find("Warning:") + len("Warning:") :] if "Warning:" in text else text
        warning = f' (torch warned: "{text.strip()}")'
    return (
        f"{name} {plan.id}: custom op {entry.function_name} has no vmap rule, so torch.func.vmap "
        f"fell back to a slow per-slice loop{warning}; the results matched the loop reference, "
        "but nothing was batched: register a rule with torch.library.register_vmap"
    )


def _diagnose(actual: Any, expected: Any, plan: Plan, out_dim: Any) -> str:
    """A guess at what the rule got wrong, from the shapes and values alone."""
    if not (isinstance(actual, torch.Tensor) and isinstance(expected, torch.Tensor)):
        return ""
    sizes = {lv.batch_size for lv in plan.levels}
    if actual.shape != expected.shape:
        if sorted(actual.shape) == sorted(expected.shape):
            return "same sizes in another order: the batch dim is probably at the wrong position"
        if actual.dim() == expected.dim() - 1:
            return "one dim short: a batched output was probably returned with out_dim None"
        missing = [s for s in sizes if s in expected.shape and s not in actual.shape]
        if missing:
            return f"batch size {missing[0]} missing from the result: the rule returned a wrong batch size"
        return ""
    if len(plan.levels) == 1 and isinstance(out_dim, int) and actual.dim() > 0:
        d = normalize_dim(out_dim, actual.dim())
        slices = actual.movedim(d, 0)
        ref = expected.movedim(d, 0)
        if (
            slices.shape[0] > 1
            and all(torch.equal(slices[0], s) for s in slices[1:])
            and not all(torch.equal(ref[0], s) for s in ref[1:])
        ):
            return "every batch slice of the result is equal: the rule seems to compute one slice and expand it"
    return ""


def _unbatched_hazard_hint(ctx: CaseContext, plan: Plan) -> str:
    """A hazard plan that leaves an argument with a dim of the batch size unbatched: a rule
    that decides by size whether an argument is batched takes it for a batched one."""
    if not isinstance(plan, HazardPlan):
        return ""
    in_dims = plan.levels[0].in_dims
    for i, a in enumerate(ctx.sample.args):
        if isinstance(a, torch.Tensor) and in_dims[i] is None and plan.hazard in a.shape:
            return (
                f"argument {i} is unbatched here and has a dim of size {plan.hazard}, the batch "
                "size: a rule that decides by size whether an argument is batched "
                "(x.shape[-1] == info.batch_size) takes it for a batched one; read in_dims "
                "(None: unbatched) instead"
            )
    return ""


def inputs_snapshot(args: Sequence[Any], skip: Sequence[int]) -> list[tuple[int, torch.Tensor]]:
    return [
        (i, a.detach().clone())
        for i, a in enumerate(args)
        if isinstance(a, torch.Tensor) and i not in skip
    ]


def assert_inputs_unchanged(
    name: str, args: Sequence[Any], snapshot: list[tuple[int, torch.Tensor]]
) -> None:
    for i, before in snapshot:
        after = args[i].detach()
        if after.layout != torch.strided:  # sparse data: compared as the values it holds
            after, before = after.to_dense(), before.to_dense()
        if after.shape != before.shape or not torch.equal(after, before):
            raise CheckFailure(
                f"{name}: input {i} was modified by the call; declare it with inplace_args "
                "(and mark_dirty) if that is intended"
            )


def run_vmap_plan(ctx: CaseContext, name: str) -> str | None:
    """Run the plan's vmap(s) and compare with the loop reference; raise CheckFailure on mismatch.

    A random entry is checked under each ``randomness`` mode (``run_random_plan``); a custom
    op without a vmap rule is compared as usual and then reported as ``unsupported`` with
    a message naming torch's slow fallback (never as a plain pass).
    """
    if ctx.entry.caps.randomness:
        return run_random_plan(ctx, name)
    if lacks_batching_rule(ctx.entry):
        assert ctx.plan is not None
        with captured_fallback_warnings() as captured:
            vmap_against_loop(ctx, name)
        raise Unsupported(fallback_message(ctx.entry, name, ctx.plan, captured))
    return vmap_against_loop(ctx, name)


def vmap_against_loop(ctx: CaseContext, name: str) -> str | None:
    """The plan's vmap against the loop reference, with none of ``run_vmap_plan``'s
    handling of random entries and of custom ops without a vmap rule (``vmap_fallback``
    calls it for a random entry's shared draws)."""
    plan = ctx.plan
    assert plan is not None
    # The Function's outputs may be any pytree: vmap and the loop see the flat leaves, the
    # structures are compared on their own.
    ref_fn, fn = FlatCall(ctx.entry.call), FlatCall(ctx.entry.call)
    expected, _ = loop_reference(ref_fn, plan, ctx.slices, reuse=("forward", ctx.entry.call))
    out_dims = concrete_out_dims(plan, expected, True)
    args = with_layout(plan, build_batched_args(plan, ctx.slices))
    snapshot = inputs_snapshot(args, ctx.entry.caps.inplace_args)
    rtol, atol = ctx.tolerances

    def torch_bug() -> None:
        """A known torch bug (``xfail``) rather than the Function's failure, if it is one."""
        message = unbatching_bug(
            FlatCall(ctx.entry.call),
            plan,
            out_dims,
            lambda: build_batched_args(plan, ctx.slices),
            expected,
            rtol=rtol,
            atol=atol,
        )
        if message:
            raise TorchBug(f"{name} {plan.id}: {message}")

    try:
        actual = vmapped(fn, plan, out_dims)(*args)
    except Exception as e:
        if raised_in_unbatching(e):
            torch_bug()
        raise
    assert_inputs_unchanged(f"{name} {plan.id}", args, snapshot)
    if not fn.same_structure(ref_fn):
        assert fn.spec is not None and ref_fn.spec is not None
        raise CheckFailure(
            f"{name} {plan.id}: vmap returned {describe_structure(fn.spec)}, the per-slice "
            f"call returned {describe_structure(ref_fn.spec)}"
        )
    problems = compare_outputs(
        actual,
        expected,
        rtol=rtol,
        atol=atol,
        label=f"{name} {plan.id} (Function under vmap vs loop over slices)",
        names=ref_fn.names(),
    )
    allowed = ""
    if problems and noise.applies(ctx.dtype, ctx.entry.caps.randomness):
        again = _noise_recheck(ctx, name, actual, expected, ref_fn.names(), rtol, atol)
        if again is not None:
            if not again.problems:
                if again.words:
                    ctx.notes.append(f"{name} {plan.id}: {again.words}")
                return "loop over slices"
            problems = list(again.problems)
            allowed = f" ({again.words})" if again.words else ""
    if problems:
        torch_bug()
        k = next(
            (
                i
                for i, (a, e) in enumerate(zip(actual, expected))
                if not (isinstance(a, torch.Tensor) and isinstance(e, torch.Tensor))
                or a.shape != e.shape
                or not torch.allclose(
                    a.detach().to(e.dtype), e, rtol=rtol, atol=atol, equal_nan=True
                )
            ),
            0,
        )
        level_out = out_dims[0]
        out_dim = level_out[k] if isinstance(level_out, tuple) else level_out
        hint = _diagnose(actual[k] if k < len(actual) else None, expected[k], plan, out_dim)
        hint = hint or _unbatched_hazard_hint(ctx, plan)
        raise CheckFailure("; ".join(problems) + allowed + (f" -- {hint}" if hint else ""))
    return "loop over slices"


def _noise_recheck(
    ctx: CaseContext,
    name: str,
    actual: Sequence[Any],
    expected: Sequence[Any],
    names: Sequence[str],
    rtol: float,
    atol: float,
) -> noise.Recheck | None:
    """The comparison again, with the low dtype's own rounding noise allowed for
    (``harness.checks.noise``): the loop once more on the float64 upcast of the slices."""
    plan = ctx.plan
    assert plan is not None
    label = f"{name} {plan.id} (Function under vmap vs loop over slices)"

    def one(k: int) -> Any:
        def compare(extra: float) -> str | None:
            found = compare_outputs(
                [actual[k]],
                [expected[k]],
                rtol=rtol,
                atol=atol + extra,
                label=label,
                names=[names[k] if k < len(names) else f"output {k}"],
            )
            return "; ".join(found) or None

        return compare

    wide = noise.wide_loop(FlatCall(ctx.entry.call), plan, ctx.slices)
    return noise.recheck([one(k) for k in range(len(expected))], expected, wide, ctx.dtype, atol)


# --- randomness ------------------------------------------------------------------------------

#: The modes ``torch.func.vmap(randomness=...)`` accepts; a random entry is checked under each.
RANDOMNESS_MODES = ("error", "same", "different")


def _slices_along(t: torch.Tensor, dim: int) -> list[torch.Tensor]:
    return list(t.movedim(normalize_dim(dim, t.dim()), 0))


def run_random_plan(ctx: CaseContext, name: str) -> str | None:
    """A random entry under each ``randomness`` mode, for the plan's levels and batch sizes.

    * ``error``: the vmapped call must raise (the rule must refuse to draw).
    * ``same``: one draw shared by all slices: equal to a loop that reseeds the RNG to
      the same seed before every slice.
    * ``different``: a draw per slice: on a batch that repeats one input slice, the
      per-slice outputs must not all be equal; shapes and dtypes as the loop's.
    """
    plan = ctx.plan
    assert plan is not None
    fn = FlatCall(ctx.entry.call)
    seed = int(ctx.generator("rng").initial_seed())
    label = f"{name} {plan.id}"
    expected, returned_tuple = loop_reference(seeded_call(fn, seed), plan, ctx.slices)
    out_dims = concrete_out_dims(plan, expected, returned_tuple)
    args = with_layout(plan, build_batched_args(plan, ctx.slices))
    rtol, atol = ctx.tolerances

    try:
        with torch.random.fork_rng(devices=[]):
            vmapped(fn, plan, out_dims, randomness="error")(*args)
    except Exception:
        pass
    else:
        raise CheckFailure(
            f"{label}, randomness='error': the call returned instead of raising; a vmap rule "
            "that draws random numbers must raise when info.randomness == 'error'"
        )

    def torch_bug() -> None:
        """A known torch bug (``xfail``) rather than the Function's failure, if it is one."""
        message = unbatching_bug(
            FlatCall(ctx.entry.call),
            plan,
            out_dims,
            lambda: build_batched_args(plan, ctx.slices),
            expected,
            rtol=rtol,
            atol=atol,
            randomness="same",
            wrap=lambda call: seeded_call(call, seed),
        )
        if message:
            raise TorchBug(f"{label}, randomness='same': {message}")

    try:
        same = as_tuple(seeded_call(vmapped(fn, plan, out_dims, randomness="same"), seed)(*args))
    except Exception as e:
        if raised_in_unbatching(e):
            torch_bug()
        raise
    problems = compare_outputs(
        same,
        expected,
        rtol=rtol,
        atol=atol,
        label=f"{label}, randomness='same' (vmap vs a loop reseeded to the same seed per slice)",
    )
    if problems:
        torch_bug()
        raise CheckFailure(
            "; ".join(problems) + " -- with randomness='same' every slice must see the draw "
            "one unbatched call makes (draw once with the per-slice shape and broadcast)"
        )

    different = as_tuple(
        seeded_call(vmapped(fn, plan, out_dims, randomness="different"), seed)(*args)
    )
    problems = compare_outputs(
        [o.shape for o in different if isinstance(o, torch.Tensor)],
        [o.shape for o in expected if isinstance(o, torch.Tensor)],
        rtol=0,
        atol=0,
        label=f"{label}, randomness='different': output shapes",
    )
    if problems:
        raise CheckFailure("; ".join(problems))
    repeated = with_layout(plan, build_batched_args(plan, RepeatedSlices(ctx.slices)))
    outs = as_tuple(
        seeded_call(vmapped(fn, plan, out_dims, randomness="different"), seed)(*repeated)
    )
    level0 = out_dims[0]
    varied = False
    for k, out in enumerate(outs):
        if not isinstance(out, torch.Tensor) or not (out.is_floating_point() or out.is_complex()):
            continue
        dim = level0[k] if isinstance(level0, tuple) else level0
        parts = _slices_along(out, dim)
        if any(not torch.equal(parts[0], p) for p in parts[1:]):
            varied = True
    if not varied:
        raise CheckFailure(
            f"{label}, randomness='different': on a batch that repeats one input slice every "
            "slice got the same output; each batch element must get its own draw (draw with "
            "the batched shape when info.randomness == 'different')"
        )
    return "loop reseeded per slice (same); per-slice variation (different); raises (error)"


def _all_at_zero(layout: ArgLayout, plans: Sequence[Plan]) -> list[Plan | None]:
    """The plans, then one more: every tensor argument batched at 0 at every level (the sizes
    and chunking of the first plan), handed over non-contiguous (``harness.plans.layouts``)."""
    out: list[Plan | None] = list(plans)
    if plans:
        zero = layout.in_dims(layout.uniform(0))
        levels = tuple(dataclasses.replace(lv, in_dims=zero, out_dims=0) for lv in plans[0].levels)
        out.append(NonContiguousPlan(levels, plans[0].strategy))
    return out


def _single(layout: ArgLayout, options: Options) -> list[Plan | None]:
    plans: list[Plan] = []
    for b in options.batch_sizes:
        plans.extend(single_level_plans(layout, b, cap=options.plan_cap, seed=options.seed))
    return _all_at_zero(layout, plans)


def _nested(layout: ArgLayout, options: Options) -> list[Plan | None]:
    return _all_at_zero(
        layout,
        nested_plans(layout, options.nested_batch_sizes, cap=options.plan_cap, seed=options.seed),
    )


def _chunked(layout: ArgLayout, options: Options) -> list[Plan | None]:
    return _all_at_zero(layout, chunked_plans(layout, *options.chunk))


def _hazard(layout: ArgLayout, options: Options) -> list[Plan | None]:
    """Only with ``hazard_probe``: batch sizes equal to the sample's own dim sizes."""
    if not options.hazard_probe:
        return []
    return list(hazard_plans(layout, layout.sizes))


register(
    CheckSpec(
        "vmap",
        lambda ctx: run_vmap_plan(ctx, "vmap"),
        _single,
        needs_vmap_or_fallback,
        "vmap",
        "loop over slices",
        "vmap(f, in_dims, out_dims) for every plan",
    )
)
register(
    CheckSpec(
        "vmap_nested",
        lambda ctx: run_vmap_plan(ctx, "vmap_nested"),
        _nested,
        needs_vmap_or_fallback,
        "vmap",
        "nested loop over slices",
        "vmap(vmap(f)) with a different batch size and in_dims per level",
    )
)
register(
    CheckSpec(
        "vmap_chunked",
        lambda ctx: run_vmap_plan(ctx, "vmap_chunked"),
        _chunked,
        needs_vmap_or_fallback,
        "vmap",
        "loop over slices",
        "vmap(f, chunk_size=k): the rule sees batches smaller than the whole",
    )
)
register(
    CheckSpec(
        "vmap_hazard",
        lambda ctx: run_vmap_plan(ctx, "vmap_hazard"),
        _hazard,
        needs_vmap_or_fallback,
        "vmap",
        "loop over slices",
        "opt-in (--hazard-probe): vmap with the batch size equal to a sample dim size, interior "
        "and last batch dims, against the loop: catches rules that find the batch by its size",
    )
)
