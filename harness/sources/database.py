"""The database sources: this suite's registry and PyTorch's db, by name.

* ``"afdb"``: this suite's own registry (``autograd_function_db.REGISTRY``), whose samples
  are proven hazard-free at the default batch sizes when it is built.
* ``"pytorch"``: PyTorch's own ``torch.testing._internal.autograd_function_db``, adapted
  at run time (``harness.sources.pytorch_db``).

Hazards. PyTorch's samples use dims such as 3 (a 3x5 input), which collide with the
default batch sizes (2 outside, 3 inside; chunks of 3). The adapter therefore registers
its entries with ``Registry(..., validate=False)`` and, instead, ``options_for_source``
(``harness.sources.batch_sizes``) picks batch sizes that no sample dim uses (for torch
2.13: dims {1, 3, 4, 5}, so batch 2, nested (2, 6), chunked 8 in chunks of 6), proves every
sample hazard-free at those sizes with ``validate_entry`` and records the choice in
``Options.batch_size_note``.

Failures that are torch's own limitations are listed, with reasons, in
``harness/known_failures/<source>.json`` (``expectations_path``), shipped as package data so
an installed suite applies them as a checkout does.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from autograd_function_db.entry import Entry
from harness.core.options import Options
from harness.core.paths import PACKAGE_DIR
from harness.sources.pytorch_db import SourceError, pytorch_registry

SOURCES: dict[str, str] = {
    "afdb": "this suite's registry (autograd_function_db.REGISTRY)",
    "pytorch": "PyTorch's torch.testing._internal.autograd_function_db, adapted at run time",
}

#: The committed expectations of each source (package data: they travel with the wheel).
KNOWN_FAILURES = PACKAGE_DIR / "known_failures"


def load_source(name: str) -> list[Entry]:
    """The entries of source ``name`` ("afdb" or "pytorch")."""
    if name == "afdb":
        from autograd_function_db import REGISTRY

        return list(REGISTRY)
    if name == "pytorch":
        return list(pytorch_registry())
    raise SourceError(f"unknown source {name!r}; known sources: {', '.join(SOURCES)}")


def expectations_path(name: str) -> Path | None:
    """The committed expectations file of a source, when there is one."""
    path = KNOWN_FAILURES / f"{name}.json"
    return path if path.exists() else None


class DatabaseSource:
    """This suite's registry (``"afdb"``) or PyTorch's db (``"pytorch"``) as a source."""

    def __init__(self, name: str) -> None:
        if name not in SOURCES:
            raise SourceError(f"unknown source {name!r}; known sources: {', '.join(SOURCES)}")
        self.name = name

    def entries(self) -> list[Entry]:
        return load_source(self.name)

    def expectations(self) -> Path | None:
        return expectations_path(self.name)

    def options(self, entries: Sequence[Entry], options: Options) -> Options:
        from harness.sources.batch_sizes import options_for_source

        return options_for_source(self.name, entries, options)
