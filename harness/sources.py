"""Entry sources: where the Functions under test come from."""

from __future__ import annotations

from autograd_function_db.entry import Entry

from .api import UsageError

SOURCES = ("afdb",)


def load_source(name: str) -> list[Entry]:
    if name == "afdb":
        from autograd_function_db import REGISTRY

        return list(REGISTRY)
    raise UsageError(f"unknown source {name!r}; use one of {', '.join(SOURCES)}")
