"""Arguments of a call as data: a JSON tree with the tensors beside it, and back.

One node per value, a one-key object naming its kind: ``{"none": null}``, ``{"bool": b}``,
``{"int": i}``, ``{"float": x}`` (``"nan"``, ``"inf"``, ``"-inf"`` as strings: JSON has no
such numbers), ``{"str": s}``, ``{"dtype": "float32"}``, ``{"device": "cpu"}``,
``{"tuple": [...]}``, ``{"list": [...]}``, ``{"dict": [[key, node], ...]}`` (string keys,
in the call's order) and ``{"tensor": {...}}`` with its dtype, shape, ``requires_grad``,
device, and where the call's tensor was not contiguous its ``strides`` (or ``expand``: the
stride-0 dims of an expanded tensor, stored once). A complex tensor is stored as its real
view (``torch.view_as_real``: a last dim of 2) and named by its complex dtype. The other
kinds of data (numpy values, ``Ellipsis``, slices, ``torch.Size``, memory formats, layouts,
enum members, namedtuples, frozen dataclasses, sparse and quantized tensors) are in
``harness.recording.kinds``. Anything else is not recordable and says why
(``NotRecordable``), naming the argument.
"""

from __future__ import annotations

import contextlib
import enum
import math
from dataclasses import dataclass
from typing import Any

import torch

from harness.recording.data_errors import BadNode, NotRecordable, argument_at
from harness.recording.kinds import other_node, restore_other, special_tensor
from harness.recording.tensorfile import DTYPES, dtype_name

#: Containers nest at most this deep, hold at most this many items; strings this long.
MAX_DEPTH = 16
MAX_ITEMS = 10_000
MAX_STR = 10_000
#: A restored non-contiguous tensor may span at most this many bytes of storage, and a
#: restored tensor (an expanded one included) hold at most this many bytes as a whole.
MAX_STORAGE = 1 << 30
MAX_LOGICAL = 4 << 30

#: Complex dtypes, each stored as the real dtype of its ``view_as_real``.
COMPLEX = {
    torch.complex32: torch.float16,
    torch.complex64: torch.float32,
    torch.complex128: torch.float64,
}
_DTYPE_BY_NAME = {str(d).removeprefix("torch."): d for d in (*DTYPES.values(), *COMPLEX)}
_ALL_DTYPES = {
    str(d).removeprefix("torch."): d for d in vars(torch).values() if isinstance(d, torch.dtype)
}


@dataclass
class Snapshot:
    """The arguments of one call: JSON nodes (tensors by position in ``tensors``), the live
    tensors they refer to (not yet copied), their total bytes, and the key of the call."""

    args: list[Any]
    kwargs: dict[str, Any]
    tensors: list[torch.Tensor]
    nbytes: int
    key: str


def _kind_name(value: Any) -> str:
    t = type(value)
    return t.__qualname__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"


def _non_overlapping(shape: list[int], strides: list[int]) -> bool:
    """Whether no two elements of (shape, strides) share memory (size-1 dims ignored)."""
    dims = sorted((st, n) for n, st in zip(shape, strides) if n > 1)
    reach = 0
    for st, n in dims:
        if st <= reach:
            return False
        reach += (n - 1) * st
    return True


def _tensor_node(t: torch.Tensor, path: str, tensors: list[torch.Tensor] | None) -> Any:
    if type(t) not in (torch.Tensor, torch.nn.Parameter):
        raise NotRecordable(
            f"{argument_at(path)} is a `{_kind_name(t)}` (a tensor subclass): not recordable"
        )
    if t.device.type == "meta":
        raise NotRecordable(f"{argument_at(path)} is a meta tensor (no data): not recordable")
    if t.layout != torch.strided or t.is_quantized:
        return special_tensor(t, path, tensors, _tensor_node)
    name = dtype_name(t.dtype) if t.dtype not in COMPLEX else "complex"
    if name is None:
        raise NotRecordable(
            f"{argument_at(path)} is a {t.dtype} tensor: not recordable (no such dtype in safetensors)"
        )
    if tensors is None:  # only checking
        return None
    shape = list(t.shape)
    node: dict[str, Any] = {
        "dtype": str(t.dtype).removeprefix("torch."),
        "shape": shape,
        "requires_grad": bool(t.requires_grad),
        "device": str(t.device),
    }
    if not t.is_contiguous() and t.numel() > 1:
        strides = list(t.stride())
        expand = [i for i, (n, st) in enumerate(zip(shape, strides)) if st == 0 and n > 1]
        if expand:
            node["expand"] = expand
        elif _non_overlapping(shape, strides):
            node["strides"] = strides
    node["index"] = len(tensors)
    tensors.append(t)
    return {"tensor": node}


def value_node(
    value: Any,
    path: str,
    depth: int,
    tensors: list[torch.Tensor] | None,
    allowed: frozenset[str] = frozenset(),
) -> Any:
    """The node of ``value`` (tensors appended to ``tensors``); with ``tensors`` None only
    the checks, nothing built. ``allowed``: the packages whose types may be named. Public:
    ``live`` falls back to it for every value that is data."""
    if depth > MAX_DEPTH:
        raise NotRecordable(
            f"{argument_at(path)} nests containers more than {MAX_DEPTH} deep: not recordable"
        )
    if isinstance(value, torch.Tensor):
        return _tensor_node(value, path, tensors)
    if value is None:
        return {"none": None}
    t = type(value)
    if t is bool:
        return {"bool": value}
    if t is int:
        return {"int": value}
    if t is float:
        return {"float": value if math.isfinite(value) else repr(value)}
    if t is str:
        if len(value) > MAX_STR:
            raise NotRecordable(
                f"{argument_at(path)} is a string of {len(value)} characters: over {MAX_STR}"
            )
        return {"str": value}
    if t is torch.dtype:
        return {"dtype": str(value).removeprefix("torch.")}
    if t is torch.device:
        return {"device": str(value)}
    if t in (tuple, list):
        if len(value) > MAX_ITEMS:
            raise NotRecordable(f"{argument_at(path)} holds {len(value)} items: over {MAX_ITEMS}")
        items = [
            value_node(v, f"{path}[{i}]", depth + 1, tensors, allowed) for i, v in enumerate(value)
        ]
        return {"list" if t is list else "tuple": items}
    if t is dict:
        if len(value) > MAX_ITEMS:
            raise NotRecordable(f"{argument_at(path)} holds {len(value)} items: over {MAX_ITEMS}")
        out = []
        for k, v in value.items():
            if type(k) is not str:
                raise NotRecordable(
                    f"{argument_at(path)} is a dict with a `{_kind_name(k)}` key: not recordable (str keys only)"
                )
            out.append([k, value_node(v, f"{path}[{k!r}]", depth + 1, tensors, allowed)])
        return {"dict": out}

    def inner(v: Any, where: str) -> Any:
        return value_node(v, where, depth + 1, tensors, allowed)

    found = other_node(value, path, tensors, allowed, inner)
    if found is not None:
        return found
    raise NotRecordable(f"{argument_at(path)} is a `{_kind_name(value)}`: not recordable")


def check(
    args: tuple[Any, ...], kwargs: dict[str, Any], allowed: frozenset[str] = frozenset()
) -> None:
    """NotRecordable (the reason) when ``snapshot`` would raise it; builds nothing."""
    for i, a in enumerate(args):
        if type(a) not in _PLAIN:
            value_node(a, str(i), 0, None, allowed)
    for k, v in kwargs.items():
        value_node(v, k, 0, None, allowed)


#: Types whose values are always recordable (checked without a call).
_PLAIN = frozenset({bool, int, float, type(None), torch.dtype, torch.device})


def snapshot(
    args: tuple[Any, ...], kwargs: dict[str, Any], allowed: frozenset[str] = frozenset()
) -> Snapshot:
    """The call's arguments as nodes; NotRecordable (the reason) for the first that is not.
    ``allowed``: the packages whose types (enums, namedtuples, dataclasses) may be named."""
    tensors: list[torch.Tensor] = []
    nodes = [value_node(a, str(i), 0, tensors, allowed) for i, a in enumerate(args)]
    knodes = {k: value_node(v, k, 0, tensors, allowed) for k, v in kwargs.items()}
    key = repr([nodes, knodes])  # same nodes, same text (json.dumps costs 3x more)
    nbytes = sum(t.numel() * t.element_size() for t in tensors)
    return Snapshot(nodes, knodes, tensors, nbytes, key)


def _fast(value: Any, depth: int) -> Any:
    t = type(value)
    if t is torch.Tensor or t is torch.nn.Parameter:
        if value.layout != torch.strided or value.is_quantized:
            raise _NoFastKey
        return (value.dtype, tuple(value.shape), value.stride(), value.requires_grad, value.device)
    if t is float:
        return (t, value.hex())
    if t in _PLAIN or t is str:
        return (t, value)
    if (t is tuple or t is list) and depth < MAX_DEPTH:
        return (t, *(_fast(v, depth + 1) for v in value))
    if value is Ellipsis:
        return (t,)
    if isinstance(value, enum.Enum):  # a member, by its class and name
        return (t, value._name_)
    if t.__module__ == "numpy" and hasattr(value, "dtype") and not hasattr(value, "__len__"):
        return (t, value.tobytes())  # a numpy scalar, by its bytes
    if t is dict and depth < MAX_DEPTH:
        return (t, *((k, _fast(v, depth + 1)) for k, v in value.items()))
    raise _NoFastKey


class _NoFastKey(Exception):
    pass


def fast_key(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """A hashable key of a call's arguments, cheap to make, equal only where the calls'
    ``snapshot`` keys are equal (finer where it must be); None where a value is of another
    kind (then only ``snapshot`` says)."""
    try:
        return (
            tuple(_fast(a, 0) for a in args),
            tuple((k, _fast(v, 0)) for k, v in kwargs.items()),
        )
    except _NoFastKey:
        return None


def stored(t: torch.Tensor, node: dict[str, Any]) -> torch.Tensor:
    """The detached copy of ``t`` that goes into the tensor file (expanded dims once)."""
    base = t.detach()
    for d in node.get("expand", ()):
        base = base.narrow(d, 0, 1)
    out = base.to("cpu", copy=True).contiguous()
    if out.is_complex():
        out = torch.view_as_real(out.resolve_conj().resolve_neg()).clone()
    return out


# --- back from data ----------------------------------------------------------------------


def stored_shape(node: dict[str, Any]) -> list[int]:
    """The shape the tensor file holds for a tensor node."""
    shape = list(node["shape"])
    for d in node.get("expand", ()):
        shape[d] = 1
    if _DTYPE_BY_NAME.get(node["dtype"]) in COMPLEX:
        shape.append(2)
    return shape


def restore_tensor(node: dict[str, Any], data: torch.Tensor) -> torch.Tensor:
    """The call's tensor from its node and the file's data (checked: BadNode)."""
    dtype = _DTYPE_BY_NAME.get(node["dtype"])
    shape = list(node["shape"])
    if dtype in COMPLEX and data.dtype == COMPLEX[dtype]:  # the real view of a complex tensor
        if list(data.shape) != stored_shape(node):
            raise BadNode(f"shape {shape} but the tensor file holds {list(data.shape)}")
        data = torch.view_as_complex(data.contiguous())
    elif dtype is None or data.dtype != dtype:
        raise BadNode(f"dtype {node['dtype']!r} but the tensor file holds {data.dtype}")
    else:  # a complex64 tensor held as such (recordings of earlier versions)
        want = stored_shape(node)[:-1] if dtype in COMPLEX else stored_shape(node)
        if list(data.shape) != want:
            raise BadNode(f"shape {shape} but the tensor file holds {list(data.shape)}")
    logical = math.prod(shape) * data.element_size()
    if logical > MAX_LOGICAL:
        raise BadNode(f"shape {shape} is {logical} bytes, over the {MAX_LOGICAL}-byte limit")
    expand = node.get("expand", [])
    if any(not 0 <= d < len(shape) or shape[d] < 2 for d in expand) or len(set(expand)) != len(
        expand
    ):
        raise BadNode(f"expand {expand} does not name dims of size > 1 of shape {shape}")
    strides = node.get("strides")
    if expand:
        out = data.expand(shape)
    elif strides is not None:
        if len(strides) != len(shape) or not _non_overlapping(shape, strides):
            raise BadNode(f"strides {strides} do not fit shape {shape} without overlap")
        span = 1 + sum((n - 1) * st for n, st in zip(shape, strides)) if data.numel() else 0
        if span * data.element_size() > MAX_STORAGE:
            raise BadNode(f"strides {strides} span more than {MAX_STORAGE} bytes")
        out = torch.empty_strided(shape, strides, dtype=dtype)
        with torch.no_grad():
            out.copy_(data)
    else:
        out = data.clone()
    device = node["device"]
    if device != "cpu":
        # recorded on a device this machine lacks: the data stays on the CPU
        with contextlib.suppress(RuntimeError, AssertionError):
            out = out.to(device)
    if node["requires_grad"]:
        if not (dtype.is_floating_point or dtype.is_complex):
            raise BadNode(f"requires_grad on a {node['dtype']} tensor")
        out = out.detach().requires_grad_(True)
    return out


def restore(
    node: Any, tensors: dict[str, torch.Tensor], allowed: frozenset[str] = frozenset()
) -> Any:
    """The value of a (schema-valid) node; tensors by their name in the file; types named
    only inside the packages ``allowed`` (BadNode otherwise)."""
    ((kind, value),) = node.items()
    if kind == "none":
        return None
    if kind in ("bool", "int", "str"):
        return value
    if kind == "float":
        return float(value)
    if kind == "dtype":
        if value not in _ALL_DTYPES:
            raise BadNode(f"{value!r} is not a torch dtype")
        return _ALL_DTYPES[value]
    if kind == "device":
        try:
            return torch.device(value)
        except RuntimeError:
            raise BadNode(f"{value!r} is not a torch device") from None
    if kind in ("tuple", "list"):
        items = [restore(v, tensors, allowed) for v in value]
        return tuple(items) if kind == "tuple" else items
    if kind == "dict":
        return {k: restore(v, tensors, allowed) for k, v in value}
    if kind == "tensor":
        return restore_tensor(value, tensors[value["name"]])
    return restore_other(kind, value, lambda n: restore(n, tensors, allowed), allowed)
