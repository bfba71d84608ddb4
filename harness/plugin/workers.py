"""The pytest workers of ``afdb run -n`` / ``afdb check`` (fresh interpreters under pytest-xdist).

The engine (``harness.engine``) never imports this wing: it starts pytest with
``-p harness.plugin.workers`` and the run's config file, and this plugin parametrizes the
engine's generated test function with the config's case ids; each item writes its result
to a per-worker JSON-lines file the controller reads (the controller's crash hook is in the
generated conftest).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

import pytest

from harness.plugin.items import Suite


def suite_from_config(config: dict[str, Any]) -> Suite:
    from harness.core.options import Options
    from harness.expectations import as_expectations
    from harness.sources.workers import entries_for_worker

    options = Options.from_dict(config["options"])
    entries, target = entries_for_worker(config)
    if config.get("backend"):  # afdb certify: the entries as they run on the backend
        from harness.certify.backends import Backend
        from harness.certify.checks import adapt

        adapted: list[Any] = adapt(Backend.from_spec(config["backend"]), entries)
        entries = adapted  # BackendEntry: an Entry as it runs on the backend
    more = None
    recorded = config.get("recorded") or {}
    if recorded.get("replay"):  # live values: made again by re-running their tests
        from harness.plugin.replay import Replay

        more = Replay(recorded).entry
    return Suite(
        entries,
        options,
        target=target,
        expectations=as_expectations(config.get("expectations")),
        results_dir=config["results_dir"],
        case_ids=[tuple(pair) for pair in config["cases"]] if "cases" in config else None,
        more=more,
    )


class WorkerFiles:
    """This process's results file, its 'running now' marker and its fault log."""

    def __init__(self, results_dir: str) -> None:
        import faulthandler

        pid = os.getpid()
        self.results = open(os.path.join(results_dir, f"results-{pid}.jsonl"), "a")  # noqa: SIM115
        self.running_path = os.path.join(results_dir, f"running-{pid}.txt")
        self.faults = open(os.path.join(results_dir, f"faults-{pid}.txt"), "w")  # noqa: SIM115
        faulthandler.enable(file=self.faults, all_threads=False)
        from harness.engine.children import become_subreaper

        become_subreaper()  # a case's orphaned grandchildren come back here, to be killed

    def start(self, case_id: str) -> None:
        with open(self.running_path, "w") as f:
            f.write(case_id)

    def record(self, result: Any) -> None:
        self.results.write(json.dumps(result.to_dict()) + "\n")
        self.results.flush()


_WORKER_FILES: dict[str, WorkerFiles] = {}


def worker_cases(config_path: str) -> tuple[list[str], Callable[[str], None]]:
    """The case ids of a run described by a JSON config file (written by
    ``harness.engine.xdist_pool``) and the function that runs one in this worker, writing
    its result where the controller reads it; bad input is one ``setup`` case that fails
    saying why. Built once per worker process."""
    known = _RUNS.get(config_path)
    if known is not None:
        return known
    from harness.core.errors import UsageError
    from harness.engine.forkpool import watchdog_grace
    from harness.engine.isolation import DEFAULT_TIMEOUT_S, watchdog

    with open(config_path) as f:
        config = json.load(f)
    results_dir = config["results_dir"]
    try:
        suite = suite_from_config(config)
    except UsageError as e:
        message = str(e)

        def broken(afdb_case: str) -> None:
            pytest.fail(f"afdb: {message}", pytrace=False)

        _RUNS[config_path] = (["setup"], broken)
        return _RUNS[config_path]

    def run(afdb_case: str) -> None:
        files = _WORKER_FILES.get(results_dir)
        if files is None:
            files = _WORKER_FILES[results_dir] = WorkerFiles(results_dir)
        suite.prepare(afdb_case)  # re-running tests (a replay) is no case's time
        files.start(afdb_case)
        limit = suite.options.timeout_s or DEFAULT_TIMEOUT_S
        with watchdog(limit + watchdog_grace(limit), files.faults):
            result = suite.run(afdb_case)
        files.record(result)

    _RUNS[config_path] = (suite.ids(), run)
    return _RUNS[config_path]


_RUNS: dict[str, tuple[list[str], Callable[[str], None]]] = {}


# --- the plugin the engine names (pytest -p harness.plugin.workers) ------------------------


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--afdb-worker-config",
        default=None,
        metavar="FILE",
        help="(afdb's own workers) the run's config file, written by harness.engine.xdist_pool",
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """The generated ``test_case(afdb_case, afdb_worker)``: one item per case id."""
    path = metafunc.config.getoption("afdb_worker_config", None)
    if path and "afdb_case" in metafunc.fixturenames:
        ids, _ = worker_cases(path)
        metafunc.parametrize("afdb_case", ids, ids=ids)


@pytest.fixture
def afdb_worker(request: pytest.FixtureRequest) -> Callable[[str], None]:
    """Runs one case of the run in this worker (``worker_cases``)."""
    return worker_cases(request.config.getoption("afdb_worker_config"))[1]
