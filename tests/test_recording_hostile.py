"""A recording is data wherever it is read (issue 44, part 3).

Each hostile recording is a valid one with one thing planted; its valid twin is read by
the same reader. The hostile material is data written here (links, JSON text, byte
strings): nothing of it is executed, and every reader (``load_recording``, hence
``afdb check --recorded`` and ``pytest --afdb``; the validator ``afdb recording``) refuses
it with the same line (``harness.recording.rules``).
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from harness.core.errors import UsageError
from harness.core.safe_io import InputError, loads, parse_json
from harness.recording import load_recording, tensorfile
from tests.recording_dir import make_rec_dir, read_doc, write_doc

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def rec_dir(tmp_path, monkeypatch):
    return make_rec_dir(tmp_path, monkeypatch)


def _refused(rec_dir: Path, *words: str) -> str:
    with pytest.raises(UsageError) as info:
        load_recording(rec_dir)
    message = str(info.value)
    assert "\n" not in message and "Traceback" not in message, message
    for word in words:
        assert word in message, message
    return message


def _validator(rec_dir: Path) -> subprocess.CompletedProcess[str]:
    """``afdb recording rec``, as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "harness.cli", "recording", str(rec_dir)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=120,
    )


def _one_line_exit_2(proc: subprocess.CompletedProcess[str], *words: str) -> None:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert "Traceback" not in line
    for word in words:
        assert word in line, line


# --- links anywhere under the recording ---------------------------------------------------


def test_a_tensors_folder_that_is_a_link_out_of_the_recording_is_refused(rec_dir, tmp_path):
    outside = tmp_path / "outside"
    (rec_dir / "tensors").rename(outside)  # the very same files: only where they are is wrong
    os.symlink(outside, rec_dir / "tensors")
    _refused(rec_dir, "rec/tensors: is a link; a recording holds no links")
    _one_line_exit_2(_validator(rec_dir), "rec/tensors: is a link")
    # the twin: the same files in the folder itself
    os.unlink(rec_dir / "tensors")
    outside.rename(rec_dir / "tensors")
    assert len(load_recording(rec_dir).functions) == 2
    assert _validator(rec_dir).returncode == 0


def test_an_index_or_a_stray_file_that_is_a_link_is_refused(rec_dir, tmp_path):
    index = rec_dir / "recording.json"
    outside = tmp_path / "outside.json"
    outside.write_text(index.read_text())
    index.unlink()
    os.symlink(outside, index)
    _refused(rec_dir, "rec/recording.json: is a link")
    index.unlink()
    index.write_text(outside.read_text())
    load_recording(rec_dir)
    (rec_dir / "tensors" / "notes").mkdir()
    os.symlink("/etc", rec_dir / "tensors" / "notes" / "etc")  # deep, and never read: still
    _refused(rec_dir, "rec/tensors/notes/etc: is a link")


def test_a_tensors_file_instead_of_the_folder_is_one_line(rec_dir):
    for f in (rec_dir / "tensors").iterdir():
        f.unlink()
    (rec_dir / "tensors").rmdir()
    (rec_dir / "tensors").write_text("")
    _refused(rec_dir, "rec/tensors is not a folder")


# --- one set of name rules for every reader -----------------------------------------------


def _plant_ref(rec_dir: Path, node: dict) -> None:
    """Scale's recorded float option replaced by ``node`` (a reference or a subclass)."""
    doc = read_doc(rec_dir)
    fn = next(f for f in doc["functions"] if f["target"].endswith(":Scale"))
    fn["calls"][0]["args"][1] = node
    write_doc(rec_dir, doc)


def _ref(target: str) -> dict:
    return {"ref": {"target": target, "type": "builtins:function"}}


def _subclass(cls: str) -> dict:
    return {
        "subclass": {
            "class": cls,
            "inner": [],
            "meta": {"none": None},
            "shape": [3],
            "strides": [1],
            "requires_grad": False,
        }
    }


@pytest.mark.parametrize(
    ("node", "words", "cli"),
    [
        (_ref("os:system"), "refers to 'os:system', outside the packages whose Functions", True),
        (_ref("json:dumps"), "refers to 'json:dumps', outside the packages", False),
        (_ref("torch.nn.functional:relu"), "refers to 'torch.nn.functional:relu', outside", False),
        (_ref("tests/../os:system"), "is not module:QualName", False),
        (_subclass("collections:OrderedDict"), "outside torch and the packages", True),
        (_subclass("__main__:Evil"), "outside torch and the packages", False),
    ],
)
def test_the_validator_refuses_the_references_the_check_refuses(rec_dir, node, words, cli):
    _plant_ref(rec_dir, node)
    message = _refused(rec_dir, "rec/recording.json: functions[1].calls[0]: ", words, "refused")
    if cli:  # afdb recording, as a user runs it: the same line, exit 2
        _one_line_exit_2(_validator(rec_dir), message)


def test_a_reference_inside_the_recordings_own_package_is_read(rec_dir):
    """The twin: a name of the recording's own package (``tests``) is read, not imported."""
    _plant_ref(rec_dir, _ref("tests.recording_functions:Scale"))
    call = next(f for f in load_recording(rec_dir).functions if f.target.endswith(":Scale"))
    assert call.calls[0].args[1].target == "tests.recording_functions:Scale"
    _plant_ref(rec_dir, _subclass("torch.testing._internal.two_tensor:TwoTensor"))
    load_recording(rec_dir)
    assert _validator(rec_dir).returncode == 0


def test_the_check_applies_the_same_rules_before_importing_anything():
    """``harness.sources.references`` refuses with the rules' own line, importing nothing."""
    from harness.recording.live import Ref, Wrapped
    from harness.sources.references import resolve

    with pytest.raises(UsageError, match="refers to 'os:system', outside the packages"):
        resolve((Ref("os:system", "builtins:builtin_function_or_method"),), frozenset({"m"}), "w")
    wrapped = Wrapped("collections:OrderedDict", {}, None, (3,), (1,), False)
    with pytest.raises(UsageError, match="outside torch and the packages"):
        resolve([wrapped], frozenset({"m"}), "w")


# --- a key named twice ------------------------------------------------------------------


def test_a_repeated_key_in_the_index_is_refused(rec_dir):
    path = rec_dir / "recording.json"
    text = path.read_text()
    first = text.index('"target": "')
    planted = text[:first] + '"target": "os.path:join",\n  ' + text[first:]
    assert json.loads(planted) == read_doc(rec_dir)  # json itself takes the last: nothing seen
    path.write_text(planted)
    _refused(rec_dir, "rec/recording.json: an object names the key 'target' twice")
    _one_line_exit_2(_validator(rec_dir), "names the key 'target' twice")


def test_a_repeated_tensor_name_in_a_tensor_files_header_is_refused():
    good = tensorfile.encode({"c0.0": torch.ones(2)})
    (size,) = struct.unpack("<Q", good[:8])
    header = b'{"c0.0":{"data_offsets":[0,8],"dtype":"F32","shape":[2]},' + good[9 : 8 + size]
    header = header.rstrip(b" ") + b" " * (-len(header.rstrip(b" ")) % 8)
    bad = struct.pack("<Q", len(header)) + header + good[8 + size :]
    assert set(tensorfile.decode(good, "t")) == {"c0.0"}
    with pytest.raises(UsageError, match="t: header: an object names the key 'c0.0' twice"):
        tensorfile.decode(bad, "t")


def test_every_json_input_refuses_a_repeated_key(tmp_path):
    """Reports and expectations files are read by ``safe_io.parse_json`` too."""
    from harness.core.schema import read_report
    from harness.expectations import load, parse

    assert loads('{"a": 1, "b": {"a": 2}}') == {"a": 1, "b": {"a": 2}}  # nested: not a repeat
    with pytest.raises(InputError, match="x.json: an object names the key 'a' twice"):
        parse_json('{"b": {"a": 1, "a": 2}}', "x.json")
    report = tmp_path / "r.json"
    report.write_text('{"schema": "afdb-report/1", "schema": "afdb-report/1", "cases": []}')
    with pytest.raises(UsageError, match="names the key 'schema' twice"):
        read_report(report)
    exp = tmp_path / "e.json"
    exp.write_text('{"schema": "x", "expectations": [], "expectations": []}')
    with pytest.raises(UsageError, match="names the key 'expectations' twice"):
        load(exp)
    with pytest.raises(UsageError, match="e.json: an object names the key 'expectations' twice"):
        parse(exp.read_text(), "e.json")


# --- memory follows the data --------------------------------------------------------------

_UNDER_A_LIMIT = """
import resource, sys
import torch
from harness.recording import load_recording, tensorfile
with open("/proc/self/status") as f:
    vm = next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmSize:"))
# 2 GiB of address space to spare: less than the 4 GiB cap of a tensor file
resource.setrlimit(resource.RLIMIT_AS, (vm + (2 << 30), resource.RLIM_INFINITY))
rec = load_recording(sys.argv[1])
print(len(rec.functions), sum(len(f.calls) for f in rec.functions))
"""


@pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="RLIMIT_AS and /proc/self/status: Linux"
)
def test_reading_a_small_recording_takes_memory_for_its_data_only(rec_dir):
    size = sum(p.stat().st_size for p in (rec_dir / "tensors").iterdir())
    assert size < 1000  # a few hundred bytes of tensors
    proc = subprocess.run(
        [sys.executable, "-c", _UNDER_A_LIMIT, str(rec_dir)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["2", "2"]


def test_a_file_larger_than_its_header_declares_is_refused_before_its_data_is_read(tmp_path):
    """The header is checked against the file's size first: the body is never read."""
    path = tmp_path / "t.safetensors"
    path.write_bytes(tensorfile.encode({"c0.0": torch.ones(2)}) + b"\0" * (1 << 20))
    reads: list[int] = []
    real = tensorfile._read_exactly

    def counting(f, n, label):
        reads.append(n)
        return real(f, n, label)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(tensorfile, "_read_exactly", counting)
        with pytest.raises(UsageError, match="1048576 bytes after the last tensor"):
            tensorfile.read(path, "t", 4 << 30)
    assert sum(reads) < 200, reads  # the length and the header, not the megabyte after them
    path.write_bytes(tensorfile.encode({"c0.0": torch.ones(2)}))
    assert torch.equal(tensorfile.read(path, "t", 4 << 30)["c0.0"], torch.ones(2))


def test_tensors_read_back_are_the_data_at_every_alignment(tmp_path):
    """Tensors share the body where their offset suits their dtype, else own a copy."""
    tensors = {
        "a": torch.tensor([True, False, True]),  # 3 bytes: what follows is unaligned
        "b": torch.arange(3, dtype=torch.float64),
        "c": torch.arange(4, dtype=torch.int16),
        "d": torch.empty(0, 2),
    }
    path = tmp_path / "t.safetensors"
    path.write_bytes(tensorfile.encode(tensors))
    back = tensorfile.read(path, "t", 1 << 20)
    for name, t in tensors.items():
        assert back[name].dtype == t.dtype and torch.equal(back[name], t), name
    back["b"].add_(1)  # tensors never share bytes with each other
    assert torch.equal(back["c"], tensors["c"]) and torch.equal(back["a"], tensors["a"])
