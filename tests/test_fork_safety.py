"""No crash or hang from the suite's own fork (issue 34, part 5).

A process in which a library started a thread pool cannot fork a child that works: the
child has the pool's state but not its threads. ``harness.engine.fork_safety`` names such a
parent; the cases then run in fresh worker interpreters (in this process for a recorded
check with a class a fresh interpreter cannot import), and the samples probe does not fork. The project ``tests/fork_hazard_project``
(hazlib) has a Function that runs its forward through ``torch.jit.fork`` and one that waits
for its library's worker thread; forked from a process where both pools run, every case
times out (shown with ``AFDB_WORKER_ENGINE=fork`` and a 2 s limit); with the safety check,
the correct Functions conform and their planted twins (``HAZLIB_PLANTED=1``) fail.
"""

from __future__ import annotations

import importlib.machinery
import os
import shutil
import subprocess
import sys
import threading
import types
from pathlib import Path

import pytest

from harness.core.schema import read_report
from harness.engine import fork_safety, parallel, probe, xdist_pool
from harness.engine.entry_progress import FinishedEntries

ROOT = Path(__file__).resolve().parent.parent
PROJECT = Path(__file__).resolve().parent / "fork_hazard_project"
FUNCTIONS = ("hazlib:ForkedSin", "hazlib:PooledCube")


# --- the detection ------------------------------------------------------------------


def test_a_python_thread_is_a_hazard_and_its_end_is_not():
    stop = threading.Event()
    worker = threading.Thread(target=stop.wait, name="lib-pool", daemon=True)
    worker.start()
    try:
        found = fork_safety.hazards()
        assert any("'lib-pool'" in h for h in found), found
        assert "lib-pool" in fork_safety.unsafe_reason()
    finally:
        stop.set()
        worker.join()
    assert not any("lib-pool" in h for h in fork_safety.hazards())


def test_the_suites_own_watchdog_thread_is_no_hazard():
    stop = threading.Event()
    own = threading.Thread(target=stop.wait, name="afdb-case-watchdog", daemon=True)
    own.start()
    try:
        assert not any("afdb-case-watchdog" in h for h in fork_safety.hazards())
    finally:
        stop.set()
        own.join()


def test_torchs_interop_pool_by_its_thread_name(monkeypatch):
    names = ["python", "python", "PTThreadPool", "PTThreadPool"]
    monkeypatch.setattr(fork_safety, "task_names", lambda: names)
    assert any("torch.jit.fork" in h for h in fork_safety.hazards())
    monkeypatch.setattr(fork_safety, "task_names", lambda: ["python", "python"])
    assert fork_safety.hazards() == []


def test_numbas_launched_pool_and_not_its_import(monkeypatch):
    fake = types.SimpleNamespace(_is_initialized=False)
    monkeypatch.setitem(sys.modules, "numba.np.ufunc.parallel", fake)
    assert not fork_safety.numba_pool()
    fake._is_initialized = True
    assert fork_safety.hazards()[0] == "numba's parallel thread pool is running"


def test_native_threads_beyond_torchs_own_pools(monkeypatch):
    allowance = fork_safety.torch_allowance()
    _, python_count = fork_safety.python_threads()
    within = ["python"] * (1 + python_count + allowance)
    monkeypatch.setattr(fork_safety, "task_names", lambda: within)
    assert fork_safety.hazards() == []
    monkeypatch.setattr(fork_safety, "task_names", lambda: [*within, "python"])
    (found,) = fork_safety.hazards()
    assert "more than torch's own pools hold" in found


BASELINE = """
import json, os, sys, threading
import torch
import harness.cli.main
from harness.engine.fork_safety import hazards
torch.set_num_threads(os.cpu_count() or 1)
a = torch.randn(200, 200)
(a @ a).sum(); torch.randn(1_000_000).exp().sum()
x = torch.randn(50, requires_grad=True); torch.autograd.grad((x * x).sum(), x)
states = {"torch": hazards()}
try:
    import numpy
    (numpy.ones((200, 200)) @ numpy.ones((200, 200))).sum()
except ImportError:
    pass
states["numpy"] = hazards()
sys.path.insert(0, sys.argv[1])
import hazlib
hazlib.ForkedSin.apply(torch.ones(3))
states["jit.fork"] = hazards()
print(json.dumps(states), flush=True)
# torch's inter-op pool threads can abort the interpreter's teardown ("terminate called
# without an active exception"): what the test reads is printed, so leave at once
os._exit(0)
"""


def test_a_fresh_torch_process_is_safe_and_jit_fork_is_not():
    """Plain torch (its intra-op pool used at every core), NumPy and the harness: nothing
    found; a TorchScript ``torch.jit.fork``: found."""
    proc = subprocess.run(
        [sys.executable, "-c", BASELINE, str(PROJECT)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 0, proc.stderr
    import json

    states = json.loads(proc.stdout.strip().splitlines()[-1])
    assert states["torch"] == [] and states["numpy"] == [], states
    assert any("torch.jit.fork" in h for h in states["jit.fork"]), states


# --- what runs the cases, and the probe --------------------------------------------


class Imported:  # importable by its module and name: a fresh interpreter finds it
    pass


def test_the_process_model_where_forking_is_unsafe(monkeypatch):
    class Local:  # a recording's live class a fresh interpreter cannot import
        pass

    imported = [types.SimpleNamespace(name="Imported", function=Imported)]
    local = [*imported, types.SimpleNamespace(name="Local", function=Local)]
    monkeypatch.delenv("AFDB_WORKER_ENGINE", raising=False)
    monkeypatch.setattr("harness.engine.forkpool.available", lambda: True)
    monkeypatch.setattr(fork_safety, "hazards", lambda: [])
    assert parallel.process_model("recorded", local) == ("fork", "")
    monkeypatch.setattr(fork_safety, "hazards", lambda: ["a pool is running"])
    model, line = parallel.process_model("recorded", local[1:])
    assert model == "in-process" and "a pool is running" in line and "/" not in line
    assert line.startswith("process model: cases run in this process")
    # the importable one in fresh interpreters, the other here, named before it starts
    model, line = parallel.process_model("recorded", local)
    assert model == "mixed" and "1 Function in this process" in line
    model, line = parallel.process_model("recorded", imported)
    assert model == "xdist" and line.startswith("process model: cases run in fresh worker")
    model, line = parallel.process_model("afdb")
    assert model == "xdist" and "a pool is running" in line
    monkeypatch.setenv("AFDB_WORKER_ENGINE", "fork")  # the old model, on request
    assert parallel.engine("recorded") == "fork"


def test_the_process_model_of_a_recording_by_its_targets_word(monkeypatch):
    """A recorded target says how a fresh interpreter makes each Function again: from the
    files, by re-running its tests (live values: harness.plugin.replay), or not at all."""
    from harness.sources.recording import RecordedTarget

    class Local:
        pass

    local = [types.SimpleNamespace(name="Local", function=Local)]
    monkeypatch.delenv("AFDB_WORKER_ENGINE", raising=False)
    monkeypatch.setattr("harness.engine.forkpool.available", lambda: True)
    monkeypatch.setattr(fork_safety, "hazards", lambda: ["a pool is running"])
    tests = {"nodeids": {"Local": ["test_local.py::test_it"]}}
    replayed = RecordedTarget("rec", needs_process=("Local",), replay=tests)
    model, line = parallel.process_model("recorded", local, replayed)
    assert model == "xdist" and "re-running the tests that called them" in line
    stuck = RecordedTarget("rec", needs_process=("Local",))  # no tests to re-run
    assert parallel.process_model("recorded", local, stuck)[0] == "in-process"
    elsewhere = RecordedTarget("rec", needs_process=("Local",), replay={"nodeids": {}})
    assert parallel.process_model("recorded", local, elsewhere)[0] == "in-process"
    # an importable class whose calls hold live values: never rebuilt from the files
    imported = [types.SimpleNamespace(name="Imported", function=Imported)]
    live = RecordedTarget("rec", needs_process=("Imported",))
    assert parallel.process_model("recorded", imported, live)[0] == "in-process"
    assert parallel.process_model("recorded", imported, RecordedTarget("rec"))[0] == "xdist"


def test_importable_classes():
    class Local:
        pass

    assert fork_safety.importable(Imported)
    assert not fork_safety.importable(Local)
    assert not fork_safety.importable(type("Made", (), {"__module__": "__main__"}))
    # a module that sys.modules holds but no sys.path directory leads to (pytest's
    # importlib mode): a fresh interpreter would not find it
    orphan = types.ModuleType("afdb_orphan_module")
    orphan.__spec__ = importlib.machinery.ModuleSpec(
        "afdb_orphan_module", None, origin="/nowhere/afdb_orphan_module.py"
    )
    made = type("Made", (), {"__module__": "afdb_orphan_module"})
    orphan.Made = made
    sys.modules["afdb_orphan_module"] = orphan
    try:
        assert not fork_safety.importable(made)
    finally:
        del sys.modules["afdb_orphan_module"]


def test_the_probe_does_not_fork_an_unsafe_process(monkeypatch):
    import torch

    from autograd_function_db.entry import Sample
    from harness.sources.entries import make_entry
    from tests.verdict_functions import Double, plain_samples

    entry = make_entry(Double, plain_samples)
    bad = [Sample((torch.ones(2, 3, dtype=torch.float64), torch.ones(1)), name="extra")]
    forks: list[int] = []
    real_fork = os.fork

    def counting_fork() -> int:
        forks.append(1)
        return real_fork()

    monkeypatch.setattr(os, "fork", counting_fork)
    monkeypatch.setattr(fork_safety, "hazards", lambda: [])
    assert probe.probe_samples(entry, bad, 10.0) is not None  # forked, and it answers
    assert forks == [1]
    monkeypatch.setattr(fork_safety, "hazards", lambda: ["a pool is running"])
    refusal = probe.probe_samples(entry, bad, 10.0)
    assert refusal is not None and "TypeError" in refusal.raised  # answered in this process
    assert forks == [1]


def test_progress_per_entry_once_all_its_cases_arrived():
    from harness.core.results import CaseResult

    cases = [types.SimpleNamespace(entry=e, id=f"{e}/{k}") for e in "AB" for k in range(2)]

    def record(case):
        return CaseResult(case.id, case.entry, "vjp", 0, "s0", None, "pass")

    skipped = {"A/0": record(cases[0])}
    told: list[str] = []
    finished = FinishedEntries(cases, skipped, lambda r: told.append(r.id))
    finished.arrived(record(cases[2]))  # B/0: B not finished
    assert told == []
    finished.arrived(record(cases[1]))  # A/1: A finished, with its skipped case first
    assert told == ["A/0", "A/1"]
    finished.arrived(record(cases[3]))
    assert told == ["A/0", "A/1", "B/0", "B/1"] and finished.told == set(told)


# --- the hazard project, end to end ------------------------------------------------


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("HAZLIB_PLANTED", "AFDB_WORKER_ENGINE")}
    env["PYTHONPATH"] = str(ROOT)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return {**env, **extra}


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> Path:
    """The project with its tests' recording (``afdb record -m pytest``), made once."""
    folder = tmp_path_factory.mktemp("hazard") / "proj"
    shutil.copytree(PROJECT, folder, ignore=shutil.ignore_patterns("__pycache__"))
    (folder / "test_hazlib.py").write_text((folder / "hazlib_tests.py").read_text())
    argv = ["record", "-o", "rec", "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    argv += ["-p", "no:randomly", "test_hazlib.py"]
    proc = subprocess.run(
        [sys.executable, "-m", "harness.cli", *argv],
        cwd=folder,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return folder


def _check_after_the_pools(folder: Path, out: str, **env: str) -> tuple[dict[str, list[str]], str]:
    """``afdb check --recorded`` in a process whose pools the Functions already started."""
    argv = ["check", "--recorded", "rec", "--checks", "vjp", "--timeout", "2", "--json", out]
    proc = subprocess.run(
        [sys.executable, "drive.py", *argv],
        cwd=folder,
        env=_env(**env),
        capture_output=True,
        text=True,
        timeout=240,
    )
    report = read_report(folder / out)
    statuses: dict[str, list[str]] = {}
    for case in report["cases"]:
        statuses.setdefault(case["entry"], []).append(case["status"])
    return statuses, proc.stdout + proc.stderr


def test_forked_from_the_pools_every_case_hangs(recorded: Path):
    """The process model before the safety check (bounded by the 2 s case limit)."""
    statuses, out = _check_after_the_pools(recorded, "forked.json", AFDB_WORKER_ENGINE="fork")
    for name in FUNCTIONS:
        assert statuses[name] and set(statuses[name]) == {"timeout"}, (name, statuses, out)
    assert "process model" not in out


def test_after_the_pools_the_correct_functions_conform(recorded: Path):
    """hazlib imports in a fresh interpreter: the cases run in fresh worker interpreters."""
    statuses, out = _check_after_the_pools(recorded, "here.json")
    for name in FUNCTIONS:
        assert statuses[name] and set(statuses[name]) == {"pass"}, (name, statuses, out)
    (line,) = [ln for ln in out.splitlines() if "process model:" in ln]
    assert "cases run in fresh worker interpreters" in line and "torch.jit.fork" in line
    assert "'hazlib-cache'" in line and str(recorded) not in line


def test_after_the_pools_the_planted_twins_fail(recorded: Path):
    statuses, out = _check_after_the_pools(recorded, "planted.json", HAZLIB_PLANTED="1")
    for name in FUNCTIONS:
        assert statuses[name] and set(statuses[name]) == {"fail"}, (name, statuses, out)


LOCAL_TEST = """
import torch

import hazlib


def test_a_class_of_the_test_itself():
    class PooledSquare(torch.autograd.Function):
        @staticmethod
        def forward(x):
            hazlib._flush_cache()
            return x * x

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(inputs[0])

        @staticmethod
        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            return grad * 2 * x

    x = torch.linspace(-1, 1, 6, dtype=torch.float64).reshape(2, 3).requires_grad_()
    PooledSquare.apply(x).sum().backward()
"""


def test_pytest_afdb_checks_after_the_tests_started_the_pools(recorded: Path):
    """``pytest --afdb``: the pools run in the pytest process when the check starts, and a
    class defined in a test cannot be imported by a fresh interpreter: the fresh worker
    interpreters make it again by re-running its test (``harness.plugin.replay``)."""
    (recorded / "test_local.py").write_text(LOCAL_TEST)
    argv = ["-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "ignore", "test_hazlib.py"]
    argv += ["test_local.py", "--afdb", "--afdb-checks", "vjp"]
    proc = subprocess.run(
        [sys.executable, *argv],
        cwd=recorded,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=240,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "afdb: process model: cases run in fresh worker interpreters" in out, out
    assert "1 Function with live values or classes of the tests made there again" in out, out
    for name in (*FUNCTIONS, "test_local:test_a_class_of_the_test_itself.<locals>.PooledSquare"):
        assert any(ln.strip().startswith(name) and "conforms" in ln for ln in out.splitlines()), out


def test_the_project_is_not_collected_by_the_suites_own_pytest():
    """Its tests are ``hazlib_tests.py``, copied as ``test_hazlib.py`` per run: collected
    here, they would start the pools in this process."""
    assert not list(PROJECT.glob("test_*.py"))
    assert (PROJECT / "hazlib_tests.py").exists()


def test_pytest_afdb_shows_progress_and_the_model_on_a_terminal():
    from harness.plugin.session import _Lines, _shower

    shown: list[str] = []
    out = _Lines(shown.append, {"lib:F"})
    out.write("afdb check --recorded rec: 1 Function recorded\nnote: process model: cases run")
    out.write(
        " in this process (x)\nlib:F: 3 pass (0.1s in cases)\nlib:G: 1 pass (0.1s in cases)\n"
    )
    assert shown == [
        "afdb: process model: cases run in this process (x)",
        "afdb: lib:F: 3 pass (0.1s in cases)",
    ]

    class Writer:
        width_of_current_line = 6  # "..... [100%]" left open by the test progress

        def line(self) -> None:
            self.width_of_current_line = 0
            said.append("\n")

    said: list[str] = []
    reporter = types.SimpleNamespace(_tw=Writer(), write_line=said.append)
    show = _shower(reporter)
    show("afdb: one")
    show("afdb: two")
    assert said == ["\n", "afdb: one", "afdb: two"]


POOL_AT_IMPORT = """
import queue, threading
import torch

_JOBS = queue.Queue()


def _serve():
    while True:
        _JOBS.get().set()


threading.Thread(target=_serve, name="lib-pool", daemon=True).start()  # at import


class Cube(torch.autograd.Function):
    @staticmethod
    def forward(x):
        done = threading.Event()
        _JOBS.put(done)
        done.wait()
        return x**3

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * 3 * x**2


def samples():
    return [(torch.linspace(-1, 1, 6, dtype=torch.float64).reshape(2, 3),)]
"""


def test_a_target_whose_import_starts_a_pool_runs_in_fresh_interpreters(tmp_path: Path):
    """``afdb check lib.py:Cube``: the import started the library's thread in the ``afdb``
    process, so the cases run in fresh worker interpreters (each imports it anew)."""
    (tmp_path / "poollib.py").write_text(POOL_AT_IMPORT)
    argv = ["check", "poollib.py:Cube", "--samples", "poollib.py:samples", "--checks", "vjp"]
    argv += ["--timeout", "20", "--json", "out.json"]
    proc = subprocess.run(
        [sys.executable, "-m", "harness.cli", *argv],
        cwd=tmp_path,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    (line,) = [ln for ln in out.splitlines() if "process model:" in ln]
    assert "fresh worker interpreters" in line and "'lib-pool'" in line, line
    statuses = {c["status"] for c in read_report(tmp_path / "out.json")["cases"]}
    assert statuses == {"pass"}, out


def test_fresh_interpreters_report_progress_while_they_run(monkeypatch):
    """The xdist engine's records reach the progress line as the workers write them (a fake
    pool writes every record, then waits a poll), each once."""
    import json

    from harness.core.options import Options
    from harness.sources.entries import make_entry
    from tests.verdict_functions import Double, plain_samples

    seen: list[str] = []
    during: list[int] = []

    def pool(cmd, env, poll=None):
        folder = env["AFDB_RESULTS_DIR"]
        with open(os.path.join(folder, "config.json")) as f:
            ids = [case_id for _, case_id in json.load(f)["cases"]]
        with open(os.path.join(folder, "results-1.jsonl"), "w") as f:
            for case_id in ids:
                r = {"id": case_id, "entry": case_id.split("/")[0], "check": "vjp"}
                r.update(sample=0, sample_name="s0", plan=None, status="pass")
                f.write(json.dumps(r) + "\n")
            f.write('{"id": "half a line')  # a record being written: not read yet
        assert poll is not None
        poll()
        during.append(len(seen))
        path = os.path.join(folder, "results-1.jsonl")
        with open(path) as f:
            whole = f.read().rsplit("\n", 1)[0] + "\n"
        with open(path, "w") as f:  # the pool ended: no half line is left
            f.write(whole)
        return 0, "1 passed"

    monkeypatch.setattr(
        parallel, "process_model", lambda source="", entries=(), target=None: ("xdist", "")
    )
    monkeypatch.setattr(xdist_pool, "run_pool", pool)
    entry = make_entry(Double, plain_samples)
    options = Options(checks=("vjp", "vmap"), timeout_s=30)
    results = parallel.run_parallel(
        [entry], options, 1, source="user", progress=lambda r: seen.append(r.id)
    )
    assert during == [len(results)] and len(results) > 1  # all told before the pool ended
    assert sorted(seen) == sorted(r.id for r in results)  # and each once
