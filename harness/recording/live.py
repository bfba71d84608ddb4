"""Live values: what a call passes that cannot be data (functions, lambdas, bound methods,
modules, tensor subclasses, other objects), kept for a check in the recording process.

A call with such an argument is snapshotted before it runs: plain tensors detached and
cloned, everything else deep-copied with one memo (a parameter that is also a tensor
argument stays one object), so that what the program does to its objects afterwards
changes nothing in the check. The written recording keeps the call with each such value
described by a node:

* ``{"ref": {"target": "pkg.mod:name", "type": "builtins:function"}}``: a module-level
  object of the Function's own package, reachable by ``module:qualname`` and identical to
  what was passed (a top-level function, a module-level instance). ``harness.recorded.references.resolve`` imports it
  again when checked, and only from the packages whose Functions the recording holds;
* ``{"live": {"type": "torch.nn.modules.linear:Linear", "name": "..."}}``: live-only; a
  check in another process says how many calls need the recording process.

Reading a recording builds ``Ref`` and ``Live`` placeholders and imports nothing.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from harness.recording import values
from harness.recording.data_errors import NotRecordable
from harness.recording.live_copy import (
    Copied,
    TookTooLong,
    bounded,
    copy_call,
    held_tensors,
    type_name,
)
from harness.recording.refs import top_package


@dataclass(frozen=True)
class Live:
    """A value only the recording process held (read back from a recording)."""

    type: str
    name: str = ""
    #: Why it is not data (the reason the plain-data encoding gave).
    why: str = ""
    #: How the recording process kept it (a deep copy; copied with parts by reference).
    kept: str = ""

    def describe(self) -> str:
        return f"`{self.type}`" + (f" ({self.name})" if self.name else "")


@dataclass(frozen=True)
class Ref:
    """A module-level object, by ``module:qualname``, resolved when checked."""

    target: str
    type: str


@dataclass(frozen=True, eq=False)
class Wrapped:
    """A traceable wrapper tensor subclass read back: its class, inner tensors, metadata
    and outer size; rebuilt by ``harness.recorded.references`` with the class's ``__tensor_unflatten__``."""

    cls: str
    inner: dict[str, torch.Tensor]
    meta: Any
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    requires_grad: bool


def _own_name(value: Any) -> str:
    """``module:qualname`` of a function, class or bound method, else ''."""
    if isinstance(value, types.MethodType):
        owner = getattr(value.__self__, "__class__", None)
        base = _own_name(owner) if owner is not None else ""
        return f"{base}.{value.__name__}" if base else ""
    try:  # an object's own ``__getattr__`` may raise anything
        module = getattr(value, "__module__", None)
        qual = getattr(value, "__qualname__", None)
    except Exception:
        return ""
    if isinstance(module, str) and isinstance(qual, str) and not isinstance(value, torch.Tensor):
        return f"{module}:{qual}"
    return ""


def reference(value: Any, package: str) -> str | None:
    """``module:qualname`` when ``value`` is a module-level object of ``package`` that this
    name finds again (the same object), else None."""
    if isinstance(value, torch.Tensor | types.MethodType):
        return None
    name = _own_name(value)
    if name:
        module, _, qual = name.partition(":")
        if top_package(module) != package or "<" in qual:
            return None
        obj: Any = sys.modules.get(module)
        for part in qual.split("."):
            obj = getattr(obj, part, None)
        return name if obj is value else None
    module = type(value).__module__
    mod = sys.modules.get(module)
    if top_package(module) != package or mod is None:
        return None
    for key, held in vars(mod).items():
        if held is value and key.isidentifier():
            return f"{module}:{key}"
    return None


def _nbytes(value: Any, seen: set[int]) -> int:
    """Bytes of every tensor a live value holds (a module's parameters and buffers, an
    object's attributes, a closure's cells), each tensor counted once over the call."""
    total = 0
    for t in held_tensors(value):
        if id(t) not in seen:
            seen.add(id(t))
            total += t.numel() * t.element_size()
    return total


@dataclass
class LiveSnapshot:
    """A call that needs live values: its nodes, its plain tensors (for the file), the
    deep copy of its arguments, the bytes it holds, and the key of the call."""

    args: list[Any]
    kwargs: dict[str, Any]
    tensors: list[torch.Tensor]
    live_args: tuple[Any, ...]
    live_kwargs: dict[str, Any]
    nbytes: int
    key: str
    biggest: int
    #: The copy (what it kept by reference, to be found unchanged after the call).
    copied: Copied | None = None


def _node(
    value: Any,
    path: str,
    depth: int,
    tensors: list,
    package: str,
    held: list,
    allowed: frozenset[str] = frozenset(),
) -> Any:
    t = type(value)
    if depth <= values.MAX_DEPTH and t in (tuple, list):
        items = [
            _node(v, f"{path}[{i}]", depth + 1, tensors, package, held, allowed)
            for i, v in enumerate(value)
        ]
        return {"list" if t is list else "tuple": items}
    if depth <= values.MAX_DEPTH and t is dict and all(type(k) is str for k in value):
        return {
            "dict": [
                [k, _node(v, f"{path}[{k!r}]", depth + 1, tensors, package, held, allowed)]
                for k, v in value.items()
            ]
        }
    mark = len(tensors)
    try:
        return values.value_node(value, path, depth, tensors, allowed)
    except NotRecordable as e:
        del tensors[mark:]
        why = str(e)[:1000]
    if isinstance(value, torch.Tensor) and value.device.type == "meta":
        raise NotRecordable(f"argument {path} is a meta tensor (no data): not recordable")
    if isinstance(value, types.GeneratorType | types.CoroutineType):
        raise NotRecordable(f"argument {path} is a generator: not recordable")
    wrapped = _wrapper_node(value, path, depth, tensors)
    if wrapped is not None:
        return wrapped
    held.append(value)
    ref = reference(value, package)
    if ref is not None:
        return {"ref": {"target": ref, "type": type_name(value)}}
    return {"live": {"type": type_name(value), "name": _own_name(value), "why": why}}


def _live_nodes(node: Any) -> list[dict[str, Any]]:
    """The ``live`` and ``ref`` bodies of a call's nodes (where ``kept`` is said)."""
    out = []
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, list):
            stack.extend(n)
        elif isinstance(n, dict):
            if "live" in n and isinstance(n["live"], dict):
                out.append(n["live"])
            else:
                stack.extend(n.values())
    return out


def _wrapper_node(value: Any, path: str, depth: int, tensors: list) -> Any:
    """A traceable wrapper subclass (``__tensor_flatten__``/``__tensor_unflatten__``) as
    its inner tensors, metadata (when data) and class; None when it is not one."""
    cls = type(value)
    if not (
        isinstance(value, torch.Tensor)
        and hasattr(cls, "__tensor_flatten__")
        and hasattr(cls, "__tensor_unflatten__")
        and "<" not in cls.__qualname__
    ):
        return None
    mark = len(tensors)
    try:
        names, meta = value.__tensor_flatten__()  # type: ignore[attr-defined]
        inner = []
        for name in names:
            t = getattr(value, name)
            if type(t) not in (torch.Tensor, torch.nn.Parameter):
                raise NotRecordable("a nested subclass")
            inner.append(
                [name, values.value_node(t.detach(), f"{path}.{name}", depth + 1, tensors)]
            )
        meta_node = values.value_node(meta, f"{path}.meta", depth + 1, tensors)
    except Exception:
        del tensors[mark:]
        return None
    return {
        "subclass": {
            "class": type_name(value),
            "inner": inner,
            "meta": meta_node,
            "shape": list(value.shape),
            "strides": list(value.stride()),
            "requires_grad": bool(value.requires_grad),
        }
    }


#: How long copying one call's live values may take (seconds) before it is given up.
SNAPSHOT_SECONDS = 10.0


class NotCopied(NotRecordable):
    """A live value that could be neither copied nor kept (the message is the reason;
    ``kind``: ``not copyable``, or ``slow copy`` when copying took too long)."""

    def __init__(self, message: str, kind: str = "not copyable") -> None:
        super().__init__(message)
        self.kind = kind


def snapshot(
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    package: str,
    keys: set[str] | frozenset[str] = frozenset(),
    limits: tuple[int, int] | None = None,
    allowed: frozenset[str] = frozenset(),
    seconds: float = SNAPSHOT_SECONDS,
    enter: Callable[[], None] = lambda: None,
) -> LiveSnapshot | None:
    """The call as nodes with live values, and its copy (None, nothing copied, when its
    key is among ``keys``); NotRecordable (the reason) when a value can be neither data
    nor copied, ``NotCopied`` when copying failed or took longer than ``seconds`` (run
    in a thread of its own, ``enter`` first there). ``limits`` (the largest tensor or
    object, the bytes left): over them nothing is copied either (the caller names the
    limit); every tensor an object holds counts."""
    tensors: list[torch.Tensor] = []
    held: list[Any] = []
    with torch._C.DisableTorchFunctionSubclass():
        nodes = [_node(a, str(i), 0, tensors, package, held, allowed) for i, a in enumerate(args)]
        knodes = {k: _node(v, k, 0, tensors, package, held, allowed) for k, v in kwargs.items()}
        key = repr([nodes, knodes])
        if key in keys:
            return None
        seen: set[int] = {id(t) for t in tensors}
        sizes = [t.numel() * t.element_size() for t in tensors]
        held_bytes = [_nbytes(v, seen) for v in held]
    total, biggest = sum(sizes) + sum(held_bytes), max(sizes + held_bytes + [0])
    if limits is not None and (biggest > limits[0] or total > limits[1]):
        return LiveSnapshot(nodes, knodes, tensors, (), {}, total, key, biggest)

    def take() -> Copied:
        with torch._C.DisableTorchFunctionSubclass():
            memo: dict[int, Any] = {}
            for t in tensors:
                if t.grad_fn is not None or type(t) is torch.Tensor:
                    memo[id(t)] = t.detach().clone().requires_grad_(t.requires_grad)
            return copy_call(tuple(args), dict(kwargs), memo)

    what = ", ".join(dict.fromkeys(f"`{type_name(v)}`" for v in held))
    try:
        copied = bounded(take, seconds, enter)
    except TookTooLong:
        raise NotCopied(
            f"an argument ({what}) was not recorded: copying it took longer than {seconds:g} s",
            "slow copy",
        ) from None
    except Exception as e:
        raise NotCopied(
            f"an argument ({what}) cannot be copied for the check "
            f"({type(e).__name__}: {str(e)[:200]})"
        ) from None
    kept = copied.strategy()
    for body in _live_nodes([nodes, knodes]):
        body["kept"] = kept
    return LiveSnapshot(
        nodes, knodes, tensors, copied.args, copied.kwargs, total, key, biggest, copied
    )


# --- back from data ----------------------------------------------------------------------


def restore(
    node: Any, tensors: dict[str, torch.Tensor], allowed: frozenset[str] = frozenset()
) -> Any:
    """``values.restore`` with ``ref`` and ``live`` nodes as placeholders (imports nothing)."""
    ((kind, value),) = node.items()
    if kind == "ref":
        return Ref(value["target"], value["type"])
    if kind == "live":
        return Live(value["type"], value["name"], value.get("why", ""), value.get("kept", ""))
    if kind == "subclass":
        return Wrapped(
            value["class"],
            {k: values.restore(v, tensors, allowed) for k, v in value["inner"]},
            restore(value["meta"], tensors, allowed),
            tuple(value["shape"]),
            tuple(value["strides"]),
            bool(value["requires_grad"]),
        )
    if kind in ("tuple", "list"):
        items = [restore(v, tensors, allowed) for v in value]
        return tuple(items) if kind == "tuple" else items
    if kind == "dict":
        return {k: restore(v, tensors, allowed) for k, v in value}
    return values.restore(node, tensors, allowed)


def _walk(value: Any) -> list[Any]:
    out = []
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, Live | Ref | Wrapped):
            out.append(v)
        elif type(v) in (tuple, list):
            stack.extend(v)
        elif type(v) is dict:
            stack.extend(v.values())
    return out


def placeholders(args: Any) -> list[Any]:
    """The ``Live`` and ``Ref`` values a recorded call holds."""
    return _walk(args)


def class_suffix(cls: type) -> str:
    """``[sort_fn]``: what the closures of a class made per call hold (functions and
    classes by name, data by value), so classes made by one factory around different
    functions are named apart; '' when they hold nothing of the kind."""
    parts: dict[str, str] = {}
    for name in ("forward", "backward", "setup_context", "jvp", "vmap", "vjp"):
        fn = cls.__dict__.get(name)
        fn = getattr(fn, "__func__", fn)
        code = getattr(fn, "__code__", None)
        cells = getattr(fn, "__closure__", None) or ()
        if code is None:
            continue
        for var, cell in zip(code.co_freevars, cells, strict=False):
            if var == "__class__" or var in parts:
                continue
            try:
                held = cell.cell_contents
            except ValueError:
                continue
            if isinstance(held, types.FunctionType | types.BuiltinFunctionType | type):
                parts[var] = getattr(held, "__name__", var)
            elif type(held) in (bool, int, float, str) and len(repr(held)) <= 40:
                parts[var] = f"{var}={held!r}"
    return f"[{','.join(parts[k] for k in sorted(parts))}]" if parts else ""
