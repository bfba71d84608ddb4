"""Planted backends for the certify tests: a subclass and a compile backend that are wrong.

``SkewedTensor`` is a wrapper subclass whose ``mul`` is off by a relative 1e-2 (every
other op is exact); ``ExactTensor`` is its correct twin. ``skewed`` is a torch.compile
backend (registered on import) whose compiled graphs add 1e-2 to every floating output;
``exact`` is its correct twin (the graph as traced).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import return_and_correct_aliasing


class ExactTensor(torch.Tensor):
    elem: torch.Tensor
    skew = 0.0

    @staticmethod
    def __new__(cls, elem: torch.Tensor) -> Any:
        out = torch.Tensor._make_wrapper_subclass(
            cls, elem.shape, strides=elem.stride(), dtype=elem.dtype, device=elem.device
        )
        out.elem = elem
        return out

    def __tensor_flatten__(self) -> tuple[list[str], Any]:
        return ["elem"], None

    @staticmethod
    def __tensor_unflatten__(inner: Any, meta: Any, size: Any, stride: Any) -> Any:
        return ExactTensor(inner["elem"])

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        plain_args, plain_kwargs = pytree.tree_map_only(cls, lambda t: t.elem, (args, kwargs))
        out = func(*plain_args, **plain_kwargs)
        if func is torch.ops.aten.mul.Tensor and cls.skew:
            out = out * (1 + cls.skew)
        wrapped = pytree.tree_map_only(torch.Tensor, cls, out)
        return return_and_correct_aliasing(func, args, kwargs, wrapped)


class SkewedTensor(ExactTensor):
    skew = 1e-2

    @staticmethod
    def __tensor_unflatten__(inner: Any, meta: Any, size: Any, stride: Any) -> Any:
        return SkewedTensor(inner["elem"])


class NotATensor:
    """For the bad-input test: a class that is not a tensor subclass."""


def _skewed(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
    def run(*args: Any) -> Any:
        out = gm(*args)
        return pytree.tree_map_only(
            torch.Tensor, lambda t: t + 1e-2 if t.is_floating_point() else t, out
        )

    return run


def _exact(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
    return gm


torch._dynamo.register_backend(name="afdb_test_skewed")(_skewed)
torch._dynamo.register_backend(name="afdb_test_exact")(_exact)
