"""Vmap rules that build operands numpy cannot broadcast (issue 31, part 5): the failure
must name the rule's line that built each operand, not only the ``apply`` call after it."""

from __future__ import annotations

from autograd_function_db.numpy_ops import NumpyMul


class StepwiseMisalignedMul(NumpyMul):
    """Moves each batch dim to the front on its own line, never lining the ranks up."""

    @staticmethod
    def vmap(info, in_dims, x, y):
        size = info.batch_size
        x = x.movedim(in_dims[0], 0) if in_dims[0] is not None else x.expand(size, *x.shape)
        y = y.movedim(in_dims[1], 0) if in_dims[1] is not None else y.expand(size, *y.shape)
        out = StepwiseMisalignedMul.apply(x, y)
        return out, 0


class AlignedMul(NumpyMul):
    """The correct twin: both operands at the front, the lower rank padded after the batch."""

    @staticmethod
    def vmap(info, in_dims, x, y):
        size = info.batch_size
        x = x.movedim(in_dims[0], 0) if in_dims[0] is not None else x.expand(size, *x.shape)
        y = y.movedim(in_dims[1], 0) if in_dims[1] is not None else y.expand(size, *y.shape)
        rank = max(x.dim(), y.dim())
        x = x.reshape(size, *([1] * (rank - x.dim())), *x.shape[1:])
        y = y.reshape(size, *([1] * (rank - y.dim())), *y.shape[1:])
        return AlignedMul.apply(x, y), 0
