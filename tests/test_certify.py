"""afdb certify: certificates for the three backend kinds, --verify, the backend checks
catching planted bugs (and passing their correct twins), and every bad input.

Kept small: one or two entries and a --checks subset per run.
"""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from harness.certify.certificate import CERT_SCHEMA, digest, read_certificate, to_html, to_markdown
from harness.cli.main import main

TWO = "torch.testing._internal.two_tensor:TwoTensor"


def certify(capsys, tmp_path, *argv, name="cert"):
    path = tmp_path / f"{name}.json"
    rc = main(["certify", *argv, "--json", str(path), "-q"])
    out = capsys.readouterr()
    cert = read_certificate(path) if path.exists() else None
    return rc, cert, out.out + out.err


def area(cert, name):
    return next(a for a in cert["areas"] if a["name"] == name)


def statuses(cert):
    return {c["id"]: c["status"] for c in cert["cases"]["cases"]}


# --- the CPU reference, the certificate and --verify -----------------------------------


@pytest.fixture(scope="module")
def cpu_cert(tmp_path_factory):
    path = tmp_path_factory.mktemp("cpu") / "cpu.json"
    rc = main(
        [
            "certify",
            "--device",
            "cpu",
            "MulGenerated",
            "--checks",
            "vmap,vjp",
            "-q",
            "--json",
            str(path),
        ]
    )
    assert rc == 0
    return path


def test_cpu_certificate_has_backend_environment_areas_and_digest(cpu_cert):
    cert = read_certificate(cpu_cert)
    assert cert["schema"] == CERT_SCHEMA
    assert cert["backend"] == {"kind": "device", "name": "cpu", "options": {}, "imports": []}
    env = cert["environment"]
    assert env["torch_version"] == torch.__version__ and env["device"] == "cpu" and env["cpu"]
    assert area(cert, "vmap")["verdict"] == "conforms"
    assert area(cert, "first-order AD")["verdict"] == "conforms"
    assert area(cert, "second-order AD")["verdict"] == "not applicable"
    assert "reference" in area(cert, "cross-backend")["note"]
    assert cert["verdict"] == "conforms"
    assert cert["digest"] == digest(cert)
    assert cert["cases"]["schema"] == "afdb-report/1"
    md, html = to_markdown(cert), to_html(cert)
    assert "Verdict: conforms" in md and "| vmap | **conforms**" in md
    assert "Verdict: conforms" in html and "<td>vmap</td>" in html


def test_verify_matches(capsys, cpu_cert):
    rc = main(["certify", "--verify", str(cpu_cert), "-q"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "all" in out and "statuses match" in out


def test_verify_detects_an_edited_certificate(capsys, cpu_cert, tmp_path):
    cert = json.loads(cpu_cert.read_text())
    case = cert["cases"]["cases"][0]
    case["status"] = "skip"  # the summary follows, so the report itself still validates
    cert["cases"]["summary"]["counts"] = {"pass": len(cert["cases"]["cases"]) - 1, "skip": 1}
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(cert))
    rc = main(["certify", "--verify", str(edited)])
    out = capsys.readouterr().out
    assert rc == 1
    assert "the certificate was edited" in out and "digest" in out


def test_verify_detects_a_changed_status(capsys, cpu_cert, tmp_path):
    """A consistent certificate (digest and areas recomputed) whose statuses this machine
    does not reproduce: --verify lists the differing case."""
    from harness.certify.certificate import compute_areas, overall_verdict

    cert = json.loads(cpu_cert.read_text())
    case = cert["cases"]["cases"][0]
    case["status"] = "fail"
    cases = cert["cases"]
    cases["summary"] = {
        "total": len(cases["cases"]),
        "ok": False,
        "counts": {"pass": len(cases["cases"]) - 1, "fail": 1},
    }
    cert["areas"] = compute_areas(cases["cases"], cert["scope"]["checks"], cert["area_notes"])
    cert["verdict"] = overall_verdict(cert["areas"], False)
    cert["digest"] = digest(cert)
    forged = tmp_path / "forged.json"
    forged.write_text(json.dumps(cert))
    rc = main(["certify", "--verify", str(forged), "-q"])
    out = capsys.readouterr().out
    assert rc == 1
    assert f"{case['id']}: certificate fail, this machine pass" in out


# --- subclass backends -----------------------------------------------------------------


def test_two_tensor_as_written(capsys, tmp_path):
    rc, cert, out = certify(
        capsys,
        tmp_path,
        "--subclass",
        TWO,
        "MulGenerated",
        "NumpyMul",
        "--checks",
        "vmap,cross_backend",
    )
    assert rc == 0, out
    st = statuses(cert)
    assert all(s == "pass" for cid, s in st.items() if cid.startswith("MulGenerated/"))
    numpy_cases = [c for c in cert["cases"]["cases"] if c["entry"] == "NumpyMul"]
    assert numpy_cases and all(c["status"] == "unsupported" for c in numpy_cases)
    assert ".numpy() is not supported for tensor subclasses" in numpy_cases[0]["message"]
    assert cert["environment"]["subclass_wrap"] == "TwoTensor(t, t.clone())"
    assert area(cert, "cross-backend")["verdict"] == "conforms"


def test_example_backend_from_a_file(capsys, tmp_path):
    rc, cert, out = certify(
        capsys,
        tmp_path,
        "--subclass",
        "examples/backends/tagged_tensor.py:TaggedTensor",
        "MulGenerated",
        "--checks",
        "vmap,jvp,cross_backend",
    )
    assert rc == 0, out
    assert cert["environment"]["subclass_wrap"] == "TaggedTensor.from_tensor(t)"
    assert set(statuses(cert).values()) == {"pass"}


def test_cross_backend_catches_a_skewed_subclass_and_passes_its_twin(capsys, tmp_path):
    args = ["MulGenerated", "--checks", "cross_backend"]
    rc, cert, out = certify(
        capsys, tmp_path, "--subclass", "tests.planted_backends:SkewedTensor", *args, name="s"
    )
    assert rc == 1, out
    bad = area(cert, "cross-backend")
    assert bad["verdict"] == "does not conform" and bad["non_conforming"]
    failed = next(c for c in cert["cases"]["cases"] if c["status"] == "fail")
    assert (
        "cross_backend (subclass tests.planted_backends:SkewedTensor vs cpu): outputs"
        in (failed["message"])
    )
    assert failed["repro"].startswith(
        "afdb certify --subclass tests.planted_backends:SkewedTensor MulGenerated --checks "
        "cross_backend --seed 0"
    )
    rc, cert, out = certify(
        capsys, tmp_path, "--subclass", "tests.planted_backends:ExactTensor", *args, name="e"
    )
    assert rc == 0, out
    assert area(cert, "cross-backend")["verdict"] == "conforms"


def test_subclass_backend_in_worker_processes(capsys, tmp_path):
    rc, cert, out = certify(
        capsys,
        tmp_path,
        "--subclass",
        "tests.planted_backends:SkewedTensor",
        "MulGenerated",
        "--checks",
        "cross_backend",
        "-n",
        "1",
    )
    assert rc == 1, out
    assert area(cert, "cross-backend")["verdict"] == "does not conform"


# --- compile backends ------------------------------------------------------------------


def test_compile_catches_a_skewed_backend_and_passes_its_twin(capsys, tmp_path):
    args = ["--import", "tests.planted_backends", "MulGenerated", "--checks", "vmap,vjp"]
    rc, cert, out = certify(capsys, tmp_path, "--compile", "afdb_test_skewed", *args, name="s")
    assert rc == 1, out
    st = statuses(cert)
    assert {cid.split("/")[1] for cid, s in st.items() if s == "fail"} == {
        "compiled_vmap",
        "compiled_vjp",
        "vjp_of_compiled",
    }
    inside = [c for c in cert["cases"]["cases"] if c["check"] == "vmap_of_compiled"]
    assert inside and all(c["status"] == "unsupported" for c in inside)
    assert "dynamo compiled no graph" in inside[0]["message"]
    assert "tests.planted_backends" in cert["environment"]["imports"]
    assert area(cert, "vmap")["verdict"] == "not applicable"
    assert "representative subset" in cert["scope"]["plans"]
    rc, cert, out = certify(capsys, tmp_path, "--compile", "afdb_test_exact", *args, name="e")
    assert rc == 0, out
    assert area(cert, "compile")["verdict"] == "conforms"


@pytest.mark.skipif(shutil.which("g++") is None, reason="inductor needs a C++ compiler")
def test_inductor_one_case(capsys, tmp_path):
    rc, cert, out = certify(
        capsys, tmp_path, "--compile", "inductor", "MulGenerated", "--checks", "compiled_vmap"
    )
    assert rc == 0, out
    assert set(statuses(cert).values()) == {"pass"}


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here")
def test_cuda_device(capsys, tmp_path):
    rc, cert, out = certify(
        capsys,
        tmp_path,
        "--device",
        "cuda",
        "MulGenerated",
        "NumpyMul",
        "--checks",
        "vmap,cross_backend",
    )
    assert rc == 0, out
    assert cert["environment"]["device_name"] and area(cert, "cross-backend")["verdict"] == (
        "conforms"
    )


# --- bad input: one line, exit 2 -------------------------------------------------------


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--device", "nosuchdevice"], "--device 'nosuchdevice': not usable here"),
        (["--device", "cpu", "--import", "no_such_module_afdb"], "--import no_such_module_afdb"),
        (["--subclass", "tests.planted_backends:NotATensor"], "is not a subclass of torch.Tensor"),
        (["--subclass", "no_such_module_afdb:X"], "no module named 'no_such_module_afdb'"),
        (["--compile", "no_such_backend"], "unknown torch.compile backend"),
        (["--device", "cpu", "--compile", "eager"], "give exactly one of"),
        ([], "give exactly one of"),
        (["--compile", "eager", "--checks", "contract"], "unknown check 'contract'"),
        (["--device", "cpu", "--mode", "default"], "--mode goes with --compile"),
    ],
)
def test_bad_input_one_line_exit_2(capsys, argv, words):
    rc = main(["certify", *argv])
    err = capsys.readouterr().err
    assert rc == 2
    assert words in err and len(err.strip().splitlines()) == 1, err


def test_certificate_of_another_schema_exit_2(capsys, tmp_path):
    report = tmp_path / "report.json"
    report.write_text(json.dumps({"schema": "afdb-report/1", "cases": []}))
    rc = main(["certify", "--verify", str(report)])
    err = capsys.readouterr().err
    assert rc == 2 and "not an afdb certificate" in err and len(err.strip().splitlines()) == 1
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps({"schema": CERT_SCHEMA, "backend": {}}))
    rc = main(["certify", "--verify", str(broken)])
    err = capsys.readouterr().err
    assert rc == 2 and "invalid certificate" in err


def test_reclassify_only_torch_limits():
    from harness.certify.backends import Backend, reclassify
    from harness.core.results import CaseResult

    def case(msg):
        return CaseResult("E/vmap", "E", "vmap", 0, "", None, "error", msg)

    limit = case(
        "vmap: the Function raised RuntimeError: .numpy() is not supported for tensor subclasses."
    )
    own = case("vmap: the Function raised ValueError: bad shape")
    assert reclassify([limit, own], Backend("subclass", TWO)) == 1
    assert limit.status == "unsupported" and own.status == "error"
    assert reclassify([case(limit.message)], Backend("compile", "eager")) == 0


def test_committed_backend_expectations_apply(capsys, tmp_path):
    """The TwoTensor forward-over-reverse torch bug is xfail through the backend's file."""
    rc, cert, out = certify(
        capsys, tmp_path, "--subclass", TWO, "ScaleAndSquare", "--checks", "jvp_of_vjp"
    )
    assert rc == 0, out
    assert set(statuses(cert).values()) == {"xfail"}
    assert (
        "subclass-torch-testing-_internal-two_tensor-TwoTensor.json"
        in (cert["scope"]["expectations"])
    )
    # the run inside names the same files, never the merged temporary copy
    assert cert["cases"]["metadata"]["expectations"] == cert["scope"]["expectations"]
    assert "afdb-certify-" not in json.dumps(cert)


def test_every_catalogue_check_belongs_to_a_named_area():
    # a new check that fell into "other" made a certificate's areas say nothing about it
    from harness.certify.certificate import OTHER_AREA, area_of
    from harness.checks.catalogue import check_names

    assert [c for c in check_names() if area_of(c) == OTHER_AREA] == []
