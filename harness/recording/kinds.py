"""The kinds of data a recording keeps beyond plain values, tensors and containers.

Each is one node naming its kind, written only where the value comes back exactly:

* ``{"ellipsis": null}``, ``{"slice": [start, stop, step]}``, ``{"size": [ints]}``
  (a ``torch.Size``), ``{"memory_format": "channels_last"}``, ``{"layout": "sparse_csr"}``;
* numpy: ``{"npscalar": {"dtype": "float32", "value": v}}`` and small arrays
  ``{"ndarray": {"dtype", "shape", "data": [flat values]}}`` (floats as JSON numbers or
  ``"nan"``/``"inf"``/``"-inf"``, complex values as ``[re, im]``);
* ``{"enum": {"type": "module:QualName", "member": "NAME"}}``, ``{"namedtuple": {"type",
  "fields": [[name, node], ...]}}`` and ``{"dataclass": {...}}`` (frozen dataclasses
  whose fields are data): types named as ``harness.recording.refs`` writes and resolves
  them, only inside the recorded packages;
* ``{"sparse": {"layout", "shape", "requires_grad", "coalesced", "parts": [tensors]}}``
  (COO: indices, values; compressed layouts: compressed indices, plain indices, values),
  rebuilt with torch's invariant checks;
* ``{"quantized": {"dtype", "scheme", ...}}``: the integer representation with its
  scale and zero point (per tensor) or scales, zero points and axis (per channel).

Rebuilding never calls a recorded type's code: enum members are looked up in
``__members__``, namedtuples built with ``tuple.__new__``, dataclasses with
``object.__new__`` and ``object.__setattr__`` of each field.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import sys
from collections.abc import Callable
from typing import Any

import torch

from harness.recording.data_errors import BadNode, NotRecordable, argument_at
from harness.recording.refs import RefError, ref_of, resolve

#: A numpy array is kept inline in the JSON up to this many elements.
MAX_ARRAY = 4096
_NUMPY_DTYPES = frozenset(
    ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
    + ("float16", "float32", "float64", "complex64", "complex128")
)
_MEMORY_FORMATS = {
    str(v).removeprefix("torch."): v for v in vars(torch).values() if type(v) is torch.memory_format
}
_LAYOUTS = {
    str(v).removeprefix("torch."): v for v in vars(torch).values() if type(v) is torch.layout
}
_COMPRESSED = {
    torch.sparse_csr: ("crow_indices", "col_indices"),
    torch.sparse_csc: ("ccol_indices", "row_indices"),
    torch.sparse_bsr: ("crow_indices", "col_indices"),
    torch.sparse_bsc: ("ccol_indices", "row_indices"),
}
_QDTYPES = {"quint8": torch.quint8, "qint8": torch.qint8, "qint32": torch.qint32}

TensorFn = Callable[[torch.Tensor, str, "list[torch.Tensor] | None"], Any]


def _layout_name(layout: torch.layout) -> str:
    return str(layout).removeprefix("torch.")


# --- tensors that are not strided ----------------------------------------------------------


def special_tensor(
    t: torch.Tensor, path: str, tensors: list[torch.Tensor] | None, tensor_node: TensorFn
) -> Any:
    """The node of a sparse or quantized tensor (its parts are tensor nodes)."""
    d = t.detach()
    if t.is_quantized:
        scheme = t.qscheme()
        dtype = str(t.dtype).removeprefix("torch.")
        if dtype not in _QDTYPES:
            raise NotRecordable(
                f"{argument_at(path)} is a {t.dtype} quantized tensor: not recordable"
            )
        if scheme == torch.per_tensor_affine:
            q = {
                "dtype": dtype,
                "scheme": "per_tensor_affine",
                "scale": float(d.q_scale()),
                "zero_point": int(d.q_zero_point()),
                "int_repr": tensor_node(d.int_repr(), f"{path}.int_repr", tensors),
            }
        elif scheme == torch.per_channel_affine:
            q = {
                "dtype": dtype,
                "scheme": "per_channel_affine",
                "axis": int(d.q_per_channel_axis()),
                "scales": tensor_node(d.q_per_channel_scales(), f"{path}.scales", tensors),
                "zero_points": tensor_node(
                    d.q_per_channel_zero_points(), f"{path}.zero_points", tensors
                ),
                "int_repr": tensor_node(d.int_repr(), f"{path}.int_repr", tensors),
            }
        else:
            raise NotRecordable(
                f"{argument_at(path)} is a quantized tensor of {scheme}: not recordable"
            )
        return {"quantized": q} if tensors is not None else None
    if t.layout == torch.sparse_coo:
        parts = [d._indices(), d._values()]
        coalesced = bool(d.is_coalesced())
    elif t.layout in _COMPRESSED:
        first, second = _COMPRESSED[t.layout]
        parts = [getattr(d, first)(), getattr(d, second)(), d.values()]
        coalesced = False
    else:
        raise NotRecordable(f"{argument_at(path)} is a {t.layout} tensor: not recordable")
    nodes = [tensor_node(p, f"{path}.part{i}", tensors) for i, p in enumerate(parts)]
    if tensors is None:
        return None
    return {
        "sparse": {
            "layout": _layout_name(t.layout),
            "shape": list(t.shape),
            "requires_grad": bool(t.requires_grad),
            "coalesced": coalesced,
            "parts": nodes,
        }
    }


def _restore_sparse(value: dict[str, Any], restore: Callable[[Any], Any]) -> torch.Tensor:
    layout = _LAYOUTS.get(value["layout"])
    parts = [restore(p) for p in value["parts"]]
    shape = value["shape"]
    try:
        if layout == torch.sparse_coo and len(parts) == 2:
            out = torch.sparse_coo_tensor(
                parts[0],
                parts[1],
                shape,
                is_coalesced=bool(value["coalesced"]),
                check_invariants=True,
            )
        elif layout in _COMPRESSED and len(parts) == 3:
            out = torch.sparse_compressed_tensor(
                parts[0], parts[1], parts[2], shape, layout=layout, check_invariants=True
            )
        else:
            raise BadNode(f"sparse layout {value['layout']!r} with {len(parts)} parts")
    except (RuntimeError, ValueError, TypeError) as e:
        raise BadNode(
            f"a sparse tensor whose parts do not fit ({str(e).splitlines()[0]})"
        ) from None
    if value["requires_grad"]:
        if not (out.dtype.is_floating_point or out.dtype.is_complex):
            raise BadNode(f"requires_grad on a sparse {out.dtype} tensor")
        out.requires_grad_(True)
    return out


def _restore_quantized(value: dict[str, Any], restore: Callable[[Any], Any]) -> torch.Tensor:
    dtype = _QDTYPES.get(value.get("dtype", ""))
    if dtype is None:
        raise BadNode(f"quantized dtype {value.get('dtype')!r}")
    ints = restore(value["int_repr"])
    try:
        if value["scheme"] == "per_tensor_affine":
            out = torch._make_per_tensor_quantized_tensor(
                ints, float(value["scale"]), int(value["zero_point"])
            )
        elif value["scheme"] == "per_channel_affine":
            out = torch._make_per_channel_quantized_tensor(
                ints, restore(value["scales"]), restore(value["zero_points"]), int(value["axis"])
            )
        else:
            raise BadNode(f"quantization scheme {value['scheme']!r}")
    except (RuntimeError, ValueError, TypeError, KeyError) as e:
        raise BadNode(f"a quantized tensor whose parts do not fit ({e})") from None
    if out.dtype != dtype:
        raise BadNode(f"quantized dtype {value['dtype']!r} but its integers give {out.dtype}")
    return out


# --- numpy ---------------------------------------------------------------------------------


def _num(x: Any, kind: str) -> Any:
    if kind == "b":
        return bool(x)
    if kind in "iu":
        return int(x)
    if kind == "f":
        f = float(x)
        return f if math.isfinite(f) else repr(f)
    c = complex(x)
    return [_num(c.real, "f"), _num(c.imag, "f")]


def _from_num(v: Any, kind: str) -> Any:
    if kind == "b" and type(v) is bool:
        return v
    if kind in "iu" and type(v) is int:
        return v
    if kind == "f" and (type(v) in (int, float) or v in ("nan", "inf", "-inf")):
        return float(v)
    if kind == "c" and isinstance(v, list) and len(v) == 2:
        return complex(_from_num(v[0], "f"), _from_num(v[1], "f"))
    raise BadNode(f"numpy value {v!r} is not a {kind!r} value")


def _numpy_node(value: Any, path: str, np: Any) -> Any:
    if not isinstance(value, (np.ndarray, np.generic)):
        return None
    dtype = value.dtype
    name = dtype.name
    if name not in _NUMPY_DTYPES or dtype.byteorder not in (
        "=",
        "|",
        "<" if sys.byteorder == "little" else ">",
    ):
        raise NotRecordable(f"{argument_at(path)} is numpy data of dtype {dtype}: not recordable")
    kind = dtype.kind
    if isinstance(value, np.generic):
        return {"npscalar": {"dtype": name, "value": _num(value, kind)}}
    if value.size > MAX_ARRAY:
        raise NotRecordable(
            f"{argument_at(path)} is a numpy array of {value.size} elements: over {MAX_ARRAY} "
            "(pass a tensor to record it)"
        )
    return {
        "ndarray": {
            "dtype": name,
            "shape": list(value.shape),
            "data": [_num(x, kind) for x in value.reshape(-1).tolist()],
        }
    }


def _restore_numpy(kind: str, value: dict[str, Any]) -> Any:
    import numpy as np

    name = value.get("dtype")
    if name not in _NUMPY_DTYPES:
        raise BadNode(f"numpy dtype {name!r}")
    dtype = np.dtype(name)
    if kind == "npscalar":
        return dtype.type(_from_num(value["value"], dtype.kind))
    shape = value["shape"]
    if not isinstance(shape, list) or not all(type(n) is int and n >= 0 for n in shape):
        raise BadNode(f"numpy shape {shape!r}")
    data = value["data"]
    if not isinstance(data, list) or len(data) != math.prod(shape) or len(data) > MAX_ARRAY:
        raise BadNode(f"numpy data of {len(data)} values for shape {shape}")
    return np.array([_from_num(v, dtype.kind) for v in data], dtype=dtype).reshape(shape)


# --- named types ---------------------------------------------------------------------------


def _ref(cls: type, path: str, what: str, allowed: frozenset[str]) -> str:
    try:
        return ref_of(cls, allowed)
    except RefError as e:
        raise NotRecordable(f"{argument_at(path)} is {what} {e}: not recordable as data") from None


def _fields_node(
    pairs: list[tuple[str, Any]], path: str, inner: Callable[[Any, str], Any]
) -> list[list[Any]]:
    return [[name, inner(v, f"{path}.{name}")] for name, v in pairs]


def _named_node(
    value: Any, path: str, allowed: frozenset[str], inner: Callable[[Any, str], Any]
) -> Any:
    t = type(value)
    if isinstance(value, enum.Enum):
        ref = _ref(t, path, "an enum member of", allowed)
        name = value._name_
        if name is None or t.__members__.get(name) is not value:
            raise NotRecordable(
                f"{argument_at(path)} is a combined flag of `{ref}`: not recordable"
            )
        return {"enum": {"type": ref, "member": name}}
    if isinstance(value, tuple) and isinstance(getattr(t, "_fields", None), tuple):
        fields = t._fields
        if len(fields) != len(value) or not all(isinstance(f, str) for f in fields):
            return None
        ref = _ref(t, path, "a namedtuple", allowed)
        return {
            "namedtuple": {
                "type": ref,
                "fields": _fields_node(list(zip(fields, value)), path, inner),
            }
        }
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        params = getattr(t, "__dataclass_params__", None)
        if not getattr(params, "frozen", False):
            raise NotRecordable(
                f"{argument_at(path)} is a mutable dataclass `{t.__module__}.{t.__qualname__}`: not "
                "recordable as data (frozen dataclasses are)"
            )
        names = [f.name for f in dataclasses.fields(value)]
        extra = sorted(set(getattr(value, "__dict__", {})) - set(names))
        if extra:
            raise NotRecordable(
                f"{argument_at(path)} is a dataclass holding {extra[0]!r} beyond its fields: not "
                "recordable as data"
            )
        ref = _ref(t, path, "a dataclass", allowed)
        pairs = [(n, object.__getattribute__(value, n)) for n in names]
        return {"dataclass": {"type": ref, "fields": _fields_node(pairs, path, inner)}}
    return None


def _resolve(ref: Any, allowed: frozenset[str]) -> Any:
    if not isinstance(ref, str):
        raise BadNode(f"type {ref!r} is not module:QualName")
    try:
        return resolve(ref, allowed)
    except RefError as e:
        raise BadNode(str(e)) from None


def _field_values(value: dict[str, Any], restore: Callable[[Any], Any]) -> list[tuple[str, Any]]:
    fields = value.get("fields")
    if not isinstance(fields, list):
        raise BadNode("fields is not a list of [name, value]")
    return [(name, restore(node)) for name, node in fields]


def _restore_named(
    kind: str, value: dict[str, Any], restore: Callable[[Any], Any], allowed: frozenset[str]
) -> Any:
    ref = value.get("type")
    cls = _resolve(ref, allowed)
    if kind == "enum":
        if not (isinstance(cls, type) and issubclass(cls, enum.Enum)):
            raise BadNode(f"type {ref!r} is not an enum")
        member = cls.__members__.get(value.get("member", ""))
        if member is None:
            raise BadNode(f"enum {ref!r} has no member {value.get('member')!r}")
        return member
    pairs = _field_values(value, restore)
    names = tuple(n for n, _ in pairs)
    if kind == "namedtuple":
        if not (isinstance(cls, type) and issubclass(cls, tuple)):
            raise BadNode(f"type {ref!r} is not a namedtuple")
        if tuple(getattr(cls, "_fields", ())) != names:
            raise BadNode(
                f"namedtuple {ref!r} has fields {getattr(cls, '_fields', ())}, not {names}"
            )
        return tuple.__new__(cls, [v for _, v in pairs])
    params = getattr(cls, "__dataclass_params__", None)
    if not (
        isinstance(cls, type) and dataclasses.is_dataclass(cls) and getattr(params, "frozen", False)
    ):
        raise BadNode(f"type {ref!r} is not a frozen dataclass")
    have = tuple(f.name for f in dataclasses.fields(cls))
    if have != names:
        raise BadNode(f"dataclass {ref!r} has fields {have}, not {names}")
    obj = object.__new__(cls)
    for name, v in pairs:
        object.__setattr__(obj, name, v)
    return obj


# --- the dispatch --------------------------------------------------------------------------


def other_node(
    value: Any,
    path: str,
    tensors: list[torch.Tensor] | None,
    allowed: frozenset[str],
    inner: Callable[[Any, str], Any],
) -> Any:
    """The node of a value of one of this module's kinds, None for none of them
    (NotRecordable where it is one but cannot be kept exactly)."""
    t = type(value)
    if value is Ellipsis:
        return {"ellipsis": None}
    if t is slice:
        parts = [
            inner(p, f"{path}.{n}")
            for p, n in zip((value.start, value.stop, value.step), ("start", "stop", "step"))
        ]
        return {"slice": parts}
    if t is torch.Size:
        return {"size": [int(n) for n in value]}
    if t is torch.memory_format:
        return {"memory_format": str(value).removeprefix("torch.")}
    if t is torch.layout:
        return {"layout": _layout_name(value)}
    np = sys.modules.get("numpy")
    if np is not None and t.__module__ == "numpy":
        found = _numpy_node(value, path, np)
        if found is not None:
            return found
    return _named_node(value, path, allowed, inner)


def restore_other(
    kind: str, value: Any, restore: Callable[[Any], Any], allowed: frozenset[str]
) -> Any:
    """The value of a node of one of this module's kinds (BadNode when it is none of them
    or does not come back)."""
    if kind == "ellipsis":
        return Ellipsis
    if kind == "slice":
        if not isinstance(value, list) or len(value) != 3:
            raise BadNode("a slice is [start, stop, step]")
        return slice(*(restore(v) for v in value))
    if kind == "size":
        if not isinstance(value, list) or not all(type(n) is int and n >= 0 for n in value):
            raise BadNode(f"size {value!r} is not a list of sizes")
        return torch.Size(value)
    if kind == "memory_format":
        if value not in _MEMORY_FORMATS:
            raise BadNode(f"{value!r} is not a torch memory format")
        return _MEMORY_FORMATS[value]
    if kind == "layout":
        if value not in _LAYOUTS:
            raise BadNode(f"{value!r} is not a torch layout")
        return _LAYOUTS[value]
    if not isinstance(value, dict):
        raise BadNode(f"unknown kind {kind!r}")
    if kind in ("npscalar", "ndarray"):
        return _restore_numpy(kind, value)
    if kind in ("enum", "namedtuple", "dataclass"):
        return _restore_named(kind, value, restore, allowed)
    if kind == "sparse":
        return _restore_sparse(value, restore)
    if kind == "quantized":
        return _restore_quantized(value, restore)
    raise BadNode(f"unknown kind {kind!r}")
