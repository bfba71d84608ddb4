"""The harness: batching plans, loop and finite-difference references, checks, runner, reports.

Public API: ``check(function, samples, **options)`` returns a ``RunResult``;
``assert_conforms(...)`` raises ``AssertionError`` listing every failing case.
"""

from __future__ import annotations

from .api import UsageError, assert_conforms, check, format_failures, make_entry
from .options import Options
from .results import SCHEMA, CaseResult, RunResult

__all__ = [
    "SCHEMA",
    "CaseResult",
    "Options",
    "RunResult",
    "UsageError",
    "assert_conforms",
    "check",
    "format_failures",
    "make_entry",
]
