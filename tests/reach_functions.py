"""Functions whose calls pass what a deep copy cannot take, and hostile live values.

Test data for ``tests/test_recording_reach.py`` (issue 43 and 44.1): each Function has a
planted bug (``Buggy*``) and its correct twin. The arguments are as real packages pass
them: an operator's representation object holding an ``odict_keys`` view (a GP package),
a quantized-weight tensor subclass that is not a graph leaf, a sparse COO matrix passed as
data. The hostile values fight the snapshot: a ``__deepcopy__`` that sleeps, one that
returns ``None``, one that counts, a subclass that counts its ``__torch_function__``, an
object holding a large tensor, an object whose ``__getattr__`` raises.
"""

from __future__ import annotations

import collections
import time
from typing import Any

import torch


class Representation:
    """An operator's structure, as a GP package passes it to its Functions: its class,
    its keyword names (an ``odict_keys`` view: ``copy.deepcopy`` refuses it) and a scale."""

    def __init__(self, scale: float, extra: torch.Tensor | None = None) -> None:
        self.kwargs = collections.OrderedDict(scale=scale, jitter=0.0)
        self.names = self.kwargs.keys()  # cannot be pickled: deepcopy fails
        self.scale = scale
        self.extra = extra  # a tensor the structure holds (verified unchanged)

    def operator(self, diag: torch.Tensor) -> torch.Tensor:
        out = torch.diag_embed(diag) * self.scale
        return out if self.extra is None else out + self.extra


class _RepMatmul(torch.autograd.Function):
    """``(scale * diag(d) [+ extra]) @ rhs`` with the structure as an object argument."""

    bug = False

    @staticmethod
    def forward(rep: Representation, rhs: torch.Tensor, diag: torch.Tensor) -> torch.Tensor:
        return rep.operator(diag) @ rhs

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: Any) -> None:
        rep, rhs, diag = inputs
        ctx.rep = rep
        ctx.save_for_backward(rhs, diag)

    @classmethod
    def _backward(cls, ctx: Any, grad: torch.Tensor) -> tuple:
        rhs, diag = ctx.saved_tensors
        op = ctx.rep.operator(diag)
        grad_rhs = op.mT @ grad
        grad_diag = (grad * rhs).sum(-1) * ctx.rep.scale
        if cls.bug:  # planted: drops the scale from the gradient of the diagonal
            grad_diag = (grad * rhs).sum(-1)
        return None, grad_rhs, grad_diag


class RepMatmul(_RepMatmul):
    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple:
        return RepMatmul._backward(ctx, grad)


class BuggyRepMatmul(_RepMatmul):
    bug = True

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple:
        return BuggyRepMatmul._backward(ctx, grad)


class AddExtra(torch.autograd.Function):
    """Changes, during the call, a tensor held by an object that cannot be copied."""

    @staticmethod
    def forward(rep: Representation, x: torch.Tensor) -> torch.Tensor:
        assert rep.extra is not None
        rep.extra.add_(1.0)  # the program's object changes under the call
        return x * rep.scale

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: Any) -> None:
        ctx.scale = inputs[0].scale

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple:
        return None, grad * ctx.scale


class QuantWeight(torch.Tensor):
    """A quantized-weight subclass as quantization packages make it: a view of a tensor
    computed from a trainable one (not a graph leaf), with its scale as an attribute."""

    @staticmethod
    def make(w: torch.Tensor, scale: float) -> QuantWeight:
        q = (torch.round(w / scale) * scale).as_subclass(QuantWeight)  # non-leaf
        q.qscale = scale
        return q


class _QLinear(torch.autograd.Function):
    bug = False

    @staticmethod
    def forward(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return x @ weight.as_subclass(torch.Tensor).mT

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: Any) -> None:
        x, weight = inputs
        ctx.save_for_backward(x, weight.as_subclass(torch.Tensor).detach())

    @classmethod
    def _backward(cls, ctx: Any, grad: torch.Tensor) -> tuple:
        x, w = ctx.saved_tensors
        grad_x = grad @ w
        grad_w = grad.mT @ x
        if cls.bug:  # planted: the weight's gradient forgets the last sample
            grad_w = grad[:-1].mT @ x[:-1]
        return grad_x, grad_w


class QLinear(_QLinear):
    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple:
        return QLinear._backward(ctx, grad)


class BuggyQLinear(_QLinear):
    bug = True

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple:
        return BuggyQLinear._backward(ctx, grad)


class _SparseMatmul(torch.autograd.Function):
    """``sparse @ x`` with the sparse COO matrix as data (never differentiated)."""

    bug = False

    @staticmethod
    def forward(sparse: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return torch.sparse.mm(sparse, x)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: Any) -> None:
        ctx.sparse = inputs[0]

    @classmethod
    def _backward(cls, ctx: Any, grad: torch.Tensor) -> tuple:
        sparse = ctx.sparse if cls.bug else ctx.sparse.t()  # planted: not transposed
        return None, torch.sparse.mm(sparse, grad)


class SparseMatmul(_SparseMatmul):
    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple:
        return SparseMatmul._backward(ctx, grad)


class BuggySparseMatmul(_SparseMatmul):
    bug = True

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple:
        return BuggySparseMatmul._backward(ctx, grad)


class Scaled(torch.autograd.Function):
    """``x * cfg.k``: a correct Function taking a config object (the hostile values)."""

    @staticmethod
    def forward(x: torch.Tensor, cfg: Any) -> torch.Tensor:
        return x * cfg.k

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: Any) -> None:
        ctx.k = inputs[1].k

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple:
        return grad * ctx.k, None


class SlowCopy:
    """Copying it sleeps (a hung snapshot, as the red team planted)."""

    def __init__(self, k: float, seconds: float) -> None:
        self.k, self.seconds = k, seconds

    def __deepcopy__(self, memo: dict) -> SlowCopy:
        time.sleep(self.seconds)
        return SlowCopy(self.k, self.seconds)


class NoneCopy:
    """``__deepcopy__`` returns ``None``: not a copy."""

    def __init__(self, k: float) -> None:
        self.k = k

    def __deepcopy__(self, memo: dict) -> None:
        return None


class CountingCopy:
    """Counts its copies, as a test of the program may."""

    copies = 0

    def __init__(self, k: float) -> None:
        self.k = k

    def __deepcopy__(self, memo: dict) -> CountingCopy:
        CountingCopy.copies += 1
        return CountingCopy(self.k)


class Holder:
    """An object holding a tensor (the limits count it)."""

    def __init__(self, k: float, payload: torch.Tensor) -> None:
        self.k, self.payload = k, payload


class RaisingGetattr:
    """Every attribute it does not have raises something other than AttributeError."""

    def __init__(self, k: float) -> None:
        self.k = k

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError(f"no {name} here")


class Counted(torch.Tensor):
    """A subclass that counts its ``__torch_function__`` calls."""

    calls = 0

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        Counted.calls += 1
        return super().__torch_function__(func, types, args, kwargs or {})


class Twice(torch.autograd.Function):
    """``2 x`` for any tensor (a subclass included)."""

    @staticmethod
    def forward(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: Any) -> None:
        pass

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return grad * 2


class VmapSparseMatmul(SparseMatmul):
    """``SparseMatmul`` that claims vmap support (a generated rule)."""

    generate_vmap_rule = True

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple:
        return VmapSparseMatmul._backward(ctx, grad)


class _OwnNew:
    """A class with a ``__new__`` of its own: the snapshot cannot make one without calling
    the program's code, so it uses the class's copy hooks, or keeps it by reference."""

    def __new__(cls, *args: Any) -> Any:
        return super().__new__(cls)


class SlowNew(_OwnNew):
    """Its only copy is a ``__deepcopy__`` that sleeps (the snapshot must give up)."""

    def __init__(self, k: float, seconds: float) -> None:
        self.k, self.seconds = k, seconds

    def __deepcopy__(self, memo: dict) -> SlowNew:
        time.sleep(self.seconds)
        return SlowNew(self.k, self.seconds)


class NoneNew(_OwnNew):
    """Its ``__deepcopy__`` returns ``None``: not a copy, so it is kept by reference."""

    def __init__(self, k: float) -> None:
        self.k = k

    def __deepcopy__(self, memo: dict) -> None:
        return None


class Frozen(_OwnNew):
    """Cannot be copied at all; holds a tensor (its version tells a change)."""

    def __init__(self, k: float, t: torch.Tensor) -> None:
        self.k, self.t = k, t

    def __deepcopy__(self, memo: dict) -> Frozen:
        raise TypeError("Frozen objects cannot be copied")


class Accumulate(torch.autograd.Function):
    """``x * cfg.k``, adding one to ``cfg.t`` during the call (a running counter)."""

    @staticmethod
    def forward(x: torch.Tensor, cfg: Any) -> torch.Tensor:
        cfg.t.add_(1.0)
        return x * cfg.k

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: Any) -> None:
        ctx.k = inputs[1].k

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple:
        return grad * ctx.k, None


class TorchMmSparse(torch.autograd.Function):
    """``sparse @ x`` through ``torch.mm`` (as an NUFFT package's interpolation does): under
    vmap, torch cannot batch ``torch.mm`` of a sparse matrix with a batched dense one."""

    @staticmethod
    def forward(sparse: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return torch.mm(sparse, x)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: Any) -> None:
        ctx.sparse = inputs[0]

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple:
        return None, torch.mm(ctx.sparse.t(), grad)
