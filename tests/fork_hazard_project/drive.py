"""``python drive.py ARGS...``: call every Function once (the pools start, as a user's tests
start them), then ``afdb ARGS...`` in this very process (``pytest --afdb``'s situation)."""

import sys

import torch
from hazlib import ForkedSin, PooledCube

ForkedSin.apply(torch.ones(3, requires_grad=True)).sum().backward()
PooledCube.apply(torch.ones(3, requires_grad=True)).sum().backward()

from harness.cli.main import main  # noqa: E402

sys.exit(main(sys.argv[1:]))
