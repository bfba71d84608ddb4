"""The snapshot of a call's live values: a copy that stays as it was at the call.

One copier, value by value, so that a value ``copy.deepcopy`` cannot take whole (a
representation object holding an ``odict_keys`` view, a non-leaf tensor, a quantized
weight subclass built on a graph) still comes back:

* tensors are detached copies of their data with ``requires_grad`` as it was (non-leaf
  tensors included); a traceable wrapper subclass is rebuilt from copies of its inner
  tensors (``__tensor_flatten__``/``__tensor_unflatten__``), another subclass as a copy of
  its data viewed as its class with its attributes copied;
* containers, closures and bound methods are copied part by part;
* other objects are deep-copied (torch's own way for modules), and where that fails or
  gives something that is not a faithful copy (another type, attributes missing: a
  ``__deepcopy__`` that returns ``None``), rebuilt as a new instance of the class with
  its attributes copied; an object with copy hooks of its own (``__deepcopy__``,
  ``__reduce__``, ...) is rebuilt that way first, so recording calls none of the test's
  hooks where the class needs none;
* what none of this copies (an ``odict_keys`` view, a lock) is kept by reference: the
  snapshot names it and fingerprints every tensor it reaches, and the observer keeps the
  call only if those tensors are the same objects at the same versions after the call.

Every step runs with tensor subclasses' ``__torch_function__`` disabled, so observing a
call runs none of it (a subclass's ``__torch_dispatch__`` still runs for the copies of its
data). The copy runs in a thread of its own, bounded in time by the caller.
"""

from __future__ import annotations

import contextlib
import copy
import threading
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

#: Objects one walk over a value looks at, at most (a cyclic or huge structure stops there).
MAX_WALK = 100_000
#: Types kept as they are: immutable, or things a copy would not change (classes, modules).
_ATOMS = (
    type(None),
    bool,
    int,
    float,
    complex,
    str,
    bytes,
    type,
    types.ModuleType,
    types.BuiltinFunctionType,
    types.CodeType,
    torch.dtype,
    torch.device,
    torch.layout,
    torch.memory_format,
    torch.Size,
    type(Ellipsis),
    type(NotImplemented),
    range,
    slice,
)
_HOOKS = ("__deepcopy__", "__copy__", "__reduce__", "__reduce_ex__", "__getstate__", "__setstate__")


def _is_own(cls: type) -> bool:
    """Whether ``cls`` is Python's or torch's (its copy hooks are not the test's)."""
    module = getattr(cls, "__module__", "") or ""
    return module in ("builtins", "copyreg", "collections", "enum") or module.split(".")[0] in (
        "torch",
        "numpy",
    )


def user_hooks(cls: type) -> tuple[str, ...]:
    """The copy hooks a class of the program defines (none for Python's and torch's)."""
    found = []
    for klass in cls.__mro__:
        if _is_own(klass):
            continue
        found += [h for h in _HOOKS if h in vars(klass)]
    return tuple(dict.fromkeys(found))


def _state(value: Any) -> dict[str, Any] | None:
    """The instance ``__dict__`` without calling ``__getattr__`` (None where it has none)."""
    try:
        d = object.__getattribute__(value, "__dict__")
    except Exception:
        return None
    return d if type(d) is dict else None


def _slots(cls: type) -> list[str]:
    names: list[str] = []
    for klass in cls.__mro__:
        raw = vars(klass).get("__slots__", ())
        names += [raw] if isinstance(raw, str) else [s for s in raw if isinstance(s, str)]
    return [n for n in dict.fromkeys(names) if n not in ("__dict__", "__weakref__")]


def type_name(value: Any) -> str:
    t = type(value)
    return f"{t.__module__}:{t.__qualname__}"


def held_tensors(value: Any) -> list[torch.Tensor]:
    """Every tensor ``value`` reaches through containers, attributes, slots, closures and
    bound methods (a module's parameters and buffers included), each once."""
    out: dict[int, torch.Tensor] = {}
    seen: set[int] = set()
    stack = [value]
    looked = 0
    while stack and looked < MAX_WALK:
        v = stack.pop()
        if id(v) in seen or isinstance(v, _ATOMS):
            continue
        seen.add(id(v))
        looked += 1
        if isinstance(v, torch.Tensor):
            out.setdefault(id(v), v)
            if hasattr(type(v), "__tensor_flatten__"):
                try:
                    names, _ = v.__tensor_flatten__()  # type: ignore[attr-defined]
                    stack += [object.__getattribute__(v, n) for n in names]
                except Exception:
                    pass
            state = _state(v)
            if state:
                stack += list(state.values())
            continue
        t = type(v)
        if t in (tuple, list, set, frozenset):
            stack += list(v)
        elif isinstance(v, dict):
            with contextlib.suppress(Exception):
                stack += list(dict.values(v))
        elif isinstance(v, types.FunctionType):
            for cell in v.__closure__ or ():
                with contextlib.suppress(ValueError):
                    stack.append(cell.cell_contents)
        elif isinstance(v, types.MethodType):
            stack.append(v.__self__)
        else:
            state = _state(v)
            if state is not None:
                stack += list(state.values())
            for name in _slots(t):
                with contextlib.suppress(Exception):
                    stack.append(object.__getattribute__(v, name))
    return list(out.values())


@dataclass
class Copied:
    """The copy of a call's arguments, what it kept by reference, and how."""

    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    #: ``module:QualName`` of each value kept by reference (not copied).
    shared: list[str] = field(default_factory=list)
    #: (tensor, its version) of every tensor the shared values reach.
    prints: list[tuple[torch.Tensor, int]] = field(default_factory=list)
    #: Values rebuilt without their class's own copy hooks or after deepcopy failed.
    rebuilt: list[str] = field(default_factory=list)

    def strategy(self) -> str:
        """How the live values were kept, in words (the recording's ``kept``)."""
        if self.shared:
            names = ", ".join(f"`{n}`" for n in dict.fromkeys(self.shared))
            return (
                f"copied, {len(self.shared)} part{'s' if len(self.shared) != 1 else ''} kept "
                f"by reference ({names}) and checked unchanged by the call"
            )
        if self.rebuilt:
            names = ", ".join(f"`{n}`" for n in dict.fromkeys(self.rebuilt))
            return f"copied, {names} rebuilt from copies of its attributes"
        return "deep copy"

    def changed(self) -> str:
        """'' when every tensor the shared values reach is as it was, else which was not."""
        for t, version in self.prints:
            if t._version != version:
                return f"a tensor held by `{self.shared[0]}` changed during the call"
        return ""


class _Copier:
    def __init__(self, memo: dict[int, Any]) -> None:
        self.memo = memo
        self.out = Copied((), {})
        self._keep: list[Any] = []

    def _remember(self, value: Any, made: Any) -> Any:
        self.memo[id(value)] = made
        self._keep.append(value)  # ids stay unique while the memo lives
        return made

    def share(self, value: Any) -> Any:
        self.out.shared.append(type_name(value))
        for t in held_tensors(value):
            self.out.prints.append((t, t._version))
        return self._remember(value, value)

    def value(self, v: Any) -> Any:
        if id(v) in self.memo:
            return self.memo[id(v)]
        if isinstance(v, _ATOMS):
            return v
        if isinstance(v, torch.Tensor):
            return self.tensor(v)
        t = type(v)
        if t in (tuple, list, set, frozenset):
            if t is list:
                made: list[Any] = self._remember(v, [])
                made.extend(self.value(x) for x in v)
                return made
            return self._remember(v, t(self.value(x) for x in v))
        if t is dict:
            d: dict[Any, Any] = self._remember(v, {})
            for k, x in v.items():
                d[self.value(k)] = self.value(x)
            return d
        if isinstance(v, types.FunctionType):
            return self.function(v)
        if isinstance(v, types.MethodType):
            return self._remember(v, types.MethodType(v.__func__, self.value(v.__self__)))
        return self.instance(v)

    def tensor(self, t: torch.Tensor) -> Any:
        cls = type(t)
        if cls is torch.Tensor or cls is torch.nn.Parameter:
            data = t.detach().clone()
            made = (
                torch.nn.Parameter(data, t.requires_grad)
                if cls is torch.nn.Parameter
                else data.requires_grad_(t.requires_grad)
            )
            return self._remember(t, made)
        if hasattr(cls, "__tensor_flatten__") and hasattr(cls, "__tensor_unflatten__"):
            try:
                names, meta = t.__tensor_flatten__()  # type: ignore[attr-defined]
                inner = {n: self.tensor(object.__getattribute__(t, n)) for n in names}
                inner = {n: x.detach() for n, x in inner.items()}
                made = cls.__tensor_unflatten__(inner, meta, t.size(), t.stride())  # type: ignore[attr-defined]
                if type(made) is cls:
                    return self._rebuilt(t, made)
            except Exception:
                pass
        try:  # a plain subclass: its data viewed as its class, its attributes copied
            made = t.detach().clone().as_subclass(cls)
            state = _state(t)
            if state:
                for k, x in state.items():
                    object.__setattr__(made, k, self.value(x))
            if type(made) is cls:
                return self._rebuilt(t, made)
        except Exception:
            pass
        return self.share(t)

    def _rebuilt(self, t: torch.Tensor, made: torch.Tensor) -> torch.Tensor:
        """``made``, a subclass tensor rebuilt from ``t``'s data, as ``t``'s copy
        (``requires_grad`` as it was, named among the rebuilt)."""
        if t.requires_grad:
            made.requires_grad_(True)
        self.out.rebuilt.append(type_name(t))
        return self._remember(t, made)

    def function(self, fn: types.FunctionType) -> types.FunctionType:
        """``fn`` with the values of its closure copied (its globals stay shared); made
        (and remembered) before its cells are filled, so a closure that holds itself (a
        recursive inner function) holds its copy."""
        old = fn.__closure__ or ()
        cells = tuple(types.CellType() for _ in old)
        out = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, cells)
        self._remember(fn, out)
        out.__kwdefaults__ = copy.copy(fn.__kwdefaults__)
        out.__qualname__, out.__module__ = fn.__qualname__, fn.__module__
        out.__dict__.update(fn.__dict__)
        for new, cell in zip(cells, old, strict=True):
            try:
                held = cell.cell_contents
            except ValueError:  # an empty cell stays empty
                continue
            new.cell_contents = self.value(held)
        return out

    def instance(self, v: Any) -> Any:
        """An object: a module or a class of Python's or torch's deep-copied (torch's own
        way), then rebuilt from its attributes where that fails; an object of the
        program's own classes rebuilt from its attributes first (what it holds copied by
        this copier: a closure's tensors too; none of its copy hooks run), then its own
        copy; kept by reference where neither gives a faithful copy."""
        cls = type(v)
        if isinstance(v, torch.nn.Module) or _is_own(cls):
            ways = (self.deep, self.rebuild)
        else:
            ways = (self.rebuild, self.deep)
        for i, way in enumerate(ways):
            made = way(v)
            if made is not _FAILED:
                if way == self.rebuild and (i > 0 or user_hooks(cls)):
                    self.out.rebuilt.append(type_name(v))  # its own copy not used: said
                return made
        return self.share(v)

    def deep(self, v: Any) -> Any:
        """``copy.deepcopy`` on a scratch memo (one that fails half way leaves half-built
        copies behind), kept only where the copy is faithful."""
        scratch = dict(self.memo)
        try:
            made = copy.deepcopy(v, scratch)
        except Exception:
            return _FAILED
        if not faithful(v, made):
            return _FAILED
        if made is v:  # its class copies as itself: the same object, kept by reference
            return self.share(v)
        self._keep.append(scratch.pop(id(scratch), None))  # its temporaries' ids
        self.memo.update(scratch)
        return self._remember(v, made)

    def rebuild(self, v: Any) -> Any:
        """A new instance of ``v``'s class (``object.__new__``: no ``__init__``, no hook)
        holding copies of its attributes and slots; ``_FAILED`` where that cannot be."""
        cls = type(v)
        state = _state(v)
        slots = _slots(cls)
        if (state is None and not slots) or getattr(cls, "__new__", None) is not object.__new__:
            return _FAILED
        try:
            made = object.__new__(cls)
        except Exception:
            return _FAILED
        self._remember(v, made)
        try:
            if state is not None:
                target = object.__getattribute__(made, "__dict__")
                for k, x in state.items():
                    target[k] = self.value(x)
            for name in slots:
                try:
                    held = object.__getattribute__(v, name)
                except AttributeError:
                    continue
                object.__setattr__(made, name, self.value(held))
        except Exception:
            del self.memo[id(v)]
            return _FAILED
        return made


_FAILED: Any = object()


def faithful(value: Any, made: Any) -> bool:
    """Whether ``made`` can stand for ``value``: the same type, the same attributes."""
    if type(made) is not type(value):
        return False
    a, b = _state(value), _state(made)
    if (a is None) != (b is None):
        return False
    return a is None or b is None or set(a) == set(b)


def copy_call(args: tuple[Any, ...], kwargs: dict[str, Any], memo: dict[int, Any]) -> Copied:
    """The copy of a call's arguments (``memo``: copies already made, by ``id``)."""
    with torch._C.DisableTorchFunctionSubclass():
        copier = _Copier(memo)
        made_args = tuple(copier.value(a) for a in args)
        made_kwargs = {k: copier.value(v) for k, v in kwargs.items()}
    out = copier.out
    out.args, out.kwargs = made_args, made_kwargs
    return out


class TookTooLong(Exception):
    """The copy did not finish within its time."""


def bounded(fn: Callable[[], Any], seconds: float, enter: Callable[[], None]) -> Any:
    """``fn()`` in a thread of its own (``enter`` first, in it), waited for ``seconds``:
    its result, its exception, or ``TookTooLong`` (the thread is left to finish alone)."""
    box: list[Any] = []

    def run() -> None:
        try:
            enter()
            box.append((True, fn()))
        except BaseException as e:  # handed to the caller
            box.append((False, e))

    worker = threading.Thread(target=run, name="afdb-snapshot", daemon=True)
    worker.start()
    worker.join(seconds)
    if not box:
        raise TookTooLong
    ok, value = box[0]
    if not ok:
        raise value
    return value
