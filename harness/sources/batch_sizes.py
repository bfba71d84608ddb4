"""Batch sizes that avoid a source's sample dims, so a misplaced batch dim fails loudly.

The registry's own samples are proven hazard-free at the default sizes when it is built;
every other source (PyTorch's db, a user's target, a recording) gets sizes that no sample
dim uses, and every sample is then validated at them (``validate_entry``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import torch

from autograd_function_db.entry import Entry
from autograd_function_db.hazards import find_hazards, safe_batch_sizes, sample_dim_sizes
from autograd_function_db.registry import validate_entry
from harness.core.errors import UsageError
from harness.core.options import Options
from harness.sources.user_samples import base_samples


def used_dims(entries: Iterable[Entry], dtype: torch.dtype = torch.float64) -> set[int]:
    """Every dim size of every sample tensor of these entries."""
    used: set[int] = set()
    for e in entries:
        for s in e.make_samples(0, dtype):
            used |= sample_dim_sizes(s.args)
    return used


def hazard_free_options(entries: Iterable[Entry], options: Options) -> Options:
    """Options whose batch sizes no sample dim uses (batch 2 stays when it is free), with
    the choice recorded in ``batch_size_note``; every sample is then proven hazard-free
    at those sizes (``validate_entry``), so a misplaced batch dim still fails loudly."""
    entries = list(entries)
    used = used_dims(entries, options.dtype or torch.float64)
    if not used & set(options.hazard_sizes()):
        return options
    first, second = safe_batch_sizes(used, 2)
    chunk = first + second
    while chunk in used or (chunk % second) in used - {1}:
        chunk += 1
    chosen = options.replace(
        batch_sizes=(first,),
        nested_batch_sizes=(first, second),
        chunk=(chunk, second),
        batch_size_note=(
            f"batch sizes chosen to avoid the sample dims {sorted(used)}: batch {first}, "
            f"nested ({first}, {second}), chunked {chunk} in chunks of {second}"
        ),
    )
    for e in entries:
        validate_entry(e, chosen.hazard_sizes())
    return chosen


def options_for_source(name: str, entries: Iterable[Entry], options: Options) -> Options:
    """The options a run of source ``name`` should use: the registry's own samples are
    hazard-free at the defaults; another source gets batch sizes that avoid its dims."""
    if name == "afdb":
        return options
    return hazard_free_options(entries, options)


# --- one user target: sizes chosen around its samples, or refused where fixed ----------


def _chunk_for(safe: Sequence[int], used: set[int]) -> tuple[int, int]:
    """A (batch, chunk) pair whose chunks (k and the remainder) avoid every sample dim."""
    for b in safe[1:]:
        for k in safe:
            if k < b and (b % k < 2 or b % k not in used):
                return b, k
    return 2 * safe[0], safe[0]


def choose_batch_sizes(
    entry: Entry,
    options: Options,
    *,
    fixed: bool = False,
    fixed_single: bool | None = None,
    fixed_nested: bool | None = None,
) -> Options:
    """Batch sizes no sample dim uses; refuse a sample only where the caller fixed a colliding size.

    ``fixed`` fixes both the single-level and the nested sizes; ``fixed_single`` and
    ``fixed_nested`` fix one of them (the other, and the chunked sizes, are chosen).
    The choice is recorded in ``options.batch_size_note`` for the output and reports.
    """
    fixed_single = fixed if fixed_single is None else fixed_single
    fixed_nested = fixed if fixed_nested is None else fixed_nested
    base = base_samples(entry, options)
    used: set[int] = set()
    for s in base:
        used |= sample_dim_sizes(s.args)
    safe = safe_batch_sizes(used, 8)

    def refuse(sizes: Sequence[int], flag: str, suggestion: str) -> None:
        for i, s in enumerate(base):
            hz = find_hazards(s.args, sizes)
            if hz:
                h = hz[0]
                raise UsageError(
                    f"sample {i} ({s.name or 'unnamed'}): argument {h.arg} has size {h.size} at "
                    f"dim {h.dim}, equal to the batch size {h.size} you fixed with {flag}; use "
                    f"{flag} {suggestion} (no sample dimension uses it), or leave {flag} out and "
                    "let the suite choose"
                )

    if fixed_single:
        refuse(options.batch_sizes, "--batch-size", str(safe[0]))
    if fixed_nested:
        refuse(options.nested_batch_sizes, "--nested-batch-sizes", f"{safe[0]},{safe[1]}")
    changes: dict[str, Any] = {}
    said = []
    if not fixed_single and used & set(options.batch_sizes):
        changes["batch_sizes"] = (safe[0],)
        said.append(f"batch size {safe[0]}")
    if not fixed_nested and used & set(options.nested_batch_sizes):
        changes["nested_batch_sizes"] = (safe[0], safe[1])
        said.append(f"nested sizes {safe[0]},{safe[1]}")
    b, k = options.chunk
    if used & {b, k, b % k} - {0, 1}:  # a last chunk of 1 is checked by the others
        changes["chunk"] = _chunk_for(safe, used)
        said.append(f"chunked {changes['chunk'][0]} in chunks of {changes['chunk'][1]}")
    if not changes:
        return options
    defaults = Options()
    note = (
        f"sample dims use sizes {sorted(used)}, which include default batch sizes "
        f"{sorted(used & set(defaults.hazard_sizes()))}; so the suite chose {', '.join(said)}, "
        "which no sample dimension uses (a misplaced batch dim then fails loudly instead of "
        "broadcasting)"
    )
    return options.replace(batch_size_note=note, **changes)


def fitted_options(
    entry: Entry, options: Options, *, fixed_single: bool, fixed_nested: bool, spec: Any = None
) -> Options:
    """The options a user's Function runs with (``afdb check``, ``harness.check``): its
    samples proven able to call it once with no transform (else one ``UsageError``), batch
    sizes chosen around them unless fixed, and the notes on its slices and capped samples.
    ``spec``: the target spec the entry was made from, so that a process that cannot fork
    probes its samples in a fresh interpreter (``harness.sources.probe_elsewhere``)."""
    from harness.sources.user_samples import refuse_unfit_samples, samples_note, slice_notes

    refuse_unfit_samples(entry, options, spec=spec)
    options = choose_batch_sizes(
        entry, options, fixed_single=fixed_single, fixed_nested=fixed_nested
    )
    note = slice_notes(entry, base_samples(entry, options))
    if note:
        options = options.replace(slice_note=note)
    capped = samples_note(entry)
    return options.replace(samples_note=capped) if capped else options
