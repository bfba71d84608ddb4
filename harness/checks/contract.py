"""The contract check: intercept the vmap rule's raw return and hold it to the rule's contract.

torch itself only checks that the rule returns a 2-tuple whose out_dims match
the outputs' structure; a wrong out_dim, a wrong batch size, ``None`` for a
batched output, a dropped output or a dtype change all pass silently. Here the
rule's return is recorded on every call (nested levels and chunks included)
and validated, so the failure names the Function, the output and what the rule
returned against what it should have.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.utils._pytree as pytree

from autograd_function_db.entry import VMAP_GENERATED, VMAP_NONE, Entry
from harness.checks.catalogue import (
    CaseContext,
    CheckFailure,
    CheckSpec,
    TorchBug,
    needs_vmap,
    register,
)
from harness.checks.compare import compare_tensors
from harness.checks.unbatching import raised_in_unbatching, unbatching_bug
from harness.core.options import Options
from harness.plans.batching import as_tuple, concrete_out_dims, loop_reference, vmapped
from harness.plans.plan import ArgLayout, Plan, nested_plans, single_level_plans
from harness.plans.pytrees import (
    FlatCall,
    arg_structure,
    describe_structure,
    dim_at,
    fmt,
    is_flat,
    leaf_names,
    leaves,
    map_leaves,
    output_structure,
)
from harness.plans.slices import build_batched_args, seeded_call


@dataclass
class RuleCall:
    """One call of a vmap rule: what it received and what it returned."""

    batch_size: int
    in_dims: tuple[Any, ...]
    returned: Any
    #: Per-slice outputs of forward, when the rule's arguments were plain tensors.
    per_slice: tuple[Any, ...] | None = None
    #: Problems with the in_dims the rule received (tree structure, ranges).
    received: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def _is_plain(a: Any) -> bool:
    return all(
        not isinstance(v, torch.Tensor) or not torch._C._functorch.is_batchedtensor(v)
        for _, v in leaves(a)
    )


def _slice0(a: Any, d: Any) -> Any:
    """Slice 0 of every batched tensor leaf of argument ``a`` (``d``: its in_dims pytree)."""

    def one(keys: tuple[Any, ...], v: Any) -> Any:
        if not isinstance(v, torch.Tensor):
            return v
        dim = dim_at(d, keys)
        v = v.detach().clone()
        return v.select(dim, 0) if isinstance(dim, int) else v

    return map_leaves(a, one)


def in_dims_problems(where: str, in_dims: Any, args: Sequence[Any]) -> list[str]:
    """The in_dims a rule receives must mirror its arguments: the same tree structure, None at
    plain values, a dim in range (or None) at every tensor leaf."""
    if arg_structure(tuple(in_dims)) != arg_structure(tuple(args)):
        return [
            f"{where}: the rule received in_dims {fmt(tuple(in_dims))}, whose tree structure "
            f"differs from its arguments' {fmt(arg_structure(tuple(args)))}"
        ]
    problems = []
    for (keys, d), (_, v) in zip(leaves(tuple(in_dims)), leaves(tuple(args))):
        at = f"argument {keys[0]}" + "".join(f"[{k!r}]" for k in keys[1:])
        if isinstance(v, torch.Tensor):
            if d is not None and (isinstance(d, bool) or not isinstance(d, int)):
                problems.append(f"{where}: in_dims of {at} is {d!r}, expected an int or None")
            elif isinstance(d, int) and not 0 <= d < max(v.dim(), 1):
                problems.append(
                    f"{where}: in_dims of {at} is {d}, outside [0, {v.dim()}) for its "
                    f"shape {tuple(v.shape)}"
                )
        elif d is not None:
            problems.append(f"{where}: in_dims of {at} (a plain value) is {d!r}, expected None")
    return problems


def _recorder(original: Any, forward: Any, calls: list[RuleCall]) -> Any:
    """A vmap rule that records what ``original`` receives and returns."""

    def recording_rule(info: Any, in_dims: Any, *args: Any) -> Any:
        per_slice = None
        if all(_is_plain(a) for a in args) and not torch._C._functorch.peek_interpreter_stack():
            with torch.no_grad(), torch.random.fork_rng(devices=[]):
                try:
                    per_slice = as_tuple(forward(*(_slice0(a, d) for a, d in zip(args, in_dims))))
                except Exception:
                    per_slice = None
        received = in_dims_problems(
            f"vmap rule (info.batch_size={info.batch_size})", tuple(in_dims), args
        )
        returned = original(info, in_dims, *args)
        calls.append(RuleCall(info.batch_size, tuple(in_dims), returned, per_slice, received))
        return returned

    return recording_rule


@contextlib.contextmanager
def intercept_vmap_rule(function: type) -> Iterator[list[RuleCall]]:
    """Record every call of ``function.vmap`` while the block runs; restore it afterwards."""
    calls: list[RuleCall] = []
    had_own = "vmap" in function.__dict__
    saved = function.__dict__.get("vmap")
    original = function.vmap  # type: ignore[attr-defined]
    recording_rule = _recorder(original, function.forward, calls)  # type: ignore[attr-defined]
    function.vmap = staticmethod(recording_rule)  # type: ignore[attr-defined]
    try:
        yield calls
    finally:
        if had_own:
            function.vmap = saved  # type: ignore[attr-defined]
        else:
            del function.vmap  # type: ignore[attr-defined]


@contextlib.contextmanager
def intercept_custom_op_rule(op: Any) -> Iterator[list[RuleCall]]:
    """Record every call of the rule a torch.library custom op got from ``register_vmap``.

    torch's batching kernel for the op looks the rule up in ``op._vmap_fn`` on every call,
    so swapping that attribute for the block intercepts every level and chunk.
    """
    calls: list[RuleCall] = []
    original = op._vmap_fn
    op._vmap_fn = _recorder(original, op, calls)
    try:
        yield calls
    finally:
        op._vmap_fn = original


def intercept_entry_rule(entry: Entry) -> contextlib.AbstractContextManager[list[RuleCall]]:
    if entry.custom_op is not None:
        return intercept_custom_op_rule(entry.custom_op)
    return intercept_vmap_rule(entry.function)


def validate_call(
    name: str,
    call: RuleCall,
    reference: Sequence[Any],
    returned_tuple: bool,
    spec: pytree.TreeSpec | None = None,
) -> list[str]:
    """Every way this call's return breaks the rule contract (an empty list when it conforms).

    ``reference`` holds the leaves of the Function's per-slice outputs (from the loop), which
    fix the number of outputs, their dtypes and devices; ``spec``, when given, is forward's
    output structure (tuples, lists, dicts), which the rule's outputs must have.
    """
    ret = call.returned
    where = f"vmap rule of {name} (info.batch_size={call.batch_size}, in_dims={call.in_dims})"
    if call.received:
        return list(call.received)
    if not isinstance(ret, tuple) or len(ret) != 2:
        kind = f"a tuple of {len(ret)}" if isinstance(ret, tuple) else type(ret).__name__
        return [f"{where} returned {kind}; it must return a 2-tuple (outputs, out_dims)"]
    outputs, out_dims = ret
    outs = as_tuple(outputs)
    names = leaf_names(outputs)
    nested = not is_flat(outputs) or (spec is not None and not _flat_spec(spec))
    if nested and spec is not None and output_structure(outputs) != spec:
        return [
            f"{where} returned outputs structured as {describe_structure(output_structure(outputs))}; "
            f"forward returns {describe_structure(spec)}"
        ]
    if isinstance(outputs, (tuple, list)) != returned_tuple or len(outs) != len(reference):
        return [
            f"{where} returned {len(outs)} output(s)"
            f"{' as a tuple' if isinstance(outputs, (tuple, list)) else ''}; forward returns "
            f"{len(reference)}{' as a tuple' if returned_tuple else ''}"
        ]
    if nested:
        flat_dims = pytree._broadcast_to_and_flatten(out_dims, output_structure(outputs))
        if flat_dims is None:
            return [
                f"{where} returned out_dims {out_dims!r}, which does not match the outputs' "
                f"structure {describe_structure(output_structure(outputs))}: give one int or None "
                "per output, or per leaf in the same structure"
            ]
        return _leaf_problems(where, call, outs, list(flat_dims), reference, names)
    if isinstance(out_dims, (tuple, list)):
        if not isinstance(outputs, (tuple, list)):
            return [
                f"{where} returned out_dims {out_dims!r} (a tuple) for a single tensor output; use an int or None"
            ]
        if len(out_dims) != len(outs):
            return [
                f"{where} returned {len(out_dims)} out_dims for {len(outs)} outputs; "
                "give one int or None per output"
            ]
        dims = list(out_dims)
    else:
        dims = [out_dims] * len(outs)
    return _leaf_problems(where, call, outs, dims, reference, names)


def _flat_spec(spec: pytree.TreeSpec) -> bool:
    return spec.is_leaf() or all(child.is_leaf() for child in spec.children())


def _leaf_problems(
    where: str,
    call: RuleCall,
    outs: Sequence[Any],
    dims: Sequence[Any],
    reference: Sequence[Any],
    names: Sequence[str],
) -> list[str]:
    """The contract of each output leaf against its out_dim and forward's per-slice output."""
    problems = []
    for k, (out, dim, ref) in enumerate(zip(outs, dims, reference)):
        label = f"{where}, {names[k] if k < len(names) else f'output {k}'}"
        if dim is not None and (isinstance(dim, bool) or not isinstance(dim, int)):
            problems.append(
                f"{label}: out_dim {dim!r} is a {type(dim).__name__}; it must be an int or None"
            )
            continue
        if not isinstance(out, torch.Tensor):
            if dim is not None:
                problems.append(f"{label}: a non-tensor output needs out_dim None, got {dim}")
            continue
        if isinstance(ref, torch.Tensor):
            if out.dtype != ref.dtype:
                problems.append(f"{label}: dtype {out.dtype}, forward gives {ref.dtype}")
            if out.device != ref.device:
                problems.append(f"{label}: device {out.device}, forward gives {ref.device}")
        per_slice = call.per_slice[k] if call.per_slice and k < len(call.per_slice) else None
        if dim is None:
            if isinstance(per_slice, torch.Tensor) and out.shape != per_slice.shape:
                problems.append(
                    f"{label}: out_dim None but shape {tuple(out.shape)}, while forward gives "
                    f"{tuple(per_slice.shape)} per slice: a batched output needs the index of its "
                    "batch dim as out_dim"
                )
            continue
        if not -out.dim() <= dim < max(out.dim(), 1) or out.dim() == 0:
            problems.append(
                f"{label}: out_dim {dim} is out of range for an output of {out.dim()} dims "
                f"(shape {tuple(out.shape)})"
            )
            continue
        size = out.shape[dim]
        if size != call.batch_size:
            problems.append(
                f"{label}: size {size} at out_dim {dim} (shape {tuple(out.shape)}), "
                f"info.batch_size {call.batch_size}"
                + (
                    f": the batch dim seems to be at dim {list(out.shape).index(call.batch_size)}"
                    if call.batch_size in out.shape
                    else ": the rule returned a wrong batch size"
                )
            )
            continue
        if isinstance(per_slice, torch.Tensor):
            rest = tuple(s for i, s in enumerate(out.shape) if i != dim % out.dim())
            if rest != tuple(per_slice.shape):
                problems.append(
                    f"{label}: removing out_dim {dim} from shape {tuple(out.shape)} leaves {rest}, "
                    f"forward gives {tuple(per_slice.shape)} per slice"
                )
    return problems


def run_contract(ctx: CaseContext) -> str | None:
    plan = ctx.plan
    assert plan is not None
    entry = ctx.entry
    fn = FlatCall(entry.call)
    reference, _ = loop_reference(fn, plan, ctx.slices, reuse=("forward", entry.call))
    # One slice's outputs fix count, structure, dtypes and devices.
    one = entry.call(*ctx.slices.args())
    per_slice_ref, spec = as_tuple(one), output_structure(one)
    returned_tuple = isinstance(one, (tuple, list))
    out_dims = concrete_out_dims(plan, reference, True)
    args = build_batched_args(plan, ctx.slices)
    error: BaseException | None = None
    failed_mode = ""
    # A random entry's rule raises under torch's default randomness="error" (as it must):
    # its contract is checked under the modes in which it draws.
    modes = ("same", "different") if entry.caps.randomness else ("error",)
    results: list[tuple[str, Any]] = []
    with intercept_entry_rule(entry) as calls:
        for mode in modes:
            try:
                with torch.random.fork_rng(devices=[]):
                    results.append((mode, vmapped(fn, plan, out_dims, randomness=mode)(*args)))
            except Exception as e:  # the contract explains the error, if it can
                error, failed_mode = e, mode
                break
    problems = [
        p
        for c in calls
        for p in validate_call(entry.function_name, c, per_slice_ref, returned_tuple, spec)
    ]
    if problems:
        unique = list(dict.fromkeys(problems))
        raise CheckFailure(f"contract {plan.id}: " + "; ".join(unique))
    if error is not None:
        if failed_mode in ("error", "same") and raised_in_unbatching(error):
            # the rule kept its contract; vmap then failed un-batching its outputs
            _torch_bug(ctx, fn, plan, out_dims, reference, failed_mode)
        raise error
    if not calls:
        raise CheckFailure(
            f"contract {plan.id}: the vmap rule of {entry.function_name} was never called, "
            "although an argument is batched; is the entry's op really this Function?"
        )
    for mode, result in results:
        wrong = returned_outputs(as_tuple(result), reference, fn.names(), exact=mode == "error")
        if wrong:
            if mode in ("error", "same"):
                _torch_bug(ctx, fn, plan, out_dims, reference, mode)
            where = f", randomness='{mode}'" if entry.caps.randomness else ""
            raise CheckFailure(
                f"contract {plan.id}{where}: the rule kept its contract on every call, but what "
                "vmap returned differs from the loop over slices: "
                + "; ".join(wrong)
                + f" ({OUTPUTS_COMPARED})"
            )
    return CONTRACT_REFERENCE


#: What the contract compares of the outputs vmap returns (the vmap checks compare the rest).
OUTPUTS_COMPARED = (
    "the contract compares every output's shape and dtype, and integer and bool outputs' "
    "values exactly; floating values are the vmap checks'"
)
CONTRACT_REFERENCE = (
    "vmap rule contract; every output vmap returns: shape, dtype, integer and bool values "
    "(floating values: the vmap checks)"
)


def returned_outputs(
    actual: Sequence[Any], reference: Sequence[Any], names: Sequence[str], *, exact: bool
) -> list[str]:
    """How the outputs vmap returned differ from the loop reference in count, shape or dtype,
    or (``exact``) in the values of an integer or bool output."""
    if len(actual) != len(reference):
        return [f"{len(actual)} outputs, the loop gives {len(reference)}"]
    problems = []
    for k, (a, e) in enumerate(zip(actual, reference)):
        name = names[k] if k < len(names) else f"output {k}"
        if not isinstance(e, torch.Tensor):
            continue
        if not isinstance(a, torch.Tensor):
            problems.append(f"{name}: {type(a).__name__}, the loop gives a tensor")
        elif a.shape != e.shape:
            problems.append(f"{name}: shape {tuple(a.shape)}, the loop gives {tuple(e.shape)}")
        elif a.dtype != e.dtype:
            problems.append(f"{name}: dtype {a.dtype}, the loop gives {e.dtype}")
        elif exact and not (e.is_floating_point() or e.is_complex()):
            message = compare_tensors(a, e, rtol=0.0, atol=0.0, label=name)
            if message:
                problems.append(message)
    return problems


def _torch_bug(
    ctx: CaseContext, fn: Any, plan: Plan, out_dims: Any, reference: Any, mode: str
) -> None:
    """Raise ``TorchBug`` when vmap's failure after a rule that kept its contract is torch's
    un-batching bug (``harness.checks.unbatching``); a random entry is compared under
    randomness='same' with a loop reseeded to one seed per slice."""
    rtol, atol = ctx.tolerances
    wrap = None
    if mode == "same":
        seed = int(ctx.generator("rng").initial_seed())
        reference, _ = loop_reference(seeded_call(fn, seed), plan, ctx.slices)

        def wrap(call: Any) -> Any:
            return seeded_call(call, seed)

    message = unbatching_bug(
        fn,
        plan,
        out_dims,
        lambda: build_batched_args(plan, ctx.slices),
        reference,
        rtol=rtol,
        atol=atol,
        randomness=mode,
        wrap=wrap,
    )
    if message:
        raise TorchBug(f"contract {plan.id}: the rule keeps its contract; {message}")


def _supported(entry: Entry) -> str | None:
    op = entry.custom_op
    if op is not None and entry.caps.vmap != VMAP_NONE and not hasattr(op, "_vmap_fn"):
        return (
            f"op {entry.function_name} was not made by torch.library.custom_op, so its "
            "vmap rule cannot be intercepted (the vmap checks still test its results)"
        )
    if entry.custom_op is not None and entry.caps.vmap == VMAP_NONE:
        return (
            f"custom op {entry.function_name} has no vmap rule (no torch.library.register_vmap): "
            "vmap falls back to a slow per-slice loop, so there is no rule to validate "
            "(the vmap checks report the fallback)"
        )
    reason = needs_vmap(entry)
    if reason:
        return reason
    if entry.caps.vmap == VMAP_GENERATED:
        return (
            "generate_vmap_rule=True: torch writes the rule, so there is no raw return to "
            "validate (the vmap checks still test its results)"
        )
    return None


def _plans(layout: ArgLayout, options: Options) -> list[Plan | None]:
    plans: list[Plan | None] = []
    for b in options.batch_sizes:
        plans.extend(single_level_plans(layout, b, cap=options.plan_cap, seed=options.seed))
    plans.extend(
        nested_plans(layout, options.nested_batch_sizes, cap=options.plan_cap, seed=options.seed)
    )
    return plans


register(
    CheckSpec(
        "contract",
        run_contract,
        _plans,
        _supported,
        "vmap",
        "vmap rule contract",
        "the rule's raw return: 2-tuple, out_dims structure and range, batch size at out_dim, "
        "output count, dtypes and devices as forward",
    )
)
