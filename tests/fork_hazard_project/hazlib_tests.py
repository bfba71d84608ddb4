import torch
from hazlib import ForkedSin, PooledCube


def test_forked_sin():
    x = torch.linspace(-1.0, 1.0, 7, dtype=torch.float64).reshape(7, 1).requires_grad_()
    ForkedSin.apply(x).sum().backward()
    assert x.grad is not None


def test_pooled_cube():
    x = torch.linspace(-1.0, 1.0, 6, dtype=torch.float64).reshape(2, 3).requires_grad_()
    PooledCube.apply(x).sum().backward()
    assert x.grad is not None
