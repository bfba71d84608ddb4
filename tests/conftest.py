"""The suite's own test processes fork their workers and the samples probe.

pytest-xdist runs many tests in one worker process, and some leave a thread hung for good
there (the hang tests: a Function that never returns). After that the suite rightly judges
the process unsafe to fork (``harness/engine/fork_safety.py``) and runs cases in fresh
interpreters or in-process, which would make every later test of that worker depend on the
order tests were dealt in. So the tests ask for the fork engine, as before fork safety
existed; ``tests/test_fork_safety.py`` tests the detection and the other process models
with this setting removed.
"""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _fork_engine(request, monkeypatch):
    if request.module.__name__.endswith("test_fork_safety"):
        monkeypatch.delenv("AFDB_WORKER_ENGINE", raising=False)
    else:
        monkeypatch.setenv("AFDB_WORKER_ENGINE", "fork")
