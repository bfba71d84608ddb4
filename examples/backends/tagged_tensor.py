"""An example tensor-subclass backend for ``afdb certify --subclass``.

``TaggedTensor`` wraps one plain tensor and carries a string tag through every
operation (a stand-in for a vendor's subclass: a quantized, sharded or logging
tensor). It is a traceable wrapper subclass (``__tensor_flatten__``), so torch.func
and torch.compile can see through it. It follows the suite's wrapping convention
with a ``from_tensor`` hook; the suite unwraps results through ``__tensor_flatten__``
(its one inner tensor, ``elem``).

    afdb certify --subclass examples/backends/tagged_tensor.py:TaggedTensor

is spelled, from the repository root, as a module path:

    PYTHONPATH=examples/backends afdb certify --subclass tagged_tensor:TaggedTensor
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import return_and_correct_aliasing


class TaggedTensor(torch.Tensor):
    """A plain tensor ``elem`` with a ``tag`` that every result inherits."""

    elem: torch.Tensor
    tag: str

    @staticmethod
    def __new__(cls, elem: torch.Tensor, tag: str = "afdb") -> TaggedTensor:
        out = torch.Tensor._make_wrapper_subclass(
            cls,
            elem.shape,
            strides=elem.stride(),
            storage_offset=elem.storage_offset(),
            dtype=elem.dtype,
            layout=elem.layout,
            device=elem.device,
            requires_grad=elem.requires_grad,
        )
        out.elem = elem
        out.tag = tag
        return out

    @classmethod
    def from_tensor(cls, t: torch.Tensor) -> TaggedTensor:
        """The suite's wrapping hook: a tagged copy of ``t``."""
        return cls(t.detach().clone(), "afdb")

    def __repr__(self) -> str:  # type: ignore[override]
        return f"TaggedTensor({self.elem!r}, tag={self.tag!r})"

    def __tensor_flatten__(self) -> tuple[list[str], Any]:
        return ["elem"], self.tag

    @staticmethod
    def __tensor_unflatten__(
        inner: dict[str, torch.Tensor], tag: Any, outer_size: Any, outer_stride: Any
    ) -> TaggedTensor:
        return TaggedTensor(inner["elem"], tag)

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        tags = [a.tag for a in pytree.tree_leaves((args, kwargs)) if isinstance(a, TaggedTensor)]
        tag = tags[0] if tags else "afdb"
        plain_args, plain_kwargs = pytree.tree_map_only(
            TaggedTensor, lambda t: t.elem, (args, kwargs)
        )
        out = func(*plain_args, **plain_kwargs)
        wrapped = pytree.tree_map_only(torch.Tensor, lambda t: TaggedTensor(t, tag), out)
        return return_and_correct_aliasing(func, args, kwargs, wrapped)
