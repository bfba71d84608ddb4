"""A recording is data: read back strictly, a damaged or hostile one refused in one line.

Each hostile recording is a valid one with one thing planted (the valid one loads: the
twin), and the reader must name the file and the place, execute nothing, and allocate
nothing the file does not hold.
"""

from __future__ import annotations

import json
import os
import pickle
import struct
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from harness.core.errors import UsageError
from harness.recording import load_recording, recording, tensorfile
from tests import recording_functions as rf
from tests.recording_dir import make_rec_dir, read_doc, write_doc

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def rec_dir(tmp_path, monkeypatch):
    return make_rec_dir(tmp_path, monkeypatch)


def _tensor_file(rec_dir: Path, target_suffix: str = "Scale") -> Path:
    fn = next(f for f in read_doc(rec_dir)["functions"] if f["target"].endswith(target_suffix))
    return rec_dir / "tensors" / fn["tensors"]


def _refused(rec_dir: Path, *words: str) -> str:
    with pytest.raises(UsageError) as info:
        load_recording(rec_dir)
    message = str(info.value)
    assert "\n" not in message and "Traceback" not in message, message
    for word in words:
        assert word in message, message
    return message


class Boom:
    """Unpickling this writes a marker file: proof that a reader ran pickle."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.write_text, (Path(self.marker), "pickle ran"))


def test_the_valid_twin_loads(rec_dir):
    rec = load_recording(rec_dir)
    assert [f.target.rsplit(":", 1)[1] for f in rec.functions] == ["Legacy", "Scale"]
    (call,) = rec.function("tests.recording_functions:Scale").calls
    assert call.args[0].stride() == (1, 3)


def test_a_pickle_payload_as_a_tensor_file_is_refused_and_never_run(rec_dir, tmp_path):
    marker = tmp_path / "marker"
    _tensor_file(rec_dir).write_bytes(pickle.dumps(Boom(str(marker))))
    _refused(rec_dir, "rec/tensors/", "Scale")
    assert not marker.exists()
    torch.save({"x": torch.ones(2), "boom": Boom(str(marker))}, _tensor_file(rec_dir))
    _refused(rec_dir, "rec/tensors/")
    assert not marker.exists()


def test_a_pickle_payload_as_the_index_is_refused_and_never_run(rec_dir, tmp_path):
    marker = tmp_path / "marker"
    (rec_dir / "recording.json").write_bytes(pickle.dumps(Boom(str(marker))))
    _refused(rec_dir, "rec/recording.json")
    assert not marker.exists()


def test_a_shape_that_disagrees_with_the_tensor_file_is_refused(rec_dir):
    doc = read_doc(rec_dir)
    scale = next(f for f in doc["functions"] if f["target"].endswith("Scale"))
    scale["calls"][0]["args"][0]["tensor"]["shape"] = [3, 3]
    write_doc(rec_dir, doc)
    _refused(rec_dir, "rec/recording.json: functions[1].calls[0]", "shape [3, 3]")


def _header(entries: dict, body: bytes) -> bytes:
    text = json.dumps(entries).encode()
    return struct.pack("<Q", len(text)) + text + body


def test_huge_declared_sizes_are_refused_before_anything_is_allocated(rec_dir):
    path = _tensor_file(rec_dir)
    huge = {"c0.0": {"dtype": "F32", "shape": [10**12], "data_offsets": [0, 4 * 10**12]}}
    path.write_bytes(_header(huge, b"\0" * 24))
    _refused(rec_dir, "'c0.0'", "past the 24 data bytes")
    lying = {"c0.0": {"dtype": "F32", "shape": [10**9, 10**9], "data_offsets": [0, 24]}}
    path.write_bytes(_header(lying, b"\0" * 24))
    _refused(rec_dir, "needs 4000000000000000000 bytes, data_offsets give 24")
    path.write_bytes(struct.pack("<Q", 1 << 60) + b"{}")
    _refused(rec_dir, "declares a header of 1152921504606846976 bytes")


def test_a_huge_expand_of_a_small_tensor_is_refused(rec_dir):
    """An expanded tensor is stored once; a shape that would make its copy huge is not
    taken on trust."""
    with recording("exp", program="-m demo"):
        rf.Scale.apply(torch.ones(1).expand(5), 2.0)
    doc = read_doc(Path("exp"))
    assert load_recording("exp").functions[0].calls[0].args[0].stride() == (0,)  # the twin
    doc["functions"][0]["calls"][0]["args"][0]["tensor"]["shape"] = [10**12]
    write_doc(Path("exp"), doc)
    _refused(Path("exp"), "functions[0].calls[0]", "over the 4294967296-byte limit")


def test_overlapping_or_trailing_tensor_data_is_refused(rec_dir):
    path = _tensor_file(rec_dir)
    two = {
        "c0.0": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},
        "c0.1": {"dtype": "F32", "shape": [1], "data_offsets": [20, 24]},
    }
    path.write_bytes(_header(two, b"\0" * 24))
    _refused(rec_dir, "overlap or leave a gap")
    one = {"c0.0": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}}
    path.write_bytes(_header(one, b"\0" * 32))
    _refused(rec_dir, "8 bytes after the last tensor")


@pytest.mark.parametrize(
    "name",
    [
        "../../outside.safetensors",
        "/etc/passwd",
        "..safetensors",
        "a/b.safetensors",
        ".hidden.safetensors",
    ],
)
def test_path_traversal_in_file_names_is_refused(rec_dir, name):
    doc = read_doc(rec_dir)
    doc["functions"][0]["tensors"] = name
    write_doc(rec_dir, doc)
    _refused(rec_dir, "rec/recording.json", "functions[0].tensors")


def test_a_tensor_file_that_is_a_link_out_of_the_folder_is_refused(rec_dir, tmp_path):
    path = _tensor_file(rec_dir)
    outside = tmp_path / "outside.safetensors"
    outside.write_bytes(path.read_bytes())  # a valid file: only where it is is wrong
    path.unlink()
    os.symlink(outside, path)
    _refused(rec_dir, "is a link; a recording holds no links")


@pytest.mark.parametrize(
    ("plant", "words"),
    [
        (
            lambda d: d["functions"][0].__setitem__("call_count", "3"),
            "functions[0].call_count: '3' is not of type integer",
        ),
        (lambda d: d["functions"][0].__setitem__("kind", "module"), "functions[0].kind"),
        (lambda d: d.__setitem__("schema", "afdb-recording/9"), "schema 'afdb-recording/9'"),
        (
            lambda d: d["functions"][1]["calls"][0]["args"].append({"pickle": "gASV"}),
            "functions[1].calls[0].args[2]",
        ),
        (
            lambda d: d["functions"][1]["calls"][0]["args"][0]["tensor"].__setitem__(
                "strides", [10**9, 1]
            ),
            "strides [1000000000, 1]",
        ),
        (
            lambda d: d["functions"][1]["calls"][0]["args"][0]["tensor"].__setitem__(
                "strides", [1, 1]
            ),
            "without overlap",
        ),
        (
            lambda d: d["functions"][1].__setitem__("target", d["functions"][0]["target"]),
            "repeats functions[0]",
        ),
    ],
)
def test_schema_and_consistency_violations_are_refused(rec_dir, plant, words):
    doc = read_doc(rec_dir)
    plant(doc)
    write_doc(rec_dir, doc)
    _refused(rec_dir, "rec/recording.json", words)


def test_requires_grad_on_an_integer_tensor_is_refused(rec_dir):
    with recording("ints", program="-m demo"):
        rf.Scale.apply(torch.arange(3), 2)
    doc = read_doc(Path("ints"))
    doc["functions"][0]["calls"][0]["args"][0]["tensor"]["requires_grad"] = True
    write_doc(Path("ints"), doc)
    _refused(Path("ints"), "requires_grad on a int64 tensor")


def test_a_missing_folder_or_index_is_one_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _refused(Path("nowhere"), "nowhere: no recording there")
    Path("empty").mkdir()
    _refused(Path("empty"), "empty/recording.json: missing")


def test_the_cli_refuses_a_hostile_recording_with_exit_2_and_one_line(rec_dir):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    ok = subprocess.run(
        [sys.executable, "-m", "harness.cli", "recording", "rec"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert ok.returncode == 0, ok.stderr
    assert "tests.recording_functions:Scale (Function): 1 call kept of 1 seen" in ok.stdout
    assert ok.stdout.strip().splitlines()[-1] == "read 2 Functions (2 calls) from rec"
    _tensor_file(rec_dir).write_bytes(pickle.dumps({"x": 1}))
    bad = subprocess.run(
        [sys.executable, "-m", "harness.cli", "recording", "rec"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert bad.returncode == 2
    (line,) = bad.stderr.strip().splitlines()
    assert line.startswith("afdb recording: error: rec/tensors/tests.recording_functions.Scale-")


def test_the_tensor_format_is_safetensors():
    """The layout the safetensors package reads: u64 header length, JSON, 8-byte aligned."""
    data = tensorfile.encode({"b": torch.tensor([1, 2], dtype=torch.int16), "a": torch.ones(1)})
    (size,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + size])
    assert (8 + size) % 8 == 0
    assert header == {
        "a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
        "b": {"dtype": "I16", "shape": [2], "data_offsets": [4, 8]},
    }
    back = tensorfile.decode(data, "x")
    assert torch.equal(back["b"], torch.tensor([1, 2], dtype=torch.int16))
