"""Pytrees: tensors inside the arguments a Function takes and the outputs it returns.

Arguments (``leaves``, ``map_leaves``, ``arg_structure``, ...): leaves, addresses and in_dims
pytrees.

``torch.func.vmap`` takes ``in_dims`` as a pytree with the structure of the
arguments (a prefix of it: ``None`` for a whole container is allowed), and the
vmap staticmethod receives ``in_dims`` with exactly the arguments' structure.
The harness batches each tensor leaf on its own, so a leaf is named by its
*address*: the argument position followed by the keys down to the leaf
(``(1, 0)`` is element 0 of the tuple that is argument 1). Only plain tuples,
lists and dicts are containers here (the pytree types ``in_dims`` supports).

Outputs (``output_leaves``, ``output_structure``, ``FlatCall``, ...): flat leaves for the
checks, readable paths for messages.

A Function may return a tensor, a tuple or list of them, or any nesting of tuples, lists
and dicts (a normalisation that also returns ``{"mean": ..., "var": ...}``). Every check
works on the flat leaves (``torch.utils._pytree``, the flattening torch.func itself uses),
and a message names a leaf by its path: ``output 1['var']``. A tensor or a flat tuple keeps
the plain names ``output 0``, ``output 1``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
import torch.utils._pytree as pytree

Keys = tuple[Any, ...]
Address = tuple[Any, ...]  # (argument position, *keys)


def is_container(x: Any) -> bool:
    return type(x) in (tuple, list) or type(x) is dict


def leaves(x: Any, prefix: Keys = ()) -> Iterator[tuple[Keys, Any]]:
    """(keys, value) for every leaf of ``x``, depth first; a non-container is one leaf."""
    if type(x) in (tuple, list):
        for k, v in enumerate(x):
            yield from leaves(v, (*prefix, k))
    elif type(x) is dict:
        for k, v in x.items():
            yield from leaves(v, (*prefix, k))
    else:
        yield prefix, x


def map_leaves(x: Any, fn: Callable[[Keys, Any], Any], prefix: Keys = ()) -> Any:
    """``x`` rebuilt with every leaf replaced by ``fn(keys, leaf)`` (same container types)."""
    if type(x) in (tuple, list):
        return type(x)(map_leaves(v, fn, (*prefix, k)) for k, v in enumerate(x))
    if type(x) is dict:
        return {k: map_leaves(v, fn, (*prefix, k)) for k, v in x.items()}
    return fn(prefix, x)


def get_at(x: Any, keys: Keys) -> Any:
    for k in keys:
        x = x[k]
    return x


def dim_at(spec: Any, keys: Keys) -> Any:
    """The batch dim an in_dims pytree gives the leaf at ``keys`` (a ``None``/int prefix
    applies to everything below it)."""
    for k in keys:
        if spec is None or isinstance(spec, (int, str)):
            return spec
        spec = spec[k]
    return spec


def tensor_leaves(x: Any) -> list[tuple[Keys, torch.Tensor]]:
    return [(k, v) for k, v in leaves(x) if isinstance(v, torch.Tensor)]


def clone_tensors(x: Any) -> Any:
    """Fresh copies of every tensor leaf (plain values are shared)."""
    if isinstance(x, torch.Tensor):
        return x.detach().clone()
    return map_leaves(x, lambda _, v: v.detach().clone() if isinstance(v, torch.Tensor) else v)


def fmt(spec: Any) -> str:
    """An in_dims pytree as the case id shows it: ``(0,(None,1))``, ``[0,-1]``, ``{a:0,b:None}``."""
    if spec is None:
        return "None"
    if type(spec) is tuple:
        inner = ",".join(fmt(v) for v in spec)
        return f"({inner},)" if len(spec) == 1 else f"({inner})"
    if type(spec) is list:
        return "[" + ",".join(fmt(v) for v in spec) + "]"
    if type(spec) is dict:
        return "{" + ",".join(f"{k}:{fmt(v)}" for k, v in spec.items()) + "}"
    return str(spec)


def arg_structure(x: Any) -> Any:
    """The container skeleton of ``x`` with every leaf replaced by ``"*"`` (for comparisons)."""
    return map_leaves(x, lambda _k, _v: "*")


def jsonable(spec: Any) -> Any:
    """An in_dims pytree for JSON (tuples become lists; dict keys strings)."""
    if type(spec) in (tuple, list):
        return [jsonable(v) for v in spec]
    if type(spec) is dict:
        return {str(k): jsonable(v) for k, v in spec.items()}
    return spec


# --- outputs --------------------------------------------------------------------------------


def _top(out: Any) -> Any:
    """The outputs as a sequence: a single value (tensor, dict, ...) is output 0."""
    return out if isinstance(out, (tuple, list)) else (out,)


def output_leaves(out: Any) -> tuple[Any, ...]:
    """Every leaf of the outputs, in pytree order (a single tensor gives a 1-tuple)."""
    if isinstance(out, torch.Tensor):  # the common cases, without pytree's flattening
        return (out,)
    if type(out) in (tuple, list):
        for o in out:
            if not isinstance(o, torch.Tensor):
                break
        else:
            return tuple(out)
    return tuple(pytree.tree_leaves(_top(out)))


def output_structure(out: Any) -> pytree.TreeSpec:
    """The outputs' structure as returned (one tensor and a 1-tuple differ)."""
    return pytree.tree_structure(out)


def leaf_names(out: Any, names: Sequence[str] | None = None) -> list[str]:
    """``output 0``, ``output 1['var']``, ... for every leaf; ``names`` renames the top level."""
    paths = pytree.tree_flatten_with_path(_top(out))[0]
    result = []
    for path, _ in paths:
        if not path:  # cannot happen under _top, kept for safety
            result.append("output 0")
            continue
        k = getattr(path[0], "idx", 0)
        result.append(output_name(k, names) + pytree.keystr(path[1:]))
    return result


def output_name(k: int, names: Sequence[str] | None = None) -> str:
    """Top-level output ``k`` as messages name it: ``names[k]`` where given, else ``output k``."""
    return names[k] if names is not None and k < len(names) else f"output {k}"


def kind_count(kind: Any) -> int:
    """How many leaves outputs of ``flat_kind`` ``kind`` have."""
    return 1 if kind == "tensor" else int(kind[1])


def is_flat(out: Any) -> bool:
    """True when the outputs are one value or a flat tuple/list of non-containers."""
    return all(len(path) == 1 for path, _ in pytree.tree_flatten_with_path(_top(out))[0])


def describe_structure(spec: pytree.TreeSpec) -> str:
    """A short phrase for an output structure: ``one value``, ``a tuple of 2``, ``(*, {'m': *})``."""
    skeleton = pytree.tree_unflatten(["*"] * spec.num_leaves, spec)
    if not isinstance(skeleton, (tuple, list, dict)):
        return "one tensor"
    if not isinstance(skeleton, dict) and all(v == "*" for v in skeleton):
        return f"a {type(skeleton).__name__} of {len(skeleton)}"
    return _shape_of(skeleton)


def _shape_of(out: Any) -> str:
    if isinstance(out, tuple):
        inner = ", ".join(_shape_of(o) for o in out)
        return f"({inner}{',' if len(out) == 1 else ''})"
    if isinstance(out, list):
        return "[" + ", ".join(_shape_of(o) for o in out) + "]"
    if isinstance(out, dict):
        return "{" + ", ".join(f"{k!r}: {_shape_of(v)}" for k, v in out.items()) + "}"
    return "*"


def spec_names(spec: pytree.TreeSpec, names: Sequence[str] | None = None) -> list[str]:
    """The leaf names of outputs with structure ``spec`` (see ``leaf_names``)."""
    skeleton = pytree.tree_unflatten([None] * spec.num_leaves, spec)
    return leaf_names(skeleton, names)


def top_level_leaves(spec: pytree.TreeSpec) -> set[int]:
    """Flat indices of the leaves that are outputs themselves, not nested in a container."""
    skeleton = pytree.tree_unflatten([None] * spec.num_leaves, spec)
    paths = pytree.tree_flatten_with_path(_top(skeleton))[0]
    return {k for k, (path, _) in enumerate(paths) if len(path) == 1}


def flat_kind(out: Any) -> Any:
    """``"tensor"`` for one tensor, ``(tuple, n)`` or ``(list, n)`` for a flat sequence of
    tensors, None for anything else (whose structure needs pytree)."""
    if isinstance(out, torch.Tensor):
        return "tensor"
    if type(out) in (tuple, list):
        for o in out:
            if not isinstance(o, torch.Tensor):
                return None
        return (type(out), len(out))
    return None


def _spec_of_kind(kind: Any) -> pytree.TreeSpec:
    if kind == "tensor":
        return output_structure(0)
    container, n = kind
    return output_structure(container([0] * n))


class FlatCall:
    """``fn`` returning the flat tuple of its output leaves; remembers the last structure seen.

    torch.func transforms and the loop references then handle plain tuples of tensors,
    whatever nesting the Function returns; ``spec`` keeps the structure (never the
    tensors) for the structure comparison and for naming leaves. A tensor or a flat tuple
    or list of them (nearly every Function) is remembered by its kind and length, and its
    pytree spec is built only when asked for.
    """

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        self._kind: Any = None
        self._spec: pytree.TreeSpec | None = None

    def __call__(self, *args: Any) -> tuple[Any, ...]:
        out = self.fn(*args)
        if isinstance(out, torch.Tensor):  # the common case, without a flat_kind call
            self._kind, self._spec = "tensor", None
            return (out,)
        kind = flat_kind(out)
        self._kind = kind
        if kind is None:
            self._spec = output_structure(out)
            return output_leaves(out)
        self._spec = None
        return (out,) if kind == "tensor" else tuple(out)

    def remembered(self) -> tuple[Any, pytree.TreeSpec | None]:
        """The structure the last call returned, to ``remember`` for a call reused later."""
        return self._kind, self._spec

    def remember(self, state: tuple[Any, pytree.TreeSpec | None]) -> None:
        """Take the structure of a call made earlier (a reused output) as the last seen."""
        self._kind, self._spec = state

    @property
    def spec(self) -> pytree.TreeSpec | None:
        if self._spec is None and self._kind is not None:
            self._spec = _spec_of_kind(self._kind)
        return self._spec

    def same_structure(self, other: FlatCall) -> bool:
        """Both calls returned the same structure (True while either has not been called)."""
        if self._kind is not None and other._kind is not None:
            return bool(self._kind == other._kind)
        mine, theirs = self.spec, other.spec
        return mine is None or theirs is None or mine == theirs

    def names(self, names: Sequence[str] | None = None) -> list[str]:
        kind = self._kind
        if kind is not None:
            return [output_name(k, names) for k in range(kind_count(kind))]
        return spec_names(self._spec, names) if self._spec is not None else []

    def top_level(self, count: int) -> set[int]:
        """Flat indices of the leaves that are outputs themselves (``top_level_leaves``);
        all ``count`` of them before any call."""
        if self._kind is not None:
            return set(range(kind_count(self._kind)))
        return top_level_leaves(self._spec) if self._spec is not None else set(range(count))
