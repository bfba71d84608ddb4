"""Issue 36 part 1: every value with a faithful plain-data form is recorded, comes back
exactly, and is written byte-identically by two runs; a recording naming a type outside
the recorded packages, or an enum member that does not exist, is refused in one line."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from harness.cli.main import main
from harness.recording import load_recording, recording
from harness.recording.live import Live
from tests import data_kinds_functions as dk

warnings.filterwarnings("ignore", message=".*quantize.*|.*ComplexHalf.*")


def _complex(dtype: torch.dtype) -> torch.Tensor:
    gen = torch.Generator().manual_seed(3)
    re = torch.randn(3, 4, generator=gen, dtype=torch.float64)
    im = torch.randn(3, 4, generator=gen, dtype=torch.float64)
    return torch.complex(re, im).to(dtype)


def _qchannel() -> torch.Tensor:
    scales = torch.tensor([0.1, 0.25], dtype=torch.float64)
    return torch.quantize_per_channel(
        torch.randn(2, 3, generator=torch.Generator().manual_seed(1)),
        scales,
        torch.tensor([0, 3]),
        0,
        torch.qint8,
    )


#: kind -> a value of it (made fresh per call: the two runs must write the same bytes)
KINDS = {
    "complex32": lambda: _complex(torch.complex32),
    "complex64": lambda: _complex(torch.complex64),
    "complex128": lambda: _complex(torch.complex128),
    "complex128-conj-transposed": lambda: _complex(torch.complex128).conj().t(),
    "uint16": lambda: torch.tensor([1, 2, 60000], dtype=torch.int64).to(torch.uint16),
    "float8": lambda: torch.tensor([0.5, -2.0, 3.0]).to(torch.float8_e4m3fn),
    "numpy-bool": lambda: np.bool_(True),
    "numpy-float32": lambda: np.float32(1.1),
    "numpy-int64": lambda: np.int64(-7),
    "numpy-complex128": lambda: np.complex128(1.5 - 2j),
    "numpy-float32-nan": lambda: np.float32("nan"),
    "numpy-array": lambda: np.array([[1.25, -0.5], [np.inf, 3.0]], dtype=np.float32),
    "numpy-int-array": lambda: np.arange(6, dtype=np.int16).reshape(2, 3),
    "ellipsis": lambda: Ellipsis,
    "slice": lambda: slice(1, None, 2),
    "index-tuple": lambda: (Ellipsis, slice(None, 3), None, 1),
    "torch-size": lambda: torch.Size([2, 3]),
    "dtype": lambda: torch.complex64,
    "memory-format": lambda: torch.channels_last,
    "layout": lambda: torch.sparse_csr,
    "enum": lambda: dk.Mode.REFLECT,
    "int-enum": lambda: dk.Level.HIGH,
    "namedtuple": lambda: dk.Pair(torch.ones(2, dtype=torch.float64), 3),
    "frozen-dataclass": lambda: dk.Config(4, dk.Mode.ZERO, 0.5),
    "sparse-coo": lambda: torch.tensor([[0.0, 1.5], [2.0, 0.0]]).to_sparse(),
    "sparse-csr": lambda: torch.tensor([[0.0, 1.5], [2.0, 0.0]]).to_sparse_csr(),
    "sparse-bsc": lambda: torch.eye(4, dtype=torch.float64).to_sparse_bsc((2, 2)),
    "quantized-per-tensor": lambda: torch.quantize_per_tensor(
        torch.tensor([-1.0, 0.0, 0.37, 2.0]), 0.1, 3, torch.quint8
    ),
    "quantized-per-channel": _qchannel,
}


def _same(a, b) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, torch.Tensor):
        if a.dtype != b.dtype or a.layout != b.layout or a.shape != b.shape:
            return False
        if a.is_quantized:
            return (
                a.qscheme() == b.qscheme()
                and torch.equal(a.int_repr(), b.int_repr())
                and torch.equal(a.dequantize(), b.dequantize())
            )
        if a.layout != torch.strided:
            return torch.equal(a.to_dense(), b.to_dense())
        if a.stride() != b.stride():
            return False
        raw_a = torch.view_as_real(a.resolve_conj()) if a.is_complex() else a
        raw_b = torch.view_as_real(b) if b.is_complex() else b
        return torch.equal(
            raw_a.contiguous().view(torch.uint8), raw_b.contiguous().view(torch.uint8)
        )
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    if isinstance(a, np.generic):
        return a.dtype == b.dtype and a.tobytes() == b.tobytes()
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if dk.Config is type(a):
        return all(_same(getattr(a, f), getattr(b, f)) for f in ("width", "mode", "scale"))
    return a == b


def _record(out: Path, make) -> None:
    with recording(out):
        dk.Probe.apply(torch.ones(3, dtype=torch.float64, requires_grad=True), make())


def _files(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_each_kind_round_trips_exactly_and_byte_identically(tmp_path, kind):
    make = KINDS[kind]
    _record(tmp_path / "one", make)
    _record(tmp_path / "two", make)
    assert _files(tmp_path / "one") == _files(tmp_path / "two")
    (fn,) = load_recording(tmp_path / "one").functions
    assert not fn.skipped, fn.skipped
    (call,) = fn.calls
    assert _same(make(), call.args[1]), (make(), call.args[1])
    # written twice from what was read: the same document (nothing lost in between)
    doc = json.loads((tmp_path / "one" / "recording.json").read_text())
    assert "pickle" not in json.dumps(doc)


@pytest.mark.parametrize(
    ("value", "says"),
    [
        (dk.MutableConfig(3), "a mutable dataclass"),
        (np.array(["a", "b"]), "numpy data of dtype <U1"),
        (np.zeros(5000), "over 4096"),
    ],
)
def test_what_has_no_faithful_form_says_why(tmp_path, capsys, value, says):
    """Kept live (checked in the recording process), the recording saying why it is not data."""
    _record(tmp_path / "rec", lambda: value)
    (fn,) = load_recording(tmp_path / "rec").functions
    (call,) = fn.calls
    assert isinstance(call.args[1], Live) and says in call.args[1].why, call.args[1]
    assert main(["recording", str(tmp_path / "rec")]) == 0
    assert says in capsys.readouterr().out


def test_a_type_defined_in_a_function_is_not_recordable(tmp_path):
    import enum

    class Local(enum.Enum):
        A = 1

    _record(tmp_path / "rec", lambda: Local.A)
    (fn,) = load_recording(tmp_path / "rec").functions
    assert "defined inside a function" in fn.calls[0].args[1].why  # kept live


def test_a_type_of_another_package_is_not_recorded(tmp_path):
    import inspect

    _record(tmp_path / "rec", lambda: inspect.Parameter.POSITIONAL_ONLY)
    (fn,) = load_recording(tmp_path / "rec").functions
    assert "not the Function's own" in fn.calls[0].args[1].why  # kept live


def _hostile(tmp_path: Path, edit) -> Path:
    out = tmp_path / "rec"
    _record(out, lambda: dk.Mode.REFLECT)
    path = out / "recording.json"
    doc = json.loads(path.read_text())
    edit(doc["functions"][0]["calls"][0]["args"][1])
    path.write_text(json.dumps(doc))
    return out


@pytest.mark.parametrize(
    ("edit", "says"),
    [
        (
            lambda n: n["enum"].update(type="os:PathLike"),
            "module 'os' is outside the recorded packages",
        ),
        (
            lambda n: n["enum"].update(member="SYMMETRIC"),
            "has no member 'SYMMETRIC'",
        ),
        (
            lambda n: n["enum"].update(type="tests.data_kinds_functions:Pair"),
            "is not an enum",
        ),
        (
            lambda n: n.update({"namedtuple": n.pop("enum")}),
            "functions[0].calls[0]",
        ),
    ],
)
def test_a_hostile_recording_is_refused_in_one_line(tmp_path, capsys, edit, says):
    out = _hostile(tmp_path, edit)
    assert main(["recording", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and "\n" not in err, err
    assert main(["check", "--recorded", str(out), "--checks", "vmap", "-n", "0"]) == 2


@pytest.mark.parametrize(
    "kind",
    [
        "complex128",
        "numpy-bool",
        "numpy-array",
        "index-tuple",
        "enum",
        "namedtuple",
        "frozen-dataclass",
    ],
)
def test_a_call_with_a_recorded_kind_is_checked(tmp_path, capsys, kind):
    _record(tmp_path / "rec", KINDS[kind])
    assert (
        main(["check", "--recorded", str(tmp_path / "rec"), "--checks", "vmap,vjp", "-n", "0"]) == 0
    )
    assert "tests.data_kinds_functions:Probe  conforms (" in capsys.readouterr().out


def test_a_sparse_coo_argument_no_call_differentiates_is_checked_as_data(tmp_path, capsys):
    _record(tmp_path / "rec", KINDS["sparse-coo"])
    assert (
        main(["check", "--recorded", str(tmp_path / "rec"), "--checks", "vmap,vjp", "-n", "0"]) == 0
    )
    out = capsys.readouterr().out
    assert "tests.data_kinds_functions:Probe  conforms (" in out and "internal" not in out


@pytest.mark.parametrize("kind", ["sparse-csr", "quantized-per-tensor"])
def test_sparse_and_quantized_arguments_are_named_not_checked(tmp_path, capsys, kind):
    _record(tmp_path / "rec", KINDS[kind])
    assert (
        main(["check", "--recorded", str(tmp_path / "rec"), "--checks", "vmap,vjp", "-n", "0"]) == 5
    )
    out = capsys.readouterr().out
    assert "Probe  not checked: argument 1 is a " in out and "internal" not in out
    assert "1 not checkable (1 sparse or quantized arguments)" in out
