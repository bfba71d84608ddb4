"""Worker processes, -n, signals, shards and merges: the run plumbing of `afdb run` / `afdb check`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import harness.cli.main as cli
from harness.core.results import CaseResult
from harness.engine import cores, forkpool, parallel
from harness.engine.shard import Shard, assign

ROOT = Path(__file__).resolve().parent.parent
ROT = ROOT / "examples" / "rotations.py"
GOOD = [f"{ROT}:RotatePoints", "--samples", f"{ROT}:rotation_samples"]
SLOW = Path(__file__).resolve().parent / "slow_functions.py"


def run_cli(capsys, *argv):
    rc = cli.main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def ids_and_statuses(path):
    return [(c["id"], c["status"]) for c in json.loads(Path(path).read_text())["cases"]]


# --- -n follows pytest-xdist's conventions (issue 13.9) -----------------------------------


@pytest.mark.parametrize("command", [["run", "NumpyCube"], ["check", *GOOD]])
def test_a_bad_n_is_refused_before_anything_is_printed(capsys, command):
    rc, out, err = run_cli(capsys, *command, "--checks", "vmap", "-n", "abc")
    assert rc == 2
    assert out == ""
    assert err.strip().splitlines() == [
        f"afdb {command[0]}: error: -n must be a number of workers (0: in this process) or "
        "auto; got 'abc'"
    ]


def test_n_0_runs_in_this_process_and_the_header_says_so(capsys, monkeypatch):
    def no_workers(*args, **kwargs):
        raise AssertionError("-n 0 must not start workers")

    monkeypatch.setattr(parallel, "run_parallel", no_workers)
    rc, out, _ = run_cli(capsys, "check", *GOOD, "--checks", "vmap", "-n", "0")
    assert rc == 0
    assert "running the cases in this process" in out
    assert "worker" not in out


def _pool_sizes(monkeypatch):
    sizes: list[int] = []
    real = forkpool.run_forked

    def recording(count, workers, *args, **kwargs):
        sizes.append(min(workers, count))
        return real(count, workers, *args, **kwargs)

    monkeypatch.setattr(forkpool, "run_forked", recording)
    return sizes


def test_n_far_above_the_cores_is_reduced_with_one_line(capsys, monkeypatch):
    sizes = _pool_sizes(monkeypatch)
    rc, _, err = run_cli(capsys, "run", "NumpyCube", "--checks", "vmap", "-q", "-n", "1000")
    assert rc == 0
    cap = cores.WORKERS_PER_CPU * cores.usable_cpus()
    assert sizes == [min(cap, 17)]
    lines = [ln for ln in err.splitlines() if ln.startswith("-n 1000")]
    assert len(lines) == 1 and f"using {sizes[0]} worker" in lines[0]


def test_n_above_the_number_of_cases_is_reduced_to_it(capsys, monkeypatch):
    sizes = _pool_sizes(monkeypatch)
    monkeypatch.setattr(cores, "usable_cpus", lambda: 64)
    rc, _, err = run_cli(capsys, "run", "NumpyCube", "--checks", "vmap_chunked", "-q", "-n", "30")
    assert rc == 0
    cases = len(ids_and_statuses_from_run(capsys, "NumpyCube", "vmap_chunked"))
    assert sizes == [cases] and cases < 30
    assert f"-n 30: using {cases} workers (there are only {cases} cases to run)" in err


def ids_and_statuses_from_run(capsys, entry, checks):
    from harness.core.options import Options
    from harness.engine.cases import all_case_ids
    from harness.sources.database import load_source

    entries = [e for e in load_source("afdb") if e.name == entry]
    return all_case_ids(entries, Options(checks=(checks,)))


def test_n_auto_means_the_physical_cores(capsys, monkeypatch):
    sizes = _pool_sizes(monkeypatch)
    monkeypatch.setattr(cores, "physical_cores", lambda: 3)
    monkeypatch.setattr(cores, "usable_cpus", lambda: 6)
    rc, _, err = run_cli(capsys, "run", "NumpyCube", "--checks", "vmap", "-q", "-n", "auto")
    assert rc == 0 and sizes == [3] and "-n" not in err


def test_physical_cores_count_hyperthreads_once():
    cpuinfo = "".join(
        f"processor\t: {cpu}\nphysical id\t: 0\ncore id\t\t: {cpu % 2}\n\n" for cpu in range(4)
    )
    assert cores.count_physical_cores(cpuinfo) == 2
    assert cores.count_physical_cores(cpuinfo, allowed={0, 2}) == 1
    two_sockets = cpuinfo + "processor\t: 4\nphysical id\t: 1\ncore id\t\t: 0\n"
    assert cores.count_physical_cores(two_sockets) == 3
    assert cores.count_physical_cores("no cpu info here") == 0


# --- both worker engines give the in-process results --------------------------------------


@pytest.mark.parametrize("engine", ["fork", "xdist"])
def test_workers_give_the_in_process_results(capsys, tmp_path, monkeypatch, engine):
    monkeypatch.setenv("AFDB_WORKER_ENGINE", engine)
    assert parallel.engine() == engine
    one, two = tmp_path / "one.json", tmp_path / "two.json"
    args = ["run", "NumpyCube", "NumpyMul", "--checks", "vmap,contract", "-q"]
    assert run_cli(capsys, *args, "-n", "0", "--json", str(one))[0] == 0
    assert run_cli(capsys, *args, "-n", "2", "--json", str(two))[0] == 0
    assert ids_and_statuses(one) == ids_and_statuses(two) != []


def _record(i: int, status: str = "pass") -> CaseResult:
    return CaseResult(f"c{i}", "E", "vmap", 0, "s", None, status)


def test_fork_pool_replaces_a_dead_worker_and_blames_only_its_case():
    def run_one(i):
        if i == 2:
            os._exit(3)
        return _record(i)

    done = forkpool.run_forked(
        7, 2, run_one, lambda i, faults: _record(i, "crash"), lambda i, why: _record(i, "error")
    )
    assert {i: r.status for i, r in done.items()} == {
        0: "pass",
        1: "pass",
        2: "crash",
        3: "pass",
        4: "pass",
        5: "pass",
        6: "pass",
    }


# --- signals (issue 13.10) ----------------------------------------------------------------


def _our_processes(marker: str) -> list[int]:
    """Live processes whose environment holds ``marker`` (the run and everything it started)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read()
            with open(f"/proc/{pid}/stat") as f:
                zombie = f.read().rsplit(")", 1)[1].split()[0] == "Z"
        except OSError:
            continue
        if marker.encode() in env and not zombie:
            found.append(int(pid))
    return found


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc (Linux only)")
@pytest.mark.parametrize("engine", ["fork", "xdist", "in-process"])
def test_sigterm_stops_workers_removes_temporary_folders_and_writes_the_report(tmp_path, engine):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    trace = tmp_path / "trace.txt"
    report = tmp_path / "r.json"
    env = dict(
        os.environ,
        PYTHONPATH=str(ROOT),
        TMPDIR=str(tmp),
        AFDB_TEST_TRACE=str(trace),
        AFDB_WORKER_ENGINE=engine,
    )
    cmd = [sys.executable, "-m", "harness.cli", "check", f"{SLOW}:Sleepy", "--samples"]
    workers = "0" if engine == "in-process" else "2"
    cmd += [f"{SLOW}:samples", "--checks", "vmap,contract", "-n", workers, "--json", str(report)]
    proc = subprocess.Popen(
        cmd, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            if trace.exists() and len(trace.read_text().splitlines()) >= 4:
                break
            time.sleep(0.1)
        assert proc.poll() is None, proc.communicate()
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, (out, err)
    data = json.loads(report.read_text())
    assert data["metadata"]["interrupted"] is True
    assert 0 < len(data["cases"]) < 24
    assert [p.name for p in tmp.iterdir() if p.name.startswith("afdb-run-")] == []
    time.sleep(0.5)
    assert _our_processes(f"AFDB_TEST_TRACE={trace}") == []
    assert b"INTERRUPTED" in out


def test_an_interrupted_run_keeps_the_complete_earlier_report_beside_it(
    capsys, tmp_path, monkeypatch
):
    from harness.engine import runner

    out = tmp_path / "r.json"
    md = tmp_path / "r.md"
    args = ["run", "NumpyCube", "--checks", "vmap", "-q", "--json", str(out), "--markdown", str(md)]
    assert run_cli(capsys, *args)[0] == 0
    complete, complete_md = out.read_text(), md.read_text()

    real, calls = runner.run_case, []

    def interrupting(*a, **k):
        calls.append(1)
        if len(calls) % 5 == 0:
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(runner, "run_case", interrupting)
    rc, _, err = run_cli(capsys, *args)
    assert rc == 130
    assert json.loads(out.read_text())["metadata"]["interrupted"] is True
    assert (tmp_path / "r.previous.json").read_text() == complete
    assert (tmp_path / "r.previous.md").read_text() == complete_md
    assert f"interrupted: the earlier {out} is kept as {tmp_path / 'r.previous.json'}" in err
    # A second interrupted run replaces the partial report, never the kept complete one.
    rc, _, err = run_cli(capsys, *args)
    assert rc == 130
    assert (tmp_path / "r.previous.json").read_text() == complete
    assert (tmp_path / "r.previous.md").read_text() == complete_md
    assert "r.previous" not in err


# --- shards and merges (issue 11.4) ---------------------------------------------------------


def test_three_shards_merged_equal_the_unsharded_run(capsys, tmp_path):
    sel = ["run", "NumpyCube", "NumpyMul", "CubeGenerated", "--checks", "vmap,contract,jvp", "-q"]
    whole = tmp_path / "whole.json"
    assert run_cli(capsys, *sel, "--json", str(whole))[0] == 0
    parts = []
    for k in (1, 2, 3):
        part = tmp_path / f"shard{k}.json"
        workers = ["-n", "2"] if k == 2 else []  # shards run the same in workers
        assert run_cli(capsys, *sel, *workers, "--shard", f"{k}/3", "--json", str(part))[0] == 0
        parts.append(part)
    shard_ids = [{i for i, _ in ids_and_statuses(p)} for p in parts]
    assert all(shard_ids) and sum(map(len, shard_ids)) == len(set().union(*shard_ids))
    merged = tmp_path / "all.json"
    rc, out, _ = run_cli(capsys, "merge", *map(str, parts), "-o", str(merged))
    assert rc == 0
    assert ids_and_statuses(merged) == ids_and_statuses(whole)
    data = json.loads(merged.read_text())
    assert [s["shard"] for s in data["metadata"]["shards"]] == ["1/3", "2/3", "3/3"]
    assert data["summary"] == json.loads(whole.read_text())["summary"]
    assert "balanced_by" in json.loads(parts[0].read_text())["metadata"]["shard"]


def test_shards_balance_the_baseline_durations():
    ids = [f"c{i}" for i in range(10)]
    durations = {"c0": 9.0, **{f"c{i}": 1.0 for i in range(1, 10)}}
    shard_of = assign(ids, 2, durations)
    totals = [sum(durations[i] for i, s in zip(ids, shard_of) if s == k) for k in (0, 1)]
    assert sorted(totals) == [9.0, 9.0]
    assert assign(ids, 2, durations) == shard_of  # deterministic
    by_count = assign(ids, 3, {})
    assert sorted(by_count.count(k) for k in range(3)) == [3, 3, 4]


@pytest.mark.parametrize("text", ["0/3", "4/3", "abc", "1/0", "2"])
def test_a_bad_shard_is_one_line_exit_2(capsys, text):
    rc, out, err = run_cli(capsys, "run", "NumpyCube", "--shard", text)
    assert rc == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "--shard" in err
    with pytest.raises(Exception, match="--shard"):
        Shard.parse(text)


def test_unreadable_shard_durations_are_one_line_exit_2(capsys, tmp_path):
    bad = tmp_path / "durations.json"
    bad.write_text("[1, 2")
    rc, out, err = run_cli(
        capsys, "run", "NumpyCube", "--shard", "1/2", "--shard-durations", str(bad)
    )
    assert rc == 2 and out == ""
    assert err.strip().splitlines() == [
        f"afdb run: error: --shard-durations {bad}: not valid JSON (line 1, column 6: "
        "Expecting ',' delimiter); a truncated file is not a report"
    ]


@pytest.fixture
def two_shards(capsys, tmp_path):
    paths = []
    for k in (1, 2):
        p = tmp_path / f"s{k}.json"
        args = ["run", "NumpyCube", "--checks", "vmap", "-q", "--shard", f"{k}/2"]
        assert run_cli(capsys, *args, "--json", str(p))[0] == 0
        paths.append(p)
    return paths


def test_merge_refuses_overlapping_shards(capsys, tmp_path, two_shards):
    rc, out, err = run_cli(
        capsys, "merge", str(two_shards[0]), str(two_shards[0]), "-o", str(tmp_path / "m.json")
    )
    assert rc == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "shards must not overlap" in err
    assert not (tmp_path / "m.json").exists()


@pytest.mark.parametrize(
    "key, value", [("dtype", "float64"), ("torch_version", "2.14.1"), ("device", "cuda")]
)
def test_merge_refuses_shards_of_different_runs(capsys, tmp_path, two_shards, key, value):
    data = json.loads(two_shards[1].read_text())
    data["metadata"][key] = value
    other = tmp_path / "other.json"
    other.write_text(json.dumps(data))
    rc, out, err = run_cli(
        capsys, "merge", str(two_shards[0]), str(other), "-o", str(tmp_path / "m.json")
    )
    assert rc == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and f"{key} is {value!r}" in err


def test_merge_refuses_an_invalid_report(capsys, tmp_path, two_shards):
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema": "afdb-report/1"}')
    rc, out, err = run_cli(
        capsys, "merge", str(two_shards[0]), str(bad), "-o", str(tmp_path / "m.json")
    )
    assert rc == 2 and out == "" and str(bad) in err and len(err.strip().splitlines()) == 1


def test_github_actions_matrix_is_documented():
    readme = (ROOT / "README.md").read_text()
    assert "--shard ${{ matrix.shard }}/3" in readme
    assert "afdb merge" in readme


def test_fork_pool_workers_keep_to_their_regions_and_steal_from_the_back():
    """Each worker runs a contiguous region of cases from its front (so it draws few
    entries' data); one that is done early takes the rest of the other's from the back."""

    def run_one(i):
        if i < 30:  # the first region is slow: the second worker finishes its own first
            time.sleep(0.02)
        return CaseResult(f"c{i}", "E", "vmap", 0, "s", None, "pass", message=str(os.getpid()))

    done = forkpool.run_forked(
        60, 2, run_one, lambda i, faults: _record(i, "crash"), lambda i, why: _record(i, "error")
    )
    assert sorted(done) == list(range(60))
    pid_of = {i: r.message for i, r in done.items()}
    first, second = pid_of[0], pid_of[30]
    assert first != second
    assert all(pid_of[i] == second for i in range(30, 60))  # its own region, in full
    stolen = [i for i in range(30) if pid_of[i] == second]
    assert stolen, "the idle worker took none of the slow region"
    assert stolen == list(range(30 - len(stolen), 30))  # from the back, contiguous
    assert all(pid_of[i] == first for i in range(30 - len(stolen)))
