"""What a CI user expects of the command line: --version, -x / --maxfail, --last-failed, case id
prefixes, "did you mean", the closing "wrote ..." and "next:" lines, --accept by root cause,
and afdb certify's progress and verdict lines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autograd_function_db.numpy_ops import NumpyMul
from harness.certify.certificate import coverage
from harness.cli.main import main

ROOT = Path(__file__).resolve().parent.parent
ROT = str(ROOT / "examples" / "rotations.py")
BROKEN = [f"{ROT}:BrokenRotatePoints", "--samples", f"{ROT}:rotation_samples"]
PLANTED = str(ROOT / "tests" / "planted_causes.py")
TWICE = [f"{PLANTED}:TwiceTheGradient", "--samples", f"{PLANTED}:two_samples"]


def run_main(capsys, *argv):
    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def cases(path):
    return json.loads(Path(path).read_text())["cases"]


def bad_ids(path):
    return [c["id"] for c in cases(path) if c["status"] not in ("pass", "unsupported", "xfail")]


def test_version(capsys):
    rc, out, _ = run_main(capsys, "--version")
    assert rc == 0 and out.startswith("afdb 0.1.0 (torch 2.") and "Python 3." in out


# --- -x / --maxfail ---------------------------------------------------------------------------


@pytest.mark.parametrize("isolate", [False, True], ids=["in-process", "fork-workers"])
def test_exitfirst_stops_at_the_first_non_conforming_case(capsys, tmp_path, isolate):
    report = tmp_path / "r.json"
    where = [] if isolate else ["--no-isolate"]
    argv = ["check", *BROKEN, *where, "--checks", "vmap", "-x", "--json", str(report)]
    rc, out, _ = run_main(capsys, *argv)
    assert rc == 1
    assert "stopped after 1 non-conforming case (-x); the cases after it did not run" in out
    data = json.loads(report.read_text())
    assert len(bad_ids(report)) == 1 and len(data["cases"]) < 17  # the full run has 17
    assert data["metadata"]["stopped"].startswith("stopped after 1 non-conforming case")
    assert not data["metadata"]["interrupted"]


def test_maxfail_counts_after_the_expectations(capsys, tmp_path):
    report = tmp_path / "r.json"
    argv = ["check", *BROKEN, "--no-isolate", "--checks", "vmap", "--maxfail", "3"]
    rc, out, _ = run_main(capsys, *argv, "--json", str(report))
    assert rc == 1 and len(bad_ids(report)) == 3 and "(--maxfail 3)" in out
    exp = tmp_path / "exp.json"
    first = bad_ids(report)[0]
    exp.write_text(json.dumps({"schema": "afdb-expectations/1", "expectations": [
        {"id": first, "status": "xfail", "reason": "known"}]}))  # fmt: skip
    rc, _, _ = run_main(capsys, *argv, "--json", str(report), "--expectations", str(exp))
    assert len(bad_ids(report)) == 3  # the xfail does not count: 3 others do
    assert any(c["status"] == "xfail" for c in cases(report))
    rc, _, err = run_main(capsys, *argv[:-1], "0")
    assert rc == 2 and "--maxfail must be >= 1" in err


# --- --last-failed ----------------------------------------------------------------------------


def test_check_last_failed_reruns_exactly_the_failures(capsys, tmp_path):
    first, again = tmp_path / "r.json", tmp_path / "again.json"
    fast = ["--no-isolate", "--checks", "vmap,contract"]
    rc, out, _ = run_main(capsys, "check", *BROKEN, *fast, "--json", str(first))
    assert rc == 1
    assert f"--last-failed {first}` reruns only them" in out  # the next step names the report
    rc, out, _ = run_main(
        capsys, "check", *BROKEN, "--no-isolate", "--last-failed", str(first), "--json", str(again)
    )
    assert rc == 1 and f"rerunning the 25 non-conforming cases of {first}" in out
    assert [c["id"] for c in cases(again)] == bad_ids(first)
    rc, _, err = run_main(capsys, "check", *BROKEN, "--last-failed", str(first), "--seed", "3")
    assert rc == 2 and "leave --seed out" in err


def test_run_last_failed_reruns_the_failures_of_the_database(capsys, tmp_path, monkeypatch):
    report, again = tmp_path / "r.json", tmp_path / "again.json"
    select = ["NumpyMul", "NumpyCube", "--checks", "vmap,jvp"]
    original = NumpyMul.vmap

    def flips_when_x_unbatched(info, in_dims, x, y):
        out, out_dim = original(info, in_dims, x, y)
        return (out.flip(out_dim) if in_dims[0] is None else out), out_dim

    monkeypatch.setattr(NumpyMul, "vmap", staticmethod(flips_when_x_unbatched))
    assert run_main(capsys, "run", *select, "--json", str(report))[0] == 1
    failed = bad_ids(report)
    assert failed and all(i.startswith("NumpyMul/vmap/") for i in failed)
    rc, out, _ = run_main(capsys, "run", "--last-failed", str(report), "--json", str(again))
    assert rc == 1 and [c["id"] for c in cases(again)] == failed
    monkeypatch.undo()  # fixed: the same cases pass
    rc, out, _ = run_main(capsys, "run", "--last-failed", str(report), "--json", str(again))
    assert rc == 0 and {c["status"] for c in cases(again)} == {"pass"}
    assert len(cases(again)) == len(failed)
    rc, out, _ = run_main(capsys, "run", "--last-failed", str(again))
    assert rc == 0 and "nothing to rerun" in out


# --- selection by id prefix, did you mean -----------------------------------------------------


def test_cases_selected_by_id_prefix(capsys, tmp_path):
    report = tmp_path / "r.json"
    rc, out, _ = run_main(capsys, "run", "NumpyMul/vmap/s0", "--json", str(report))
    assert rc == 0 and f"wrote {report}" in out
    ids = [c["id"] for c in cases(report)]
    assert ids and all(i.startswith("NumpyMul/vmap/s0/") for i in ids)
    rc, out, err = run_main(capsys, "run", "NumpyMul/vmpa")
    assert rc == 2 and "did you mean NumpyMul/vmap" in err


def test_unknown_names_and_tags_get_help(capsys):
    rc, _, err = run_main(capsys, "run", "NumpyMull")
    assert rc == 2 and "did you mean 'NumpyMul'" in err
    rc, _, err = run_main(capsys, "run", "tag:op:elementwis")
    assert rc == 2 and "did you mean 'op:elementwise'?" in err
    assert "known tags: backend:numpy, backend:torch," in err


# --- --accept ---------------------------------------------------------------------------------


def test_accept_creates_the_file_with_one_prefix_per_check_of_a_cause(capsys, tmp_path):
    exp = tmp_path / "new" / "exp.json"
    exp.parent.mkdir()
    # --dtypes float64: no float32 leg (whose failures would fold into vjp's cause too)
    argv = ["check", *TWICE, "--no-isolate", "--dtypes", "float64", "--expectations", str(exp)]
    rc, out, _ = run_main(capsys, *argv, "--accept")
    assert rc == 1 and f"wrote {exp} (created, 3 expectations)" in out
    ids = [e["id"] for e in json.loads(exp.read_text())["expectations"]]
    # 6 failing cases (two samples each): one prefix per check, not one id per case
    assert ids == ["TwiceTheGradient/vjp", "TwiceTheGradient/vjp_of_vjp", "TwiceTheGradient/jacrev"]
    # one bug, one cause: jacrev fails where vjp does, so it is in vjp's group (issue 30)
    assert "for one root cause, 6 cases in vjp, vjp_of_vjp, jacrev: TwiceTheGradient/vjp, " in out
    assert "2 cases in jacrev" not in out


def test_accepted_prefixes_never_cover_a_passing_case(capsys, tmp_path):
    exp = tmp_path / "exp.json"
    argv = ["check", *BROKEN, "--no-isolate", "--checks", "vmap,contract", "-q"]
    assert run_main(capsys, *argv, "--expectations", str(exp), "--accept")[0] == 1
    data = json.loads(exp.read_text())
    for e in data["expectations"]:
        e["reason"] = "planted: wrong out_dims"
    exp.write_text(json.dumps(data))
    rc, out, _ = run_main(capsys, *argv, "--expectations", str(exp))
    assert rc == 0, out  # every failure xfail, no pass turned xpass


# --- afdb certify -----------------------------------------------------------------------------


def test_certify_progress_shows_final_statuses_and_the_verdict_its_coverage(capsys):
    argv = ["certify", "--subclass", "torch.testing._internal.two_tensor:TwoTensor"]
    rc, out, _ = run_main(capsys, *argv, "NumpyMul", "CubeGenerated", "--checks", "vmap")
    assert rc == 0
    assert "NumpyMul: 65 unsupported" in out  # numpy cannot take the subclass: not "65 error"
    verdict = next(line for line in out.splitlines() if line.startswith("verdict: "))
    assert verdict.startswith("verdict: conforms on 86 cases, 65 of them unsupported (76%: MOST")
    assert ": vmap 86 (65 unsupported) (digest sha256:" in verdict


def test_the_verdict_line_reads_its_areas():
    areas = [
        {"name": "vmap", "counts": {"pass": 300, "unsupported": 20}, "non_conforming": []},
        {"name": "first-order AD", "counts": {"unsupported": 10}, "non_conforming": []},
        {"name": "cross-backend", "counts": {}, "non_conforming": []},
    ]
    assert coverage(areas, "conforms") == (
        "conforms on 330 cases, 30 of them unsupported: vmap 320 (20 unsupported); "
        "first-order AD 10 (10 unsupported)"
    )
    areas[0]["counts"] = {"pass": 2, "fail": 1, "unsupported": 20}
    areas[0]["non_conforming"] = ["A/vmap/s0"]
    assert coverage(areas, "does not conform").startswith(
        "does not conform: 1 of 33 cases do not conform, 30 of them unsupported (91%: MOST CASES "
        "DID NOT RUN on this backend): vmap 23 (1 not conforming, 20 unsupported)"
    )
