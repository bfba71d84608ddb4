"""An explicit registry of entries, with lookup by name and by tag.

Registration proves every sample hazard-free at the default batch sizes and
that the sample generator honours its seed (distinct data per seed, same
structure), so a bad entry is an error at import time, not a silent weak test.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import torch

from .entry import Entry, Sample
from .hazards import DEFAULT_HAZARD_SIZES, HazardousSampleError, find_hazards


class RegistryError(ValueError):
    pass


def structure_of(sample: Sample) -> tuple:
    """Shapes, dtypes and plain values: what must not change between seeds."""
    return tuple(_structure(a) for a in sample.args)


def _structure(a: object) -> tuple:
    if isinstance(a, torch.Tensor):
        return ("tensor", tuple(a.shape), a.dtype)
    if type(a) in (tuple, list) and any(isinstance(v, torch.Tensor) for v in a):  # type: ignore[attr-defined]
        return (type(a).__name__, tuple(_structure(v) for v in a))  # type: ignore[attr-defined]
    if type(a) is dict and any(isinstance(v, torch.Tensor) for v in a.values()):  # type: ignore[attr-defined]
        return ("dict", tuple((k, _structure(v)) for k, v in a.items()))  # type: ignore[attr-defined]
    return ("value", repr(a))


def validate_entry(entry: Entry, batch_sizes: Sequence[int] = DEFAULT_HAZARD_SIZES) -> None:
    """Raise if a sample is hazardous, or the generator ignores its seed or changes structure."""
    for dtype in entry.dtypes[:1]:
        first = entry.make_samples(0, dtype)
        second = entry.make_samples(1, dtype)
        if not first:
            raise RegistryError(f"entry {entry.name}: the sample generator returned no samples")
        if len(first) != len(second):
            raise RegistryError(
                f"entry {entry.name}: seed 0 gave {len(first)} samples, seed 1 gave {len(second)};"
                " the number of samples must not depend on the seed"
            )
        for i, (a, b) in enumerate(zip(first, second)):
            hazards = find_hazards(a.args, batch_sizes)
            if hazards:
                h = hazards[0]
                raise HazardousSampleError(
                    f"entry {entry.name}, sample {i} ({a.name or 'unnamed'}): {h.describe()} "
                    f"{h.size}; use sizes outside {tuple(batch_sizes)}"
                )
            if structure_of(a) != structure_of(b):
                raise RegistryError(
                    f"entry {entry.name}, sample {i}: structure differs between seeds "
                    f"({structure_of(a)} vs {structure_of(b)}); only tensor data may depend on the seed"
                )
            floats_a = [t for t in a.args if isinstance(t, torch.Tensor) and t.is_floating_point()]
            floats_b = [t for t in b.args if isinstance(t, torch.Tensor) and t.is_floating_point()]
            if floats_a and all(
                torch.equal(x, y) for x, y in zip(floats_a, floats_b) if x.numel() > 0
            ):
                raise RegistryError(
                    f"entry {entry.name}, sample {i}: seeds 0 and 1 gave identical data; the "
                    "generator must derive its tensors from the seed so batch slices are distinct"
                )


class Registry:
    """Entries by name (unique) and by tag."""

    def __init__(self, entries: Iterable[Entry] = (), *, validate: bool = True) -> None:
        self._entries: dict[str, Entry] = {}
        for e in entries:
            self.register(e, validate=validate)

    def register(self, entry: Entry, *, validate: bool = True) -> Entry:
        if entry.name in self._entries:
            raise RegistryError(f"entry {entry.name!r} is registered twice")
        if validate:
            validate_entry(entry)
        self._entries[entry.name] = entry
        return entry

    def get(self, name: str) -> Entry:
        try:
            return self._entries[name]
        except KeyError:
            raise KeyError(
                f"no entry named {name!r}; `afdb list` shows the {len(self._entries)} entries"
            ) from None

    def by_tag(self, tag: str) -> list[Entry]:
        return [e for e in self._entries.values() if tag in e.tags]

    def names(self) -> list[str]:
        return list(self._entries)

    def tags(self) -> list[str]:
        return sorted({t for e in self._entries.values() for t in e.tags})

    def __iter__(self) -> Iterator[Entry]:
        return iter(self._entries.values())

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries
