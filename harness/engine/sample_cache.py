"""The per-entry sample cache: an entry's base samples drawn once per run, the per-slice draws
its cases share, and whether a sample can be compared at all.

Every step after it reads samples from here (case enumeration, the runner, the repro script,
the probe of a user's samples), so the same seed gives the same tensors wherever a case is
rebuilt.
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from autograd_function_db.entry import Entry, Sample
from harness.checks.compare import nonfinite_outputs
from harness.core.options import Options
from harness.plans.pytrees import leaves
from harness.plans.slices import SliceSource, sample_seed


class EntryData:
    """One entry's samples for a run: the base samples and cached per-slice draws."""

    def __init__(self, entry: Entry, options: Options) -> None:
        self.entry = entry
        self.options = options
        self._draw = functools.lru_cache(maxsize=256)(self._draw_uncached)
        self._nonfinite: dict[int, str] = {}
        self._slices: dict[int, SliceSource] = {}
        self._base_seed: int | None = None
        # recorded samples: the base slice is the call as made (harness.recorded.samples)
        tell = getattr(entry.samples, "slice_seeds", None)
        if callable(tell):
            tell(self.seed_parts)

    def _draw_uncached(self, seed: int) -> tuple[Sample, ...]:
        return tuple(self.entry.make_samples(seed, self.options.dtype, self.options.device))

    @property
    def seed_parts(self) -> tuple[object, ...]:
        return (self.options.seed, self.entry.name)

    def base_samples(self) -> tuple[Sample, ...]:
        if self._base_seed is None:
            self._base_seed = sample_seed(*self.seed_parts, "slice", ())
        return self._draw(self._base_seed)

    def slices(self, sample_index: int) -> SliceSource:
        """The sample's slice source, shared by its cases: it hands out copies only, so a
        Function that modifies its inputs never changes what a later case receives."""
        if sample_index not in self._slices:
            self._slices[sample_index] = SliceSource(self._draw, sample_index, self.seed_parts)
        return self._slices[sample_index]

    def nonfinite(self, sample_index: int) -> str:
        """The advice when every comparison of this sample would be vacuous ("" if none):
        its tensors have no elements, or the plain call on it gives NaN or inf (NaN matches
        NaN) or outputs without elements. None of its cases may pass. A call that raises is
        left to the checks, which report it.
        """
        if sample_index not in self._nonfinite:
            sample = self.base_samples()[sample_index]
            self._nonfinite[sample_index] = empty_sample(sample) or _nonfinite_call(
                self.entry, sample
            )
        return self._nonfinite[sample_index]


#: The advice for a sample whose tensors have no elements.
EMPTY_SAMPLE = (
    "the sample has no elements: every comparison would pass (there is nothing to compare); "
    "give every floating tensor of it at least one element"
)
EMPTY_OUTPUTS = (
    "the Function's outputs on this sample have no elements: every comparison would pass "
    "(there is nothing to compare); choose a sample whose outputs have elements"
)


def _tensors(tree: Any) -> list[torch.Tensor]:
    return [v for _, v in leaves(tree) if isinstance(v, torch.Tensor)]


def _floating_first(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """The floating (complex) tensors when there are any (those are compared), else all."""
    floating = [t for t in tensors if t.is_floating_point() or t.is_complex()]
    return floating or tensors


def empty_sample(sample: Sample) -> str:
    """``EMPTY_SAMPLE`` when the sample's (floating) tensors all have no elements, else ""."""
    tensors = _floating_first([t for a in sample.args for t in _tensors(a)])
    return EMPTY_SAMPLE if tensors and all(t.numel() == 0 for t in tensors) else ""


def _nonfinite_call(entry: Entry, sample: Sample) -> str:
    args = [a.detach().clone() if isinstance(a, torch.Tensor) else a for a in sample.args]
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            out = entry.call(*args)
    except Exception:
        return ""
    outputs = _floating_first(_tensors(out))
    if outputs and all(t.numel() == 0 for t in outputs):
        return EMPTY_OUTPUTS
    return nonfinite_outputs(out)
