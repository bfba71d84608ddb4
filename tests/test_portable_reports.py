"""Reports that travel: no machine's paths in reports, and ``afdb diff`` across two installs.

The same runs are made from two installs at different paths, each with its own copy of the
suite, torch at another path (a link to the real one: Python names a module's files by the
path it was imported from) and the user's project in another folder. Their reports must
hold no path of either install, and ``afdb diff`` of them must say "no change".
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import harness.cli.main as cli
from harness.core.locations import normalise_locations, portable_argv, portable_path
from harness.core.results import CaseResult, RunResult
from harness.reports import diff

ROOT = Path(__file__).resolve().parent.parent

#: A user's module: a vmap rule that refuses batch dims other than 0 (raising in the user's
#: code) and a jvp whose tangent has the wrong shape (torch raises: a location in torch).
USER_MODULE = """
import torch


class Scale(torch.autograd.Function):
    @staticmethod
    def forward(x):
        return x * 2

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, grad):
        return grad * 2

    @staticmethod
    def jvp(ctx, x_t):
        return x_t.sum(-1)

    @staticmethod
    def vmap(info, in_dims, x):
        if in_dims[0] not in (0, None):
            raise ValueError("only batch dim 0")
        return Scale.apply(x), in_dims[0]


def samples(seed):
    gen = torch.Generator().manual_seed(seed)
    return [(torch.randn(3, 4, generator=gen, dtype=torch.float64),)]
"""


def _install(at: Path) -> dict[str, str]:
    """A copy of the suite at ``at``, torch linked in at ``at/lib/site-packages``, a project
    folder; returns the environment that imports them."""
    ignore = shutil.ignore_patterns("__pycache__")
    for package in ("harness", "autograd_function_db"):
        shutil.copytree(ROOT / package, at / package, ignore=ignore)
    site = at / "lib" / "site-packages"
    site.mkdir(parents=True)
    (site / "torch").symlink_to(Path(torch.__file__).parent, target_is_directory=True)
    (at / "project").mkdir()
    (at / "project" / "portable_userlib.py").write_text(USER_MODULE)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "AFDB"))}
    env["PYTHONPATH"] = os.pathsep.join([str(at), str(site)])
    return env


def _afdb(env: dict[str, str], cwd: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "harness.cli.main", *argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="module")
def two_installs(tmp_path_factory):
    """The same `afdb check` of a file target and `afdb run` of an entry, in two installs."""
    out = {}
    for name in ("venv-one", "elsewhere/venv-two"):
        at = tmp_path_factory.mktemp("install") / name
        env = _install(at)
        project = at / "project"
        where = subprocess.run(  # the suite and torch this install imports
            [sys.executable, "-c", "import harness.core.paths as p, torch; "
             "print(p.PACKAGE_DIR); print(torch.__file__)"],
            cwd=project, env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        check = _afdb(
            env, project, "check", "portable_userlib.py:Scale", "--samples", "portable_userlib.py:samples",
            "--no-isolate", "--checks", "vmap,jvp", "-q", "--json", f"{project}/check.json",
        )  # fmt: skip
        run = _afdb(env, project, "run", "NumpyMul", "--checks", "vmap", "-q", "--json", "run.json")
        out[name] = (at, where, check, run)
    return out


def test_each_install_uses_its_own_suite_and_torch(two_installs):
    for at, where, _, _ in two_installs.values():
        harness_dir, torch_file = where.stdout.split()
        assert harness_dir.startswith(str(at)), where.stdout + where.stderr
        assert torch_file.startswith(str(at)), where.stdout + where.stderr


def test_reports_hold_no_path_of_the_machine(two_installs):
    for at, _, check, run in two_installs.values():
        assert check.returncode == 1, check.stdout + check.stderr
        assert run.returncode == 0, run.stdout + run.stderr
        for report in ("check.json", "run.json"):
            text = (at / "project" / report).read_text()
            for path in (str(at.parent), str(ROOT), os.path.dirname(torch.__file__)):
                assert path not in text, (report, path)
        cases = json.loads((at / "project" / "check.json").read_text())["cases"]
        messages = " ".join(c["message"] for c in cases)
        # the locations are there, written the portable way: the user's file from the
        # project, torch's from its package
        assert "(at portable_userlib.py:" in messages and "in vmap)" in messages
        assert "(at torch/" in messages
        md = json.loads((at / "project" / "check.json").read_text())["metadata"]
        assert md["target_spec"]["target"] == "portable_userlib.py:Scale"
        assert md["target_spec"]["base_dir"] is None
        assert md["command"] == [  # as typed; the absolute --json path under it relative
            "afdb", "check", "portable_userlib.py:Scale", "--samples",
            "portable_userlib.py:samples", "--no-isolate", "--checks", "vmap,jvp", "-q",
            "--json", "check.json",
        ]  # fmt: skip
        run_md = json.loads((at / "project" / "run.json").read_text())["metadata"]
        assert run_md["expectations"] == "harness/known_failures/afdb.json"


def test_diff_of_the_two_installs_says_no_change(two_installs, capsys):
    (one, *_), (two, *_) = two_installs.values()
    for report in ("check.json", "run.json"):
        a, b = one / "project" / report, two / "project" / report
        assert cli.main(["diff", str(a), str(b)]) == 0
        out = capsys.readouterr().out
        assert "NO REGRESSION: no change" in out, out
        assert "source locations" not in out  # the messages are the same text


def test_a_report_repro_of_a_named_target_runs_from_any_directory(
    two_installs, tmp_path, capsys, monkeypatch
):
    at, *_ = next(iter(two_installs.values()))
    report = at / "project" / "check.json"
    case = next(c for c in json.loads(report.read_text())["cases"] if c["status"] != "pass")
    script = tmp_path / "repro.py"
    monkeypatch.chdir(tmp_path)  # not the project
    # a report's target is never imported on its word (issue 21): the user names it, here
    # from another directory
    userlib = at / "project" / "portable_userlib.py"
    rc = cli.main(
        ["repro", case["id"], f"{userlib}:Scale", "--samples", f"{userlib}:samples"]
        + ["--report", str(report), "-o", str(script)]
    )
    assert rc == 0, capsys.readouterr().err
    # the script finds the user's file from its own folder, not from where it runs
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    run = subprocess.run(
        [sys.executable, str(script)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 1, run.stdout + run.stderr
    assert "only batch dim 0" in run.stderr or "REPRODUCED" in run.stdout, run.stdout + run.stderr


# --- afdb diff normalises locations ---------------------------------------------------------


def _case(id_: str, status: str, message: str = "") -> CaseResult:
    entry, check = id_.split("/")[:2]
    return CaseResult(id_, entry, check, 0, "s", None, status, message)


def test_diff_counts_location_only_changes_in_one_line():
    where = "site-packages/torch/autograd/function.py"
    old = RunResult(
        [
            _case("A/vmap/s0", "error", f"ValueError: x (at /home/ci/.venv/lib/{where}:406 in f)"),
            _case(
                "A/vmap/s1", "error", 'ASSERT at "/pytorch/aten/Interpreter.cpp":131 (at a.py:3)'
            ),
            _case(
                "A/vmap/s2", "fail", "wrong values (at /work/proj/portable_userlib.py:10 in vmap)"
            ),
            _case("A/vmap/s3", "fail", "wrong values (at portable_userlib.py:10 in vmap)"),
        ],
        {"suite_version": "0.1.0"},
    )
    new = RunResult(
        [
            _case("A/vmap/s0", "error", "ValueError: x (at torch/autograd/function.py:411 in f)"),
            _case("A/vmap/s1", "error", 'ASSERT at "/src/aten/Interpreter.cpp":140 (at a.py:3)'),
            _case("A/vmap/s2", "fail", "wrong values (at portable_userlib.py:10 in vmap)"),
            _case("A/vmap/s3", "fail", "wrong shapes (at portable_userlib.py:10 in vmap)"),
        ],
        {"suite_version": "0.1.0"},
    )
    d = diff.diff_results(old, new)
    assert [c.id for c in d.changed] == ["A/vmap/s3"]  # its text changed, not only where
    assert d.unchanged == 3 and d.location_only == 3
    text, md = diff.to_text(d), diff.to_markdown(d)
    for rendered in (text, md):
        assert rendered.count("differ only in source locations") == 1
        assert "Interpreter.cpp" not in rendered and "function.py" not in rendered
    assert json.loads(diff.to_json(d))["counts"]["location_only"] == 3


def test_location_normalisation_keeps_the_rest_of_the_message():
    assert (
        normalise_locations('E (at /a/b/torch/x.py:4 in f); y.cpp":9')
        == 'E (at x.py:# in f); y.cpp":#'
    )
    assert (
        normalise_locations("no location: ratio 1:2 at step 3")
        == "no location: ratio 1:2 at step 3"
    )


def test_user_paths_are_recorded_relative_to_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    inside = str(tmp_path / "pkg" / "mod.py")
    assert portable_path(inside) == "pkg/mod.py"
    assert portable_path("rel/x.json") == "rel/x.json"  # as typed
    assert portable_path("/elsewhere/x.json") == "/elsewhere/x.json"  # the user's own path
    assert portable_path(str(ROOT / "harness" / "known_failures" / "afdb.json")) == (
        "harness/known_failures/afdb.json"
    )
    argv = ["check", f"{inside}:F", f"--json={tmp_path}/r.json", "-q", "--md", inside, "/x/r.md"]
    want = ["check", "pkg/mod.py:F", "--json=r.json", "-q", "--md", "pkg/mod.py", "/x/r.md"]
    assert portable_argv(argv) == want


def test_a_report_repro_elsewhere_says_where_to_run_it(two_installs, tmp_path, capsys):
    at, *_ = next(iter(two_installs.values()))
    report = tmp_path / "downloaded.json"  # a CI artifact, away from the project
    shutil.copy(at / "project" / "check.json", report)
    case = next(c for c in json.loads(report.read_text())["cases"] if c["status"] != "pass")
    assert cli.main(["repro", case["id"], "--report", str(report), "-o", "-"]) == 2
    err = capsys.readouterr().err.strip()
    # one line that says what to name (the report's target is never imported on its word)
    assert len(err.splitlines()) == 1 and "name it yourself, after reading it" in err, err
    assert "portable_userlib.py:Scale --samples portable_userlib.py:samples" in err


class _NativeError(torch.autograd.Function):
    """A backward that fails as torch's C++ errors do: a native backtrace with machine
    addresses and this machine's absolute library path after the message."""

    @staticmethod
    def forward(x):
        return x * 2

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, grad):
        lib = os.path.join(sys.prefix, "lib", "python3.11", "site-packages", "torch", "lib")
        raise RuntimeError(
            "Cannot access data pointer of Tensor that doesn't have storage\n"
            "Exception raised from throw_data_ptr_access_error at "
            "/__w/pytorch/pytorch/c10/core/TensorImpl.cpp:358 (most recent call first):\n"
            f"frame #0: c10::Error::Error() + 0x9d (0x7f91bdb0eb8d in {lib}/libc10.so)\n"
            f"while reading {os.getcwd()}/data/weights.npy"
        )


def test_an_exceptions_text_carries_no_native_backtrace_and_no_local_path():
    import harness

    x = torch.randn(3, dtype=torch.float64)
    run = harness.check(_NativeError, samples=[(x,)], checks=["vjp"])
    messages = [r.message for r in run.cases if r.status == "error"]
    assert messages, [(r.status, r.message) for r in run.cases]
    for m in messages:
        assert "Cannot access data pointer of Tensor that doesn't have storage" in m
        assert "Exception raised from" not in m and "0x7f91bdb0eb8d" not in m
        assert sys.prefix not in m and os.getcwd() not in m, m


def test_portable_text_keeps_paths_that_read_the_same_everywhere():
    from harness.core.locations import portable_text

    here = os.path.join(os.getcwd(), "examples", "rotations.py")
    text = f"see /usr/share/doc/x.txt and {here}; torch built at /__w/pytorch/pytorch/a.cpp"
    assert portable_text(text) == (
        "see /usr/share/doc/x.txt and examples/rotations.py; torch built at /__w/pytorch/pytorch/a.cpp"
    )
