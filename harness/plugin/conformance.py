"""``conformance_tests`` and ``database_tests``: what a user's test module assigns to a
``test_*`` name to get one pytest item per conformance case, with stable ids (so ``-k
vmap_nested``, ``-n auto`` and ``--junitxml`` work). A failing case fails its item with the
message and the ``afdb repro`` command; ``unsupported`` cases are skipped with their reason;
expectations give ``xfail`` and ``skip``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from harness.plugin.items import Suite, marked, parametrized


def conformance_tests(
    function: Any,
    samples: Any = None,
    *,
    expectations: str | None = None,
    name: str = "test_conformance",
    **options: Any,
) -> Callable[..., None]:
    """A pytest test function with one item per conformance case of ``function``.

    Assign it to a ``test_*`` name in a test module. ``samples`` is what
    ``harness.check`` takes (default: the Function's ``samples`` attribute);
    ``options`` are ``harness.check``'s keywords (``checks=``, ``batch_sizes=``,
    ``seed=``, ``dtype=``, ``timeout_s=``, capabilities such as ``inplace_args=(0,)``).
    ``expectations`` is an expectations file (xfail/skip per case id).
    """

    def factory() -> Suite:
        from harness.api import infer_target, prepare, target_fields
        from harness.expectations import as_expectations
        from harness.sources.entries import samples_attribute, samples_places

        nonlocal samples
        if samples is None:
            samples = samples_attribute(function)
            if samples is None:
                from harness.core.errors import UsageError

                raise UsageError(
                    f"{getattr(function, '__name__', function)} has no samples "
                    f"({samples_places(function)}); pass conformance_tests(function, samples)"
                )
        entry, opts = prepare(function, samples, **options)
        target = infer_target(function, samples, **target_fields(options))
        return Suite([entry], opts, target=target, expectations=as_expectations(expectations))

    return marked(parametrized(name, factory))


def database_tests(
    names: Sequence[str] = (),
    *,
    source: str = "afdb",
    expectations: str | None = None,
    name: str = "test_database",
    **options: Any,
) -> Callable[..., None]:
    """One item per case of the database (or the named entries / ``tag:TAG`` selectors)."""

    def factory() -> Suite:
        from harness.core.options import Options
        from harness.expectations import as_expectations
        from harness.sources.database import DatabaseSource
        from harness.sources.select import select_entries

        entries = select_entries(DatabaseSource(source).entries(), list(names))
        opts = Options(**options)
        return Suite(entries, opts, expectations=as_expectations(expectations))

    return marked(parametrized(name, factory))
