"""Tensors inside tuple, list and dict arguments: leaves, addresses and in_dims pytrees.

``torch.func.vmap`` takes ``in_dims`` as a pytree with the structure of the
arguments (a prefix of it: ``None`` for a whole container is allowed), and the
vmap staticmethod receives ``in_dims`` with exactly the arguments' structure.
The harness batches each tensor leaf on its own, so a leaf is named by its
*address*: the argument position followed by the keys down to the leaf
(``(1, 0)`` is element 0 of the tuple that is argument 1). Only plain tuples,
lists and dicts are containers here (the pytree types ``in_dims`` supports).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch

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


def structure(x: Any) -> Any:
    """The container skeleton of ``x`` with every leaf replaced by ``"*"`` (for comparisons)."""
    return map_leaves(x, lambda _k, _v: "*")


def jsonable(spec: Any) -> Any:
    """An in_dims pytree for JSON (tuples become lists; dict keys strings)."""
    if type(spec) in (tuple, list):
        return [jsonable(v) for v in spec]
    if type(spec) is dict:
        return {str(k): jsonable(v) for k, v in spec.items()}
    return spec
