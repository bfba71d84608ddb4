"""A Function that runs only at float32 (as a fused kernel would): its float64 copy raises.
``F32Only`` is correct; ``F32OnlyWrong``'s backward writes into grad_output. Also, for the
hint's bracket: ``MulWrongXDropsW`` gets x's gradient wrong and returns None for w."""

import torch


class F32Only(torch.autograd.Function):
    """Runs only at float32 (as a fused kernel would): float64 overflows its constant."""

    @staticmethod
    def forward(x):
        if x.dtype != torch.float32:
            raise RuntimeError("value cannot be converted to type float without overflow")
        return torch.sin(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * torch.cos(x)


class F32OnlyWrong(F32Only):
    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g.mul_(torch.cos(x))  # writes into grad_output


def samples(seed):
    gen = torch.Generator().manual_seed(seed)
    return [(torch.randn(3, 4, generator=gen, dtype=torch.float32),)]


class MulWrongXDropsW(torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(x, w):
        return x * w

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)

    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        return 2 * grad * w, None
