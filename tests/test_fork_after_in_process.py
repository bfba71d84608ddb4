"""A forked worker after an in-process run in the same process (pytest, a notebook).

The fork engine's workers inherit the controller's memory, including the state the last
in-process case ended with. Restoring that state in the worker set torch back to the
controller's thread count; torch's OpenMP pool, used again with several threads after a
fork, then waits forever for threads the child does not have (libgomp is not fork-safe),
so each case ran into the watchdog (330 s) and was reported as a timeout.
"""

from __future__ import annotations

import json

import torch

from harness.cli.main import main
from tests.test_cli_finish import BROKEN


def _statuses(path):
    return [c["status"] for c in json.loads(path.read_text())["cases"]]


def test_isolated_cases_after_an_in_process_run_do_not_hang(tmp_path, capsys):
    threads = torch.get_num_threads()
    torch.set_num_threads(2)  # the machine's cores, as a user's process has them
    try:
        first, second = tmp_path / "in-process.json", tmp_path / "isolated.json"
        common = ["check", *BROKEN, "--checks", "vmap", "-q", "--timeout", "20"]
        assert main([*common, "--no-isolate", "--json", str(first)]) == 1
        assert torch.get_num_threads() == 2  # what the worker must not inherit
        assert main([*common, "--json", str(second)]) == 1
        capsys.readouterr()
        assert "timeout" not in _statuses(second)
        assert _statuses(second) == _statuses(first)  # the same verdicts either way
    finally:
        torch.set_num_threads(threads)
