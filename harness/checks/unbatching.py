"""A known torch bug, recognised for any Function: vmap's un-batching of unbatched outputs.

torch 2.13's ``torch.func.vmap`` mishandles an output the function under vmap returns
*unbatched* (a vmap rule's out_dim ``None``: a count, a shared mask, a constant) whenever
the vmap's ``out_dims`` for it is not 0: ``_remove_batch_dim`` expands the tensor to the
batched shape without inserting the batch dim, so it raises an expand error (with a target
size such as 34359738370 for a negative out_dim, which it does not wrap), returns a
garbage shape (a 0-d output), or silently wrong values when the sizes happen to line up.
Plain torch shows it: ``vmap(lambda x: (x, torch.ones(5, 4)), out_dims=(0, 1))(torch.zeros(2))``.

A vmap case that failed is blamed on this bug (``TorchBug``: ``xfail`` with the plain-torch
repro), never on the Function, only when the whole signature holds:

1. some level's ``out_dims`` is not 0 for some output, as given (torch does not wrap a
   negative out_dim first, so -1 goes wrong even where it means position 0);
2. run again with ``out_dims=0`` at every level (where torch un-batches correctly), the
   output came back from the function under that level unbatched (what the rule said with
   ``None``; probed on the tensors themselves, so hand-written, generated and custom-op
   rules alike), at a level whose ``out_dims`` for it is not 0;
3. that run, with each batch dim moved to where the plan's ``out_dims`` put it, matches
   the loop over slices for every output (so the Function itself is right: a rule that
   returns ``None`` for an output that varies per slice, or any other wrong rule, fails
   here and keeps its own failure);
4. plain torch, with an unbatched output of that shape at that out_dim and batch size,
   also goes wrong (raises, or returns the wrong shape or values), under the case's
   ``randomness`` and, for ``grad_of_vmap`` and ``jvp_of_vmap``, under the same transform
   (``torch.func.vjp`` or ``torch.func.jvp`` of the vmap). A random Function's unbatched
   output is a draw shared by the slices (``randomness='same'``, the mode the autodiff
   checks run a random Function in): the repro draws it with ``torch.rand`` there, e.g.
   ``torch.func.jvp(lambda x: torch.func.vmap(lambda x: (x * 2, torch.rand(4, 7)),
   out_dims=(0, -1), randomness='same')(x), (torch.zeros(2),), (torch.ones(2),))`` raises
   ``Target sizes: [34359738370, 4]`` on torch 2.13.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from harness.checks.compare import compare_outputs
from harness.plans.batching import as_tuple
from harness.plans.plan import Plan, normalize_dim

_functorch = torch._C._functorch

#: The frames of torch's un-batching (torch/_functorch/vmap.py, predispatch.py).
UNBATCHING_FRAMES = frozenset({"_maybe_remove_batch_dim", "_remove_batch_dim"})


def raised_in_unbatching(exc: BaseException) -> bool:
    """True when ``exc`` was raised inside torch's un-batching of vmap's outputs."""
    import traceback

    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:  # the exception, or what a sub-check wrapped
        seen.add(id(e))
        if any(
            fr.name in UNBATCHING_FRAMES and "_functorch" in fr.filename.replace("\\", "/")
            for fr in traceback.extract_tb(e.__traceback__)
        ):
            return True
        e = e.__cause__
    return False


def _batched_here(t: Any) -> bool:
    """Whether ``t`` is batched at the vmap level now running (the top of the stack)."""
    if not isinstance(t, torch.Tensor) or not _functorch.is_batchedtensor(t):
        return False
    top = _functorch.peek_interpreter_stack()
    return top is not None and _functorch.maybe_get_level(t) == top.level()


def _probed_vmapped(
    fn: Callable[..., Any],
    plan: Plan,
    record: dict[int, list[bool]],
    randomness: str,
) -> Callable[..., Any]:
    """``fn`` under one vmap per level with ``out_dims=0``; ``record[k][j]``: output j came
    back from the function under level k batched at that level."""
    wrapped = fn
    for k in reversed(range(len(plan.levels))):
        lv = plan.levels[k]
        inner = wrapped

        def body(*args: Any, _inner: Callable[..., Any] = inner, _k: int = k) -> Any:
            out = _inner(*args)
            record[_k] = [_batched_here(o) for o in as_tuple(out)]
            return out

        wrapped = torch.func.vmap(
            body, in_dims=lv.in_dims, out_dims=0, chunk_size=lv.chunk_size, randomness=randomness
        )
    return wrapped


def _dim_at(out_dims: Any, j: int) -> Any:
    return out_dims[j] if isinstance(out_dims, (tuple, list)) else out_dims


def _moved(t: torch.Tensor, j: int, out_dims: Sequence[Any]) -> torch.Tensor:
    """An all-``out_dims=0`` result moved to the plan's out_dims, innermost level first."""
    for k in reversed(range(len(out_dims))):
        n = t.dim() - k  # the rank of what vmap at level k returned
        t = t.movedim(k, k + normalize_dim(_dim_at(out_dims[k], j), n))
    return t


#: The transforms the signature is recognised under: the vmapped call alone, or torch.func's
#: vjp / jvp of it (``grad_of_vmap``, ``jvp_of_vmap``).
TRANSFORMS = ("", "vjp", "jvp")


def _plain_call(
    make: Callable[[], torch.Tensor], out_dim: int, batch: int, randomness: str, transform: str
) -> torch.Tensor:
    """Plain torch: vmap of ``x -> (x * 2, make())`` at out_dims (0, out_dim), under
    ``transform``; the unbatched output."""

    def vmapped_fn(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.func.vmap(  # type: ignore[no-any-return]
            lambda x: (x, make()), out_dims=(0, out_dim), randomness=randomness
        )(x)

    x = torch.zeros(batch)
    if transform == "vjp":
        return torch.func.vjp(vmapped_fn, x)[0][1]  # type: ignore[no-any-return]
    if transform == "jvp":
        return torch.func.jvp(vmapped_fn, (x,), (torch.ones(batch),))[0][1]  # type: ignore[no-any-return]
    return vmapped_fn(x)[1]


def _repro(const: str, out_dim: int, batch: int, randomness: str, transform: str) -> str:
    mode = f", randomness={randomness!r}" if randomness != "error" else ""
    vm = f"torch.func.vmap(lambda x: (x, {const}), out_dims=(0, {out_dim}){mode})"
    if transform == "vjp":
        return f"torch.func.vjp(lambda x: {vm}(x), torch.zeros({batch}))[0][1].shape"
    if transform == "jvp":
        return (
            f"torch.func.jvp(lambda x: {vm}(x), (torch.zeros({batch}),), "
            f"(torch.ones({batch}),))[0][1].shape"
        )
    return f"{vm}(torch.zeros({batch}))[1].shape"


def _plain_torch(
    shape: Sequence[int],
    batch: int,
    out_dim: int,
    randomness: str = "error",
    transform: str = "",
) -> tuple[str, str]:
    """(what plain torch did wrong, the repro) for an unbatched output of ``shape`` at
    ``out_dim`` under a batch of ``batch``; ("", repro) when plain torch got it right.
    Under ``randomness`` 'same' the output is a draw shared by the slices (``torch.rand``,
    the same numbers as an unbatched call from the same seed), as a random Function's."""
    numel = 1
    for s in shape:
        numel *= s
    random = randomness == "same"
    if random:
        const = f"torch.rand({', '.join(str(s) for s in shape)})"
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            value = torch.rand(tuple(shape))
    else:
        const = f"torch.arange({numel}.).reshape({tuple(shape)!r})"
        value = torch.arange(float(numel)).reshape(tuple(shape))

    def make() -> torch.Tensor:
        return torch.rand(tuple(shape)) if random else value.clone()

    d = normalize_dim(out_dim, len(shape) + 1)
    want = value.unsqueeze(d).expand(*value.shape[:d], batch, *value.shape[d:])
    # vmap alone first: where it returns a garbage shape (an expanded view, no memory), the
    # transform would materialise it (hundreds of GB): that repro is not run, the vmap's is.
    for under in ("", transform) if transform else ("",):
        repro = _repro(const, out_dim, batch, randomness, under)
        try:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(0)
                got = _plain_call(make, out_dim, batch, randomness, under)
        except Exception as e:
            if under != transform:
                continue  # it raises: so does the transform's (run next, the case's repro)
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            return f"raises {type(e).__name__}: {first[:200]}", repro
        if got.shape != want.shape:
            return f"returns shape {tuple(got.shape)} instead of {tuple(want.shape)}", repro
        if not torch.equal(got, want):
            return "returns the right shape with the wrong values", repro
    return "", repro


def unbatching_bug(
    fn: Callable[..., Any],
    plan: Plan,
    out_dims: Sequence[Any],
    make_args: Callable[[], Sequence[Any]],
    expected: Sequence[Any],
    *,
    rtol: float,
    atol: float,
    randomness: str = "error",
    wrap: Callable[[Callable[..., Any]], Callable[..., Any]] | None = None,
    transform: str = "",
) -> str | None:
    """The ``xfail`` message when a failed vmap case is this torch bug (module docstring),
    else None. ``fn`` returns the Function's flat outputs; ``make_args`` builds fresh
    batched arguments; ``expected`` is the loop reference at ``out_dims``; ``wrap`` (a
    random entry's reseeding) wraps the vmapped call; ``transform`` ("vjp", "jvp"): the
    case ran torch.func's vjp or jvp of the vmap, and plain torch is run under it too."""
    if transform not in TRANSFORMS:
        raise ValueError(f"transform {transform!r}: one of {TRANSFORMS}")
    # torch compares the out_dim as given (it does not wrap -1 first): -1 for a 1-d result,
    # position 0, goes wrong too
    if all(
        all(not isinstance(e, torch.Tensor) or _dim_at(od, j) == 0 for j, e in enumerate(expected))
        for od in out_dims
    ):
        return None  # every out_dim is 0: the bug cannot be it
    record: dict[int, list[bool]] = {}
    call = _probed_vmapped(fn, plan, record, randomness)
    if wrap is not None:
        call = wrap(call)
    try:
        zero = as_tuple(call(*make_args()))
    except Exception:
        return None  # the Function fails without the out_dims too: its own failure
    if len(zero) != len(expected) or len(record) != len(plan.levels):
        return None
    affected: list[tuple[int, int]] = []
    for k, od in enumerate(out_dims):
        for j, e in enumerate(expected):
            if not isinstance(e, torch.Tensor) or j >= len(record[k]) or record[k][j]:
                continue
            if _dim_at(od, j) != 0:
                affected.append((k, j))
    if not affected:
        return None
    moved = tuple(
        _moved(z, j, out_dims) if isinstance(z, torch.Tensor) else z for j, z in enumerate(zero)
    )
    if compare_outputs(moved, tuple(expected), rtol=rtol, atol=atol, label="out_dims=0, moved"):
        return None  # wrong with out_dims=0 too: the Function's (its rule's) failure
    k, j = affected[0]
    z = zero[j]
    shape = tuple(z.shape[k + 1 :])
    batch = plan.levels[k].batch_size
    out_dim = _dim_at(out_dims[k], j)
    wrong, repro = _plain_torch(shape, batch, out_dim, randomness, transform)
    if not wrong:
        return None  # plain torch un-batches this shape right: not this bug
    where = f" at vmap level {k}" if len(plan.levels) > 1 else ""
    version = torch.__version__.split("+")[0]
    under = f"torch.func.{transform} of " if transform else ""
    return (
        f"torch {version} bug, not the Function's: {under}vmap with out_dims={out_dim} for output "
        f"{j}, which the function under vmap returned unbatched{where} (a vmap rule's "
        "out_dim None, or a tensor that depends on no batched input), goes wrong in torch's "
        "un-batching (_remove_batch_dim expands it "
        "without inserting the batch dim); with out_dims=0 at every level and the batch dims "
        "moved where the plan puts them, every output matches the loop over slices, so the "
        f"Function is right. Plain torch {wrong}: {repro}"
    )
