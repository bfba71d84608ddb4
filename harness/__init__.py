"""The harness: batching plans, loop and finite-difference references, checks, runner, reports.

Public API: ``check(function, samples, **options)`` returns a ``RunResult``;
``assert_conforms(...)`` raises ``AssertionError`` listing every failing case.

The wings, bottom to top (each subpackage's docstring says what it owns and may import;
the import-linter contracts in ``pyproject.toml`` enforce the order; docs/design.md draws it):
``core`` < ``recording`` < ``plans`` < ``checks`` < ``engine`` < ``reports`` / ``repro`` <
``sources`` < ``expectations`` < ``api`` < ``recorded`` < ``session`` < ``certify`` /
``migrate`` < ``cli`` < ``plugin`` (pytest) < ``pytest_plugin`` (its documented import).

Importing ``harness`` imports nothing else: the names below load on first use (PEP 562),
so the pytest plugin and ``import harness.core.errors`` stay light.
"""

from __future__ import annotations

import importlib
from typing import Any

_PUBLIC = {
    "SCHEMA": "harness.core.results",
    "CaseResult": "harness.core.results",
    "RunResult": "harness.core.results",
    "Options": "harness.core.options",
    "UsageError": "harness.core.errors",
    "assert_conforms": "harness.api",
    "check": "harness.api",
    "format_failures": "harness.api",
    "make_entry": "harness.sources.entries",
    "load_recording": "harness.recording",
    "check_recorded": "harness.cli.check_recorded",
}

__all__ = sorted(_PUBLIC)


def __getattr__(name: str) -> Any:
    if name == "recording":  # the subpackage, callable: harness.recording(DIR)
        return importlib.import_module("harness.recording")
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'harness' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_PUBLIC) | {"recording"})
