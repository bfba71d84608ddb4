"""afdb check / afdb repro: exit statuses, hazards, reports, expectations and every bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from harness import UsageError
from harness.cli.main import main

ROOT = Path(__file__).resolve().parent.parent
ROT = ROOT / "examples" / "rotations.py"
GOOD = [f"{ROT}:RotatePoints", "--samples", f"{ROT}:rotation_samples"]
BROKEN = [f"{ROT}:BrokenRotatePoints", "--samples", f"{ROT}:rotation_samples"]
FAST = ["--no-isolate", "--checks", "vmap", "-q"]
#: As FAST, with the per-check table and the root causes (-q prints the summary line only).
LOUD = ["--no-isolate", "--checks", "vmap"]


def run_main(capsys, *argv):
    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


# --- exit statuses, printed results, reports -------------------------------------------


def test_correct_function_exits_0_and_says_which_batch_sizes(capsys, tmp_path):
    md = tmp_path / "r.md"
    rc, out, err = run_main(
        capsys, "check", *GOOD, "--no-isolate", "--checks", "vmap,contract", "--markdown", str(md)
    )
    assert rc == 0, out + err
    assert "ok   vmap" in out and "ok   contract" in out
    assert "the suite chose batch size 4, nested sizes 4,5" in out
    assert "sample dims use sizes [2, 3]" in md.read_text()
    last = out.strip().splitlines()[-2:]
    assert last[0].endswith("pass") and last[1] == f"wrote {md}"  # what it wrote, last


def test_broken_function_exits_1_naming_the_cases_with_repro_in_the_report(capsys, tmp_path):
    report = tmp_path / "r.json"
    rc, out, _ = run_main(capsys, "check", *BROKEN, *LOUD, "--json", str(report))
    assert rc == 1
    assert "FAIL 8 cases in vmap (one root cause)" in out  # one block per root cause
    assert "BrokenRotatePoints/vmap/s0/in_dims=(0,1),B=4 and 5 more" in out
    data = json.loads(report.read_text())
    assert data["metadata"]["batch_size_note"].startswith("sample dims use sizes [2, 3]")
    bad = [c for c in data["cases"] if c["status"] != "pass"]
    good = [c for c in data["cases"] if c["status"] == "pass"]
    assert bad and good
    assert all("in_dims=(0,0)" not in c["id"] or "out_dims" in c["id"] for c in bad)
    # the file as typed, relative to the working directory when it lies under it
    cwd = os.getcwd()
    rot = os.path.relpath(ROT, cwd) if str(ROT).startswith(cwd + os.sep) else str(ROT)
    for c in bad:
        assert c["repro"].startswith(f"afdb repro '{c['id']}' {rot}:BrokenRotatePoints")
        assert f"--samples {rot}:rotation_samples" in c["repro"]


def test_check_in_a_temporary_project_through_the_console_entry(tmp_path):
    """The default (isolated) mode, from a user's directory, with a module:attr target."""
    (tmp_path / "mylib.py").write_text(ROT.read_text())
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    cmd = [sys.executable, "-m", "harness.cli", "check", "--checks", "vmap"]
    broken = subprocess.run(
        [*cmd, "mylib:BrokenRotatePoints", "--samples", "mylib:rotation_samples"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=240,
    )
    assert broken.returncode == 1, broken.stdout + broken.stderr
    assert "FAIL 8 cases in vmap (one root cause)" in broken.stdout
    assert "cases: BrokenRotatePoints/vmap/s0/in_dims=(None,1),B=4, " in broken.stdout
    assert "reproduce: afdb repro 'BrokenRotatePoints/vmap/s0/in_dims=(None,1),B=4' mylib:" in (
        broken.stdout
    )
    good = subprocess.run(
        [*cmd, "--no-isolate", "mylib:RotatePoints", "--samples", "mylib:rotation_samples"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=240,
    )
    assert good.returncode == 0, good.stdout + good.stderr


def test_capabilities_from_the_command_line(capsys):
    rc, out, _ = run_main(
        capsys,
        "check",
        *GOOD,
        "--no-isolate",
        "--checks",
        "vmap",
        "--inplace-arg",
        "1",
        "--no-double-backward",
    )
    assert rc == 0
    assert "in-place args [1]" in out and "no double backward" in out


# --- hazards ---------------------------------------------------------------------------


def test_fixed_colliding_batch_size_is_refused_naming_argument_dim_and_a_safe_size(capsys):
    rc, out, err = run_main(capsys, "check", *GOOD, *FAST, "--batch-size", "3")
    assert rc == 2
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "argument 0 has size 3 at dim 0" in err
    assert "use --batch-size 4" in err


def test_fixed_safe_batch_size_is_kept_and_the_rest_chosen(capsys):
    rc, out, _ = run_main(
        capsys, "check", *GOOD, "--no-isolate", "--checks", "vmap", "--batch-size", "7"
    )
    assert rc == 0
    assert "B=7" not in out  # ids are in the report; the summary says which sizes
    assert "batch size 4" not in out


def test_registry_entries_keep_the_default_batch_sizes():
    from autograd_function_db import REGISTRY
    from harness.core.options import Options
    from harness.sources.batch_sizes import choose_batch_sizes

    for entry in REGISTRY:
        assert choose_batch_sizes(entry, Options()) == Options(), entry.name


# --- bad input: one line, exit 2, no traceback ------------------------------------------


@pytest.fixture
def project(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "broken_import.py").write_text("import no_such_package_xyz\n")
    (tmp_path / "lib.py").write_text(
        textwrap.dedent(
            """
            import torch
            from rotations_copy import RotatePoints, rotation_samples

            NOT_A_FUNCTION = 3

            def raising_samples(seed):
                raise RuntimeError("no data today")

            def none_samples():
                return None

            def empty_samples(seed):
                return []
            """
        )
    )
    (tmp_path / "rotations_copy.py").write_text(ROT.read_text())
    return tmp_path


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["broken_import.py:F"], "importing broken_import.py failed: ModuleNotFoundError"),
        (["no_such_module:F"], "no module named 'no_such_module'"),
        (["lib.py:Missing"], "has no attribute 'Missing'; it defines"),
        (["lib.py:NOT_A_FUNCTION"], "is not a torch.autograd.Function subclass"),
        (
            ["lib.py:RotatePoints"],
            "has no samples (looked for RotatePoints.samples and a module-level `samples` in lib.py); pass --samples lib.py:NAME",
        ),
        (
            ["lib.py:RotatePoints", "--samples", "lib.py:raising_samples"],
            "raised RuntimeError: no data today",
        ),
        (["lib.py:RotatePoints", "--samples", "lib.py:none_samples"], "returned None"),
        (["lib.py:RotatePoints", "--samples", "lib.py:empty_samples"], "returned no samples"),
        (
            ["lib.py:RotatePoints", "--samples", "lib.py:rotation_samples", "--checks", "vmapp"],
            "unknown check 'vmapp'; known checks: vmap",
        ),
        (
            ["lib.py:RotatePoints", "--samples", "lib.py:rotation_samples", "--batch-size", "1"],
            "--batch-size must be integers >= 2",
        ),
        (
            ["lib.py:RotatePoints", "--samples", "lib.py:rotation_samples", "--batch-size", "x"],
            "--batch-size must be integers",
        ),
        (
            [
                "lib.py:RotatePoints",
                "--samples",
                "lib.py:rotation_samples",
                "--json",
                "lib.py/r.json",
            ],
            "lib.py is a file, not a directory",
        ),
        (
            ["lib.py:RotatePoints", "--samples", "lib.py:rotation_samples", "--json", "."],
            "is a directory",
        ),
        (["RotatePoints"], "must look like package.module:Name or path/to/file.py:Name"),
    ],
)
def test_bad_input_is_one_line_exit_2(project, capsys, argv, expected):
    rc, out, err = run_main(capsys, "check", *argv, "--no-isolate")
    assert rc == 2, out + err
    assert expected in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_debug_shows_the_traceback(project):
    with pytest.raises(UsageError, match="has no attribute"):
        main(["check", "lib.py:Missing", "--debug"])


def test_malformed_expectations_file_is_refused_with_line_and_problem(project, capsys):
    (project / "exp.json").write_text(
        '{"schema": "afdb-expectations/1",\n "expectations": [\n'
        '  {"id": "X/vmap", "status": "xfail", "reason": "a"},\n'
        '  {"id": "Y", "status": "xfail"}\n ]}\n'
    )
    rc, _, err = run_main(capsys, "check", *GOOD, *FAST, "--expectations", "exp.json")
    assert rc == 2
    assert "exp.json: line 4: Y: a reason is required" in err


# --- expectations: xfail, xpass, unmatched, --accept -------------------------------------


def _write(path, items):
    path.write_text(json.dumps({"schema": "afdb-expectations/1", "expectations": items}))


def test_expectations_xfail_xpass_unmatched_and_accept(tmp_path, capsys):
    exp = tmp_path / "exp.json"
    _write(exp, [{"id": "BrokenRotatePoints/vmap", "status": "xfail", "reason": "issue #1"}])
    rc, out, err = run_main(capsys, "check", *BROKEN, *LOUD, "--expectations", str(exp))
    assert rc == 1  # the passing cases of the prefix are xpass
    assert "XPASS" in out and "xfail" in out
    _write(
        exp,
        [
            {
                "id": "BrokenRotatePoints/vmap/s0/in_dims=(0,1),B=4",
                "status": "xfail",
                "reason": "#1",
            },
            {"id": "Nothing/vmap", "status": "skip", "reason": "gone"},
        ],
    )
    rc, out, err = run_main(capsys, "check", *BROKEN, *FAST, "--expectations", str(exp))
    assert rc == 1
    assert "expectation 'Nothing/vmap' matches no case" in err
    rc, out, _ = run_main(capsys, "check", *BROKEN, *FAST, "--expectations", str(exp), "--accept")
    assert rc == 1 and "need a reason" in out
    data = json.loads(exp.read_text())
    ids = {e["id"]: e for e in data["expectations"]}
    assert ids["BrokenRotatePoints/vmap/s0/in_dims=(0,1),B=4"]["reason"] == "#1"
    assert "Nothing/vmap" not in ids
    assert any(e["reason"].startswith("TODO") for e in ids.values())
    rc, _, err = run_main(capsys, "check", *BROKEN, *FAST, "--expectations", str(exp))
    assert rc == 2 and "replace the placeholder" in err
    for e in data["expectations"]:
        e["reason"] = "known: out_dims bug"
    exp.write_text(json.dumps(data))
    rc, out, _ = run_main(capsys, "check", *BROKEN, *FAST, "--expectations", str(exp))
    assert rc == 0, out


# --- reproducers -------------------------------------------------------------------------


def test_repro_script_reproduces_the_failure_standalone(tmp_path, capsys):
    report = tmp_path / "r.json"
    run_main(
        capsys,
        "check",
        *BROKEN,
        "--no-isolate",
        "--checks",
        "vmap_nested,contract",
        "-q",
        "--json",
        str(report),
    )
    cases = json.loads(report.read_text())["cases"]
    nested = next(c for c in cases if c["check"] == "vmap_nested" and c["status"] == "fail")
    contract = next(c for c in cases if c["check"] == "contract" and c["status"] == "fail")
    script = tmp_path / "repro_nested.py"
    rc, out, _ = run_main(capsys, "repro", nested["id"], *BROKEN, "-o", str(script))
    assert rc == 0 and str(script) in out
    script2 = tmp_path / "repro_contract.py"
    rc, _, _ = run_main(
        capsys, "repro", contract["id"], *BROKEN, "--report", str(report), "-o", str(script2)
    )  # the report's Function, named by the user (a report's word imports nothing)
    assert rc == 0
    text = script.read_text()
    assert "import harness" not in text and "from harness" not in text
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    for path, expect in ((script, "shape"), (script2, "info.batch_size")):
        proc = subprocess.run(
            [sys.executable, "-I", str(path)],
            capture_output=True,
            text=True,
            env=env,
            cwd=tmp_path,
            timeout=120,
        )
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert "REPRODUCED" in proc.stdout and expect in proc.stdout


def test_repro_of_an_unknown_case_suggests_close_ids(capsys):
    rc, _, err = run_main(capsys, "repro", "BrokenRotatePoints/vmap/s0/in_dims=(0,1)", *BROKEN)
    assert rc == 2
    assert "did you mean BrokenRotatePoints/vmap/s0/in_dims=(0,1),B=4" in err


def test_run_in_xdist_workers_gives_the_in_process_results(capsys, tmp_path):
    one, two = tmp_path / "one.json", tmp_path / "two.json"
    args = ["run", "NumpyCube", "--checks", "vmap", "-q"]
    assert run_main(capsys, *args, "--json", str(one))[0] == 0
    assert run_main(capsys, *args, "-n", "2", "--json", str(two))[0] == 0
    a = [(c["id"], c["status"]) for c in json.loads(one.read_text())["cases"]]
    b = [(c["id"], c["status"]) for c in json.loads(two.read_text())["cases"]]
    assert a == b and a
