"""Functions from real libraries (roma 1.8.0, pypose 0.9.5), with samples: a false-alarm trial.

Not part of the test suite (the libraries are not dependencies). To rerun it:

    .venv/bin/pip install --no-deps roma==1.8.0 pypose==0.9.5
    afdb check examples/third_party.py:RomaProcrustes --samples examples/third_party.py:procrustes_samples
    afdb check examples/third_party.py:SO3_Log --samples examples/third_party.py:so3_log_samples --gradient custom
    afdb check examples/third_party.py:SO3_Act --samples examples/third_party.py:so3_act_samples --gradient custom
    afdb check examples/third_party.py:so3_Exp --samples examples/third_party.py:so3_exp_samples --gradient custom

pypose's Lie-group Functions have tangent-space gradients (``--gradient custom``). What the
suite says of them on torch 2.13.0 is recorded in the closing note of issue 14.
"""

import pypose.lietensor.operation as po
import roma.mappings as rm
import torch


def _gen(seed):
    return torch.Generator().manual_seed(seed)


class RomaProcrustes(rm._ProcrustesManualDerivatives):
    pass


def procrustes_samples(seed):
    g = _gen(seed)
    return [(torch.randn(2, 3, 3, generator=g, dtype=torch.float64), True, 1e-5)]


def so3_log_samples(seed):
    g = _gen(seed)
    q = torch.randn(2, 4, generator=g, dtype=torch.float64)
    q = q / q.norm(dim=-1, keepdim=True)
    q[..., 3] = q[..., 3].abs() + 0.1
    return [(q / q.norm(dim=-1, keepdim=True),)]


def so3_exp_samples(seed):
    g = _gen(seed)
    return [(torch.randn(2, 3, generator=g, dtype=torch.float64) * 0.7,)]


def so3_act_samples(seed):
    g = _gen(seed)
    q = torch.randn(2, 4, generator=g, dtype=torch.float64)
    q = q / q.norm(dim=-1, keepdim=True)
    return [(q, torch.randn(2, 3, generator=g, dtype=torch.float64))]


SO3_Log = po.SO3_Log
so3_Exp = po.so3_Exp
SO3_Act = po.SO3_Act
