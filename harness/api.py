"""The Python API: ``check(function, samples)`` and ``assert_conforms(...)``.

A user's Function becomes an ``Entry`` (capabilities read from the class,
overridable by keyword) and runs through the same runner as the database.
User samples are rarely hazard-free (3x3 rotations, pairs of points), so
unless the caller fixes batch sizes, the harness picks sizes that no sample
dimension uses and says so in the result.
"""

from __future__ import annotations

import dataclasses
import inspect
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch

from autograd_function_db.entry import (
    GRADIENT_CUSTOM,
    GRADIENT_DERIVATIVE,
    Capabilities,
    Entry,
    Sample,
    Tolerances,
)
from autograd_function_db.hazards import find_hazards, safe_batch_sizes, sample_dim_sizes

from .batching import derive_seed
from .metadata import run_metadata
from .options import DTYPES, Options
from .results import RunResult
from .runner import run_entries


class UsageError(ValueError):
    """Bad input from the user: the message is one line naming what is wrong and how to fix it."""


def function_class(target: Any) -> type:
    """The autograd.Function subclass behind ``target`` (the class, or a callable carrying one)."""
    if isinstance(target, type) and issubclass(target, torch.autograd.Function):
        return target
    for attr in ("autograd_function", "function", "__self__"):
        cls = getattr(target, attr, None)
        if isinstance(cls, type) and issubclass(cls, torch.autograd.Function):
            return cls
    raise UsageError(
        f"{target!r} is not a torch.autograd.Function subclass; pass the class, or a callable "
        "with an `autograd_function` attribute naming it"
    )


def _accepts_seed(fn: Callable[..., Any]) -> bool:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return any(
        p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL) or p.name == "seed"
        for p in params.values()
    )


def _as_samples(items: Iterable[Any]) -> list[Sample]:
    out = []
    for i, s in enumerate(items):
        if isinstance(s, Sample):
            out.append(s)
        elif isinstance(s, (tuple, list)):
            out.append(Sample(tuple(s), f"sample{i}"))
        else:
            out.append(Sample((s,), f"sample{i}"))
    return out


def _perturbed(sample: Sample, seed: int) -> Sample:
    """Distinct data for a slice when the user's generator takes no seed.

    Floating tensors get seeded noise of their own scale; integer tensors (indices)
    and plain values are kept, so they stay valid.
    """
    gen = torch.Generator().manual_seed(seed)
    args = []
    for a in sample.args:
        if isinstance(a, torch.Tensor) and (a.is_floating_point() or a.is_complex()):
            noise = torch.randn(a.shape, generator=gen, dtype=torch.float64)
            scale = float(a.detach().abs().mean()) if a.numel() else 1.0
            args.append((a.detach().double() + 0.1 * (scale or 1.0) * noise).to(a.dtype))
        else:
            args.append(a)
    return Sample(tuple(args), sample.name)


def user_sample_fn(samples: Any) -> Callable[[int, torch.dtype, str], list[Sample]]:
    """Adapt a user's sample source into the registry's ``fn(seed, dtype, device)`` form."""
    if isinstance(samples, (list, tuple)):
        fixed = _as_samples(samples)
        return lambda seed, dtype, device: [_perturbed(s, seed) if seed else s for s in fixed]
    if not callable(samples):
        raise UsageError(
            f"samples must be a callable returning argument tuples or Sample objects, got "
            f"{type(samples).__name__}"
        )
    if _accepts_seed(samples):

        def seeded(seed: int, dtype: torch.dtype, device: str) -> list[Sample]:
            return _as_samples(samples(seed))

        return seeded

    def unseeded(seed: int, dtype: torch.dtype, device: str) -> list[Sample]:
        base = _as_samples(samples())
        return [_perturbed(s, derive_seed("perturb", seed)) if seed else s for s in base]

    return unseeded


def make_entry(
    function: Any,
    samples: Any,
    *,
    name: str | None = None,
    gradient: str = GRADIENT_DERIVATIVE,
    tolerances: Tolerances | None = None,
    **capabilities: Any,
) -> Entry:
    cls = function_class(function)
    if gradient not in (GRADIENT_DERIVATIVE, GRADIENT_CUSTOM):
        raise UsageError(f"gradient must be 'derivative' or 'custom', got {gradient!r}")
    cap_fields = {f.name for f in dataclasses.fields(Capabilities)}
    unknown = set(capabilities) - cap_fields
    if unknown:
        raise UsageError(
            f"unknown capability {sorted(unknown)[0]!r}; known: {', '.join(sorted(cap_fields))}"
        )
    caps = Capabilities.from_function(cls, **capabilities)
    op = None if function is cls else function
    return Entry(
        name=name or cls.__name__,
        function=cls,
        samples=user_sample_fn(samples),
        op=op,
        caps=caps,
        tolerances=tolerances or Tolerances(),
        gradient=gradient,
    )


def choose_batch_sizes(entry: Entry, options: Options, *, fixed: bool) -> Options:
    """Batch sizes no sample dim uses; with ``fixed`` sizes, refuse a colliding sample instead."""
    base = entry.make_samples(0, options.dtype, options.device)
    if not base:
        raise UsageError(f"the samples for {entry.name} are empty; return at least one sample")
    used: set[int] = set()
    for s in base:
        used |= sample_dim_sizes(s.args)
    if fixed:
        for i, s in enumerate(base):
            hz = find_hazards(s.args, options.hazard_sizes())
            if hz:
                h = hz[0]
                ok = safe_batch_sizes(used, 1)[0]
                raise UsageError(
                    f"sample {i} ({s.name or 'unnamed'}): argument {h.arg} has size {h.size} at dim "
                    f"{h.dim}, equal to batch size {h.size}; use --batch-size {ok} (a size no "
                    "sample dimension uses) or let the suite choose"
                )
        return options
    if not any(find_hazards(s.args, options.hazard_sizes()) for s in base):
        return options
    safe = safe_batch_sizes(used, 6)
    single, nested = safe[0], (safe[0], safe[1])
    chunk = None
    for b in safe[2:]:
        for k in safe:
            if k < b and (b % k == 0 or b % k in safe):
                chunk = (b, k)
                break
        if chunk:
            break
    chunk = chunk or (2 * safe[0], safe[0])
    note = (
        f"sample dims use sizes {sorted(used)}, so the suite chose batch size {single}, "
        f"nested sizes {nested} and chunked {chunk[0]} in chunks of {chunk[1]} (no sample "
        "dimension equals a batch size, so a misplaced batch dim fails loudly)"
    )
    return options.replace(
        batch_sizes=(single,), nested_batch_sizes=nested, chunk=chunk, batch_size_note=note
    )


def check(
    function: Any,
    samples: Any,
    *,
    checks: Sequence[str] | None = None,
    batch_sizes: Sequence[int] | None = None,
    nested_batch_sizes: Sequence[int] | None = None,
    seed: int = 0,
    dtype: torch.dtype | str = torch.float32,
    device: str = "cpu",
    name: str | None = None,
    gradient: str = GRADIENT_DERIVATIVE,
    tolerances: Tolerances | None = None,
    timeout_s: float | None = None,
    target: str | None = None,
    **capabilities: Any,
) -> RunResult:
    """Run the checks on one Function and return the results (never raises for a bad Function).

    ``capabilities`` override what is read from the class (``inplace_args=(0,)``,
    ``nondiff_outputs=(1,)``, ``double_backward=False``, ``randomness=True``...).
    """
    if isinstance(dtype, str):
        if dtype not in DTYPES:
            raise UsageError(f"unknown dtype {dtype!r}; use one of {', '.join(DTYPES)}")
        dtype = DTYPES[dtype]
    entry = make_entry(
        function, samples, name=name, gradient=gradient, tolerances=tolerances, **capabilities
    )
    options = Options(
        checks=tuple(checks) if checks else None,
        seed=seed,
        dtype=dtype,
        device=device,
        timeout_s=timeout_s,
    )
    if batch_sizes is not None:
        if not batch_sizes or any(int(b) < 2 for b in batch_sizes):
            raise UsageError(f"batch sizes must be integers >= 2, got {list(batch_sizes)}")
        options = options.replace(batch_sizes=tuple(int(b) for b in batch_sizes))
    if nested_batch_sizes is not None:
        options = options.replace(nested_batch_sizes=tuple(int(b) for b in nested_batch_sizes))
    fixed = batch_sizes is not None or nested_batch_sizes is not None
    options = choose_batch_sizes(entry, options, fixed=fixed)
    started = time.time()
    cases = run_entries([entry], options, target=target)
    return RunResult(cases, run_metadata(options, started=started, source="user", target=target))


def format_failures(result: RunResult) -> str:
    lines = [f"{len(result.failures())} of {len(result.cases)} cases do not conform:"]
    for c in result.failures():
        lines.append(f"- {c.id} [{c.status}]: {c.message}")
        if c.repro:
            lines.append(f"  reproduce: {c.repro}")
    return "\n".join(lines)


def assert_conforms(function: Any, samples: Any, **options: Any) -> RunResult:
    """Run ``check`` and raise AssertionError listing every failing case with its repro command."""
    result = check(function, samples, **options)
    if not result.ok:
        raise AssertionError(format_failures(result))
    return result
