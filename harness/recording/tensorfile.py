"""A small reader and writer of the ``safetensors`` file format, strict on reading.

Why our own: the format is simple (an 8-byte little-endian header length, a JSON header
naming each tensor's dtype, shape and byte range, then the raw little-endian bytes), and
reading it ourselves lets every declared size, offset and dtype be checked against the
file before anything is allocated, with one line naming the tensor and the field that is
wrong. Files written here are read by the ``safetensors`` package and the other way round
(for the dtypes below). Nothing in a file is ever executed.
"""

from __future__ import annotations

import json
import math
import os
import stat
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from harness.core.errors import UsageError
from harness.core.safe_io import DuplicateKey, loads, repeated_key

#: safetensors' dtype names, and torch's dtype for each.
DTYPES: dict[str, torch.dtype] = {
    "BOOL": torch.bool,
    "U8": torch.uint8,
    "I8": torch.int8,
    "I16": torch.int16,
    "I32": torch.int32,
    "I64": torch.int64,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "F32": torch.float32,
    "F64": torch.float64,
    "C64": torch.complex64,
    "U16": torch.uint16,
    "U32": torch.uint32,
    "U64": torch.uint64,
    "F8_E4M3": torch.float8_e4m3fn,
    "F8_E5M2": torch.float8_e5m2,
}
NAMES = {v: k for k, v in DTYPES.items()}
_ITEMSIZE = {d: torch.empty((), dtype=d).element_size() for d in DTYPES.values()}

#: A header larger than this is not one this suite writes (a few hundred bytes per tensor).
MAX_HEADER = 16 << 20


class TensorFileError(UsageError):
    """A tensor file that is damaged, hostile or not in the safetensors format."""


def dtype_name(dtype: torch.dtype) -> str | None:
    """The safetensors name of ``dtype``, or None when the format has none."""
    return NAMES.get(dtype)


def encode(tensors: Mapping[str, torch.Tensor]) -> bytes:
    """The bytes of a safetensors file holding ``tensors`` (contiguous copies, names sorted)."""
    header: dict[str, Any] = {}
    chunks: list[bytes] = []
    offset = 0
    for name in sorted(tensors):
        t = tensors[name].detach().to("cpu")
        # a fresh dense copy: a size-1 dim may carry stride 0, which .contiguous() keeps
        flat = torch.empty(t.numel(), dtype=t.dtype)
        flat.copy_(t.reshape(-1))
        data = flat.view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[name] = {
            "dtype": NAMES[t.dtype],
            "shape": list(t.shape),
            "data_offsets": [offset, offset + len(data)],
        }
        chunks.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":"), sort_keys=True).encode("utf-8")
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(chunks)


def _field(label: str, name: str, problem: str) -> TensorFileError:
    return TensorFileError(f"{label}: tensor {name!r}: {problem}; not a tensor file afdb wrote")


@dataclass(frozen=True)
class _Span:
    name: str
    dtype: torch.dtype
    shape: list[int]
    begin: int
    end: int


def _header(raw: bytes, label: str) -> dict[str, Any]:
    try:
        header = loads(raw.decode("utf-8"))
    except DuplicateKey as e:
        raise TensorFileError(repeated_key(f"{label}: header", str(e))) from None
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise TensorFileError(f"{label}: header is not JSON ({e.__class__.__name__})") from None
    if not isinstance(header, dict):
        raise TensorFileError(f"{label}: header is not a JSON object")
    return header


def _layout(header: dict[str, Any], body: int, label: str) -> list[_Span]:
    """Every tensor's place in a body of ``body`` bytes, checked field by field: sizes that
    agree with the shapes, no overlap, no gap, no byte after the last (nothing allocated)."""
    spans: list[_Span] = []
    for name, info in header.items():
        if name == "__metadata__":
            if not isinstance(info, dict) or not all(isinstance(v, str) for v in info.values()):
                raise _field(label, name, "__metadata__ must map names to strings")
            continue
        if not isinstance(info, dict) or set(info) != {"dtype", "shape", "data_offsets"}:
            raise _field(label, name, "needs exactly dtype, shape and data_offsets")
        dtype = DTYPES.get(info["dtype"]) if isinstance(info["dtype"], str) else None
        if dtype is None:
            raise _field(label, name, f"dtype {info['dtype']!r} is not one of {sorted(DTYPES)}")
        shape = info["shape"]
        if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
            raise _field(label, name, f"shape {shape!r} is not a list of sizes")
        offsets = info["data_offsets"]
        if (
            not isinstance(offsets, list)
            or len(offsets) != 2
            or not all(type(o) is int and o >= 0 for o in offsets)
            or offsets[0] > offsets[1]
        ):
            raise _field(label, name, f"data_offsets {offsets!r} is not [begin, end]")
        begin, end = offsets
        nbytes = math.prod(shape) * _ITEMSIZE[dtype]
        if end - begin != nbytes:
            raise _field(
                label,
                name,
                f"shape {shape} of {info['dtype']} needs {nbytes} bytes, "
                f"data_offsets give {end - begin}",
            )
        if end > body:
            raise _field(label, name, f"data_offsets end at {end}, past the {body} data bytes")
        spans.append(_Span(name, dtype, shape, begin, end))
    position = 0
    for span in sorted(spans, key=lambda s: (s.begin, s.end, s.name)):
        if span.begin != position:
            raise _field(
                label,
                span.name,
                f"data starts at byte {span.begin}, expected {position} "
                "(tensors overlap or leave a gap)",
            )
        position = span.end
    if position != body:
        raise TensorFileError(
            f"{label}: {body - position} bytes after the last tensor; a damaged tensor file"
        )
    return spans


def _tensors(spans: list[_Span], body: bytearray) -> dict[str, torch.Tensor]:
    """The tensors over ``body``: each a view of it where its offset suits its dtype, else a
    copy of its own bytes (the memory taken is the data's, about once)."""
    out: dict[str, torch.Tensor] = {}
    for s in spans:
        n = s.end - s.begin
        if n == 0:
            out[s.name] = torch.empty(s.shape, dtype=s.dtype)
            continue
        if s.begin % _ITEMSIZE[s.dtype]:
            raw = torch.frombuffer(bytearray(body[s.begin : s.end]), dtype=torch.uint8)
        else:
            raw = torch.frombuffer(body, dtype=torch.uint8, count=n, offset=s.begin)
        out[s.name] = raw.view(s.dtype).reshape(s.shape)
    return out


def decode(data: bytes, label: str) -> dict[str, torch.Tensor]:
    """The tensors of a safetensors file's bytes, every field checked against the file
    (TensorFileError, one line naming ``label`` and the place) before anything is built."""
    if len(data) < 8:
        raise TensorFileError(f"{label}: {len(data)} bytes, too short for a tensor file")
    (size,) = struct.unpack("<Q", data[:8])
    if size > MAX_HEADER or 8 + size > len(data):
        raise TensorFileError(
            f"{label}: declares a header of {size} bytes but the file has {len(data)}; "
            "a damaged or truncated tensor file"
        )
    spans = _layout(_header(data[8 : 8 + size], label), len(data) - 8 - size, label)
    return _tensors(spans, bytearray(data[8 + size :]))


def _read_exactly(f: Any, n: int, label: str) -> bytearray:
    """``n`` bytes of the unbuffered file ``f`` into a buffer of that size (never more:
    memory follows the file's own size, which the caller bounded); a file that shrank while
    read is refused."""
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = f.readinto(view[got : min(n, got + (64 << 20))])
        if not k:
            raise TensorFileError(f"{label}: changed while it was read; read it again")
        got += k
    return buf


def read(path: Path, label: str, limit: int) -> dict[str, torch.Tensor]:
    """The tensors of the regular file ``path`` (at most ``limit`` bytes), checked: the
    header is read and checked against the file's size first, then exactly the data it
    declares is read (a file of a few hundred bytes takes a few hundred bytes)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as e:
        raise TensorFileError(f"{label}: cannot read ({e.strerror or e})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise TensorFileError(f"{label}: not a regular file")
        if st.st_size > limit:
            raise TensorFileError(
                f"{label}: {st.st_size} bytes, over the {limit}-byte limit of a recording"
            )
        if st.st_size < 8:
            raise TensorFileError(f"{label}: {st.st_size} bytes, too short for a tensor file")
        with os.fdopen(fd, "rb", buffering=0, closefd=False) as f:
            (size,) = struct.unpack("<Q", bytes(_read_exactly(f, 8, label)))
            if size > MAX_HEADER or 8 + size > st.st_size:
                raise TensorFileError(
                    f"{label}: declares a header of {size} bytes but the file has "
                    f"{st.st_size}; a damaged or truncated tensor file"
                )
            header = _header(bytes(_read_exactly(f, size, label)), label)
            body = st.st_size - 8 - size
            spans = _layout(header, body, label)
            data = _read_exactly(f, body, label)
            if f.read(1):
                raise TensorFileError(f"{label}: changed while it was read; read it again")
    finally:
        os.close(fd)
    return _tensors(spans, data)
