"""The entries a fresh worker interpreter runs, made again from the run's config file.

The engine's pytest-xdist pool (``harness.engine.xdist_pool``) writes a config naming its
source as data: a user's target spec, a recording's ``worker_config``, or a database source
and the entry names. A worker builds the same source from it (nothing is pickled), and
the target its repro commands name.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from autograd_function_db.entry import Entry


def entries_for_worker(config: Mapping[str, Any]) -> tuple[list[Entry], Any]:
    """The entries named by a run's config, and the target of their repro commands."""
    if config.get("target"):
        from harness.sources.target import TargetSource, TargetSpec

        entries = TargetSource(TargetSpec.from_dict(config["target"])).entries()
        return entries, TargetSpec.from_dict(config.get("repro_target") or config["target"])
    if config.get("recorded"):  # a recorded check whose parent could not fork
        from harness.sources.recording import rebuild

        return rebuild(config["recorded"], config["entries"])
    from harness.sources.database import DatabaseSource
    from harness.sources.select import select_entries

    source = DatabaseSource(config.get("source", "afdb"))
    return select_entries(source.entries(), config["entries"]), None
