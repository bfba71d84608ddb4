"""A certificate or a report is data: checking or reproducing one never imports code it names.

``afdb certify --verify`` imports only what the user names (--subclass, --compile,
--import), refuses in one line (exit 2) when the certificate's backend needs more, and
refuses a named backend that is not the certificate's. ``afdb repro --report`` imports
a report's Function only when the user names it. Each planted module writes a marker
file when imported: the marker must never appear.
"""

from __future__ import annotations

import json
import textwrap

import pytest

from harness.certify.certificate import digest, read_certificate
from harness.cli.main import main

TWO = "torch.testing._internal.two_tensor:TwoTensor"


def _cert(tmp_path_factory, name, *argv):
    path = tmp_path_factory.mktemp(name) / f"{name}.json"
    rc = main(["certify", *argv, "MulGenerated", "-q", "--json", str(path)])
    assert rc == 0
    return path


@pytest.fixture(scope="module")
def cpu_cert(tmp_path_factory):
    return _cert(tmp_path_factory, "cpu", "--device", "cpu", "--checks", "vmap")


@pytest.fixture(scope="module")
def two_cert(tmp_path_factory):
    return _cert(tmp_path_factory, "two", "--subclass", TWO, "--checks", "vmap")


@pytest.fixture(scope="module")
def eager_cert(tmp_path_factory):
    return _cert(tmp_path_factory, "eager", "--compile", "eager", "--checks", "compiled_vmap")


def _evil_module(folder, name):
    """A module that writes ``folder/MARKER`` when imported, defining a tensor subclass T."""
    path = folder / f"{name}.py"
    path.write_text(
        textwrap.dedent(
            f"""
            import pathlib
            import torch
            pathlib.Path({str(folder / "MARKER")!r}).write_text("imported")
            class T(torch.Tensor):
                pass
            """
        )
    )
    return path


def _forged(src, dst, edit):
    """A copy of a certificate with ``edit`` applied and its digest recomputed (as anyone
    can: the digest says the file was not edited by accident, not who wrote it)."""
    cert = json.loads(src.read_text())
    edit(cert)
    cert["digest"] = digest(cert)
    dst.write_text(json.dumps(cert))
    read_certificate(dst)  # a valid certificate: only its backend is hostile
    return dst


def _verify(capsys, *argv):
    rc = main(["certify", "--verify", *map(str, argv), "-q"])
    out = capsys.readouterr()
    return rc, out.out, out.err.strip()


def test_verify_never_imports_the_subclass_file_a_certificate_names(cpu_cert, tmp_path, capsys):
    evil = _evil_module(tmp_path, "evil")
    spec = f"{evil}:T"

    def edit(cert):
        cert["backend"] = {"kind": "subclass", "name": spec, "options": {}, "imports": []}

    forged = _forged(cpu_cert, tmp_path / "forged.json", edit)
    rc, out, err = _verify(capsys, forged)
    assert not (tmp_path / "MARKER").exists()
    assert rc == 2 and out == "" and len(err.splitlines()) == 1, err
    assert f"this certificate's backend is the subclass {spec}; to verify it, name it " in err
    assert "yourself with --subclass, after reading it" in err


def test_verify_never_imports_a_module_a_certificate_lists(cpu_cert, tmp_path, capsys, monkeypatch):
    _evil_module(tmp_path, "afdb_evil_trust_module")
    monkeypatch.syspath_prepend(str(tmp_path))

    def edit(cert):
        cert["backend"]["imports"] = ["afdb_evil_trust_module"]

    forged = _forged(cpu_cert, tmp_path / "forged.json", edit)
    rc, out, err = _verify(capsys, forged)
    assert not (tmp_path / "MARKER").exists()
    assert rc == 2 and len(err.splitlines()) == 1, err
    assert "imports afdb_evil_trust_module first; to verify it, name it yourself with --import" in (
        err
    )


def test_verify_never_looks_up_a_compile_backend_torch_does_not_register(
    cpu_cert, tmp_path, capsys
):
    def edit(cert):
        cert["backend"] = {"kind": "compile", "name": "afdb_evil", "options": {}, "imports": []}

    forged = _forged(cpu_cert, tmp_path / "forged.json", edit)
    rc, _, err = _verify(capsys, forged)
    assert rc == 2 and len(err.splitlines()) == 1, err
    assert "torch.compile backend afdb_evil, which torch does not register itself" in err


def test_a_certificate_records_its_expectations_files_not_a_temporary_merge(two_cert):
    cert = read_certificate(two_cert)
    recorded = cert["cases"]["metadata"]["expectations"]
    assert recorded == cert["scope"]["expectations"] and " + " in recorded
    assert not recorded.startswith("/")


def test_verify_a_subclass_named_by_the_user(two_cert, capsys):
    rc, out, err = _verify(capsys, two_cert, "--subclass", TWO)
    assert rc == 0, out + err
    assert "statuses match" in out


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--subclass", "tests.planted_backends:ExactTensor"], "is not the certificate's backend"),
        (["--compile", "eager"], "but you named --compile eager"),
        (["--subclass", TWO, "--import", "tests.planted_backends"], "is not among the"),
        (["--subclass", TWO, "--device", "cpu"], "name at most one backend"),
    ],
)
def test_verify_refuses_a_named_backend_that_is_not_the_certificates(two_cert, capsys, argv, words):
    rc, out, err = _verify(capsys, two_cert, *argv)
    assert rc == 2 and out == "" and len(err.splitlines()) == 1, err
    assert words in err


def test_verify_a_builtin_compile_backend_needs_no_name_and_checks_a_named_one(eager_cert, capsys):
    rc, out, err = _verify(capsys, eager_cert)
    assert rc == 0, out + err
    rc, out, err = _verify(capsys, eager_cert, "--compile", "eager")
    assert rc == 0, out + err
    for argv, words in (
        (["--compile", "aot_eager"], "--compile aot_eager is not the certificate's backend"),
        (["--mode", "max-autotune"], "--mode max-autotune is not the certificate's"),
        (["--device", "cpu"], "but you named --device cpu"),
    ):
        rc, out, err = _verify(capsys, eager_cert, *argv)
        assert rc == 2 and len(err.splitlines()) == 1 and words in err, err


@pytest.mark.parametrize("recorded", ["../outside.json", "/etc/afdb-outside.json"])
def test_verify_reads_no_expectations_file_outside_the_suite(cpu_cert, tmp_path, capsys, recorded):
    def edit(cert):
        cert["scope"]["expectations"] = recorded

    forged = _forged(cpu_cert, tmp_path / "forged.json", edit)
    rc, _, err = _verify(capsys, forged)
    assert rc == 2 and len(err.splitlines()) == 1, err
    assert "not a file of the suite; give the file with --expectations" in err


# --- afdb repro --report ---------------------------------------------------------------------


def _report_of(tmp_path, target, samples):
    """A report of a user Function (its metadata names the Function's module)."""
    path = tmp_path / "report.json"
    rc = main(
        [
            "check",
            target,
            "--samples",
            samples,
            "--checks",
            "vmap",
            "--no-isolate",
            "-q",
            "--json",
            str(path),
        ]
    )
    assert rc == 0
    return path


def test_repro_never_imports_the_function_a_report_names(tmp_path, capsys):
    report = _report_of(
        tmp_path, "tests/hostile_state.py:Correct", "tests/hostile_state.py:samples"
    )
    evil = _evil_module(tmp_path, "evil_function")
    data = json.loads(report.read_text())
    data["metadata"]["target_spec"].update(target=f"{evil}:Correct", samples=f"{evil}:samples")
    report.write_text(json.dumps(data))
    case = data["cases"][0]["id"]
    rc = main(["repro", case, "--report", str(report), "-o", str(tmp_path / "r.py")])
    err = capsys.readouterr().err.strip()
    assert not (tmp_path / "MARKER").exists()
    assert rc == 2 and len(err.splitlines()) == 1, err
    assert "which afdb does not import on a report's word" in err
    assert f"name it yourself, after reading it: afdb repro {case}" in err or (
        "name it yourself, after reading it: afdb repro '" in err
    )
    assert not (tmp_path / "r.py").exists()


def test_repro_of_a_report_with_the_function_named(tmp_path, capsys):
    target, samples = "tests/hostile_state.py:Correct", "tests/hostile_state.py:samples"
    report = _report_of(tmp_path, target, samples)
    case = json.loads(report.read_text())["cases"][0]["id"]
    script = tmp_path / "r.py"
    argv = ["repro", case, target, "--samples", samples, "--report", str(report)]
    rc = main([*argv, "-o", str(script)])
    assert rc == 0, capsys.readouterr()
    assert "hostile_state" in script.read_text()
