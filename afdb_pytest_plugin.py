"""The pytest plugin of autograd-function-db: what every pytest run of the environment loads.

Installing the suite registers this module through the ``pytest11`` entry point (name
``afdb``; ``-p no:afdb`` turns it off), so it is imported by **every** pytest run in the
environment, the user's own projects included. It therefore:

* has a name no project uses for its own module (a project's ``harness.py`` or
  ``harness/`` package is none of the suite's business);
* imports only the standard library and pytest: neither torch nor ``harness`` load
  until a test module asks for conformance cases (``from harness.pytest_plugin import
  conformance_tests``); a project that never does pays nothing (see docs/pytest-plugin.md
  for the measurement);
* registers the ``afdb`` marker, which every conformance item carries (``-m afdb`` runs
  only them, ``-m "not afdb"`` skips them), so ``--strict-markers`` accepts it;
* records, in the pytest-xdist controller of ``afdb run -n`` / ``afdb check``, the item
  a dying worker was running (``harness.engine.parallel`` reads ``crashed.jsonl``; its
  generated conftest does the same when plugin autoloading is off).
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

MARKER = "afdb: a conformance case of autograd-function-db (conformance_tests, database_tests)"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", MARKER)


@pytest.hookimpl(optionalhook=True)
def pytest_handlecrashitem(crashitem: str, report: Any, sched: Any) -> None:
    """xdist controller: a worker died running ``crashitem``; note it for harness.engine.parallel."""
    results_dir = os.environ.get("AFDB_RESULTS_DIR")
    if not results_dir:
        return
    with open(os.path.join(results_dir, "crashed.jsonl"), "a") as f:
        f.write(json.dumps({"nodeid": crashitem}) + "\n")
