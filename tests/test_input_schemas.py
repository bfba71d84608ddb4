"""Every field of every input file is validated by the shipped schemas (issue 21.3, 24).

Hostile values in a shard report, a certificate, a report read by any command, or a
--shard-durations file are one line naming the file and the place, exit 2: never a
traceback, never exit 1 (which reads as "does not conform"). The schemas are validated by
jsonschema, which the light imports (the pytest plugin, the expectations module) never load.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import harness.cli.main as cli
from harness import expectations as ex
from harness.core import schema

ROOT = Path(__file__).resolve().parent.parent
SEL = ["run", "NumpyCube", "--checks", "vmap", "-q", "--no-expectations"]


def run_cli(capsys, *argv):
    rc = cli.main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def refused(rc, err, *needles):
    lines = err.strip().splitlines()
    assert rc == 2, err
    assert len(lines) == 1 and "Traceback" not in err, err
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def two_shards(tmp_path_factory):
    d = tmp_path_factory.mktemp("shards")
    paths = []
    for k in (1, 2):
        p = d / f"s{k}.json"
        assert cli.main([*SEL, "--shard", f"{k}/2", "--json", str(p)]) == 0
        paths.append(p)
    return paths


def variant(src: Path, dst: Path, edit) -> Path:
    data = json.loads(src.read_text())
    edit(data)
    dst.write_text(json.dumps(data))  # Python writes inf as Infinity, as a hostile file would
    return dst


def set_shard(key, value):
    return lambda d: d["metadata"]["shard"].update({key: value})


HOSTILE_SHARDS = [
    (set_shard("positions", "x"), "metadata.shard.positions: 'x' is not of type array"),
    (set_shard("positions", None), "metadata.shard.positions: None is not of type array"),
    (set_shard("positions", float("inf")), "metadata.shard.positions: inf is not of type array"),
    (set_shard("positions", [float("inf")]), "metadata.shard.positions[0]: inf is not of type"),
    (set_shard("positions", [0.5]), "metadata.shard.positions[0]: 0.5 is not of type integer"),
    (set_shard("index", "1"), "metadata.shard.index: '1' is not of type integer"),
    (set_shard("count", 0), "metadata.shard.count: 0 is less than the minimum 1"),
    (set_shard("total_cases", None), "metadata.shard.total_cases: None is not of type integer"),
    (set_shard("fingerprint", "abc"), "metadata.shard.fingerprint: 'abc' is not of type object"),
    (lambda d: d["metadata"].update(shard=None), "metadata.shard: None is not of type object"),
    (lambda d: d["metadata"].update(shard=[1]), "metadata.shard: [1] is not of type object"),
    (lambda d: d["metadata"]["shard"].pop("positions"), "metadata.shard.positions: missing"),
    (lambda d: d["metadata"].update(started=5), "metadata.started: 5 is not of type string"),
    (lambda d: d["metadata"].update(wall_s="1"), "metadata.wall_s: '1' is not of type number"),
]


@pytest.mark.parametrize(("edit", "needle"), HOSTILE_SHARDS)
def test_hostile_shard_metadata_is_one_line_exit_2_for_merge(
    capsys, tmp_path, two_shards, edit, needle
):
    bad = variant(two_shards[1], tmp_path / "bad.json", edit)
    rc, out, err = run_cli(capsys, "merge", str(two_shards[0]), str(bad), "-o", str(tmp_path / "m"))
    refused(rc, err, f"{bad}: invalid report: {needle}")
    assert not (tmp_path / "m").exists()


@pytest.mark.parametrize(("edit", "needle"), HOSTILE_SHARDS[:3])
def test_hostile_shard_metadata_is_one_line_exit_2_for_every_report_reader(
    capsys, tmp_path, two_shards, edit, needle
):
    bad = variant(two_shards[1], tmp_path / "bad.json", edit)
    case_id = json.loads(two_shards[1].read_text())["cases"][0]["id"]
    for argv in (
        ["report", str(bad)],
        ["diff", str(bad), str(two_shards[0])],
        ["diff", str(two_shards[0]), str(bad)],
        ["repro", case_id, "--report", str(bad), "-o", "-"],
    ):
        rc, _, err = run_cli(capsys, *argv)
        refused(rc, err, str(bad), needle.split(":")[0])


# --- certificates ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def small_cert(tmp_path_factory):
    path = tmp_path_factory.mktemp("cert") / "cert.json"
    argv = ["certify", "--device", "cpu", "MulGenerated", "--checks", "vmap", "-q"]
    assert cli.main([*argv, "--json", str(path)]) == 0
    return path


def set_option(key, value):
    return lambda d: d["scope"]["options"].update({key: value})


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        (set_option("batch_sizes", 5), "scope.options.batch_sizes: 5 is not of type array"),
        (set_option("timeout_s", "abc"), "scope.options.timeout_s: 'abc' is not of type null"),
        (set_option("timeout_s", -1), "scope.options.timeout_s: -1 is not more than 0"),
        (set_option("batch_sizes", [1]), "scope.options.batch_sizes[0]: 1 is less than"),
        (set_option("plan_cap", "16"), "scope.options.plan_cap: '16' is not of type integer"),
        (set_option("nested_batch_sizes", None), "scope.options.nested_batch_sizes: None"),
        (lambda d: d["scope"]["options"].pop("plan_cap"), "scope.options.plan_cap: missing"),
        (lambda d: d["scope"].update(seed="0"), "scope.seed: '0' is not of type integer"),
        (lambda d: d["scope"].update(entries=5), "scope.entries: 5"),
        (lambda d: d["backend"]["options"].update(mode=3), "backend.options.mode: 3"),
        (lambda d: d["backend"].update(imports="os"), "backend.imports: 'os' is not of type"),
        (lambda d: d["cases"]["metadata"].update(seed=None), "cases.metadata.seed: None"),
        (lambda d: d["cases"]["cases"][0].update(status="ok"), "cases.cases[0].status: 'ok'"),
    ],
)
def test_hostile_certificate_fields_are_one_line_exit_2(capsys, tmp_path, small_cert, edit, needle):
    bad = variant(small_cert, tmp_path / "bad.json", edit)
    rc, _, err = run_cli(capsys, "certify", "--verify", str(bad))
    refused(rc, err, f"{bad}: invalid certificate: {needle}")


# --- --shard-durations -------------------------------------------------------------------


def test_shard_durations_from_a_fifo_is_one_line_not_a_hang(tmp_path):
    fifo = tmp_path / "durations.json"
    os.mkfifo(fifo)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness.cli",
            *SEL,
            "--shard",
            "1/2",
            "--shard-durations",
            str(fifo),
        ],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        cwd=tmp_path,
        timeout=240,  # before: open() of a FIFO waited for a writer forever
    )
    refused(proc.returncode, proc.stderr, f"--shard-durations {fifo}: is a FIFO (named pipe)")


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ('{"schema": "afdb-report/1", "cases": [{"id": "a", "duration_s": "x"}]}', "cases[0]"),
        ('{"schema": "afdb-report/1", "cases": [{"id": 1, "duration_s": 1}]}', "cases[0].id"),
        ('{"schema": "afdb-report/1", "cases": [{"id": "a", "duration_s": NaN}]}', "cases[0]"),
        ('{"schema": "afdb-report/1", "cases": 5}', "cases: 5 is not of type array"),
        ('{"schema": "afdb-report/1", "cases": [], "metadata": []}', "metadata: []"),
        ('{"cases": []}', "not an afdb report"),
        ('{"schema": "afdb-report/1", "cases": ' + "[" * 99 + "]" * 99 + "}", "nested"),
        ("\xff", "not UTF-8"),
    ],
)
def test_bad_shard_durations_are_one_line_naming_the_place(capsys, tmp_path, text, needle):
    bad = tmp_path / "durations.json"
    bad.write_bytes(text.encode("latin-1") if text == "\xff" else text.encode())
    rc, out, err = run_cli(capsys, *SEL, "--shard", "1/2", "--shard-durations", str(bad))
    assert out == ""
    refused(rc, err, f"--shard-durations {bad}: ", needle)


# --- the schemas and the cost of jsonschema ----------------------------------------------


def test_expectation_statuses_are_the_schemas():
    item = schema.load_schema("expectations")["$defs"]["expectation"]
    assert item["properties"]["status"]["enum"] == list(ex.STATUSES)


def test_light_imports_never_load_jsonschema_and_a_read_does():
    code = (
        "import sys, harness.pytest_plugin, harness.core.schema, harness.expectations, "
        "harness.engine.shard, harness.certify.certificate\n"
        "print('jsonschema' in sys.modules)\n"
        "from harness.core.schema import schema_errors\n"
        "schema_errors({})\n"
        "print('jsonschema' in sys.modules)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        timeout=240,
    )
    assert proc.stdout.split() == ["False", "True"], proc.stdout + proc.stderr


# --- --accept reads its file like every other input --------------------------------------

ROT = ROOT / "examples" / "rotations.py"
CHECK = ["check", f"{ROT}:RotatePoints", "--samples", f"{ROT}:rotation_samples"]
FAST = ["--no-isolate", "--checks", "vmap", "-q"]


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (None, "is a FIFO (named pipe)"),
        ("[1]", 'expected an object with "schema"'),
        ("", "not valid JSON"),
        ('{"schema": "afdb-expectations/1", "expectations": 5}', '"expectations" must be a list'),
    ],
)
def test_accept_refuses_a_file_that_is_not_expectations_in_one_line(
    capsys, tmp_path, content, needle
):
    exp = tmp_path / "exp.json"
    if content is None:
        os.mkfifo(exp)
    else:
        exp.write_text(content)
    rc, out, err = run_cli(capsys, *CHECK, *FAST, "--expectations", str(exp), "--accept")
    refused(rc, err, str(exp), needle)


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ("[1]", 'expected an object with "schema"'),  # before: AttributeError
        ('{"schema": "afdb-expectations/1", "expectations": 5}', "must be a list"),  # TypeError
        ('{"schema": "afdb-expectations/1", "expectations": [{"id": "A"}]}', "status"),
    ],
)
def test_load_previous_refuses_what_is_not_an_expectations_file(tmp_path, content, needle):
    """What --accept reads (the CLI validates the file first; the API did not)."""
    exp = tmp_path / "exp.json"
    exp.write_text(content)
    if needle == "status":  # an unfinished record is kept for --accept to complete
        assert [e.id for e in ex.load_previous(exp).items] == ["A"]
        return
    with pytest.raises(ex.ExpectationsError, match=needle):
        ex.load_previous(exp)
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    with pytest.raises(ex.ExpectationsError, match="FIFO"):
        ex.load_previous(fifo)


@pytest.mark.parametrize("value", ["nan", "inf", "-1"])
def test_a_timeout_a_report_could_not_hold_is_refused(capsys, value):
    """Reports and certificates record the timeout; JSON has no NaN or Infinity."""
    rc, out, err = run_cli(capsys, *SEL, "--timeout", value)
    refused(rc, err, "--timeout must be a positive number of seconds")
