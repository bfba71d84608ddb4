"""harness.core.grads_shim: ``torch.autograd.grad`` with ``grad_outputs`` without sympy.

The shim must give what torch's ``_make_grads`` gives (the same gradients, the same
errors), hand everything it was not written for to torch's function, step aside once
``torch.fx.experimental.symbolic_shapes`` is imported, stay out over a function of other
parameters, and never run under ``afdb certify --compile``. The fresh-process test shows
the import it avoids.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest
import torch
import torch.autograd

from harness.core import grads_shim
from tests.fresh_process import fresh_json, install_for_test

ROOT = Path(__file__).resolve().parent.parent
ABSENT = "afdb_test_symbolic_shapes_not_imported"

FRESH = r"""
import json, sys
import torch
from harness.core import shims, grads_shim
from harness.engine import warmup
shims.install()
x = torch.ones(3, dtype=torch.float64, requires_grad=True)
torch.autograd.grad(torch.sin(x), x, torch.ones(3, dtype=torch.float64))
(x * 2).backward(torch.ones(3, dtype=torch.float64))
after_grad = "sympy" in sys.modules
warmup.warm(["backward", "forward"])
torch.func.vjp(torch.sin, torch.ones(3, dtype=torch.float64))[1](torch.ones(3, dtype=torch.float64))
print(json.dumps({"installed": grads_shim.PATCH.installed(), "after_grad": after_grad,
                  "after_warmup": "sympy" in sys.modules}))
"""


def _fresh(env_extra: dict[str, str]) -> dict[str, bool]:
    return fresh_json(FRESH, env_extra)


def test_grad_with_cotangents_in_a_fresh_process_imports_no_sympy_with_the_shim():
    on = _fresh({"AFDB_GRADS_SHIM": "1"})
    assert on == {"installed": True, "after_grad": False, "after_warmup": False}
    off = _fresh({"AFDB_GRADS_SHIM": "0"})
    assert off["installed"] is False
    assert off["after_grad"] is True  # torch's own path imports it: what the shim avoids


@pytest.fixture
def shim(monkeypatch):
    """The shim installed for one test, whatever the process did before; removed after."""
    install_for_test(grads_shim, monkeypatch)
    # Its own path, as in a process that never imported symbolic_shapes (this one has).
    monkeypatch.setattr(grads_shim, "SYMBOLIC_MODULE", ABSENT)
    yield grads_shim
    grads_shim.PATCH.uninstall()


def _t(*shape, dtype=torch.float64):
    return torch.ones(*shape, dtype=dtype)


#: (label, outputs, grads, is_grads_batched): what torch.autograd.grad / backward pass.
PATTERNS = [
    ("match", lambda: ([_t(2, 3)], [_t(2, 3)]), False),
    ("two outputs", lambda: ([_t(2), _t(3, 1)], [_t(2), _t(3, 1)]), False),
    ("scalar", lambda: ([_t(())], [_t(())]), False),
    ("shape mismatch", lambda: ([_t(2, 3)], [_t(3, 2)]), False),
    ("same numel, other rank", lambda: ([_t(6)], [_t(2, 3)]), False),
    ("complex grad, real output", lambda: ([_t(2)], [_t(2, dtype=torch.complex128)]), False),
    ("None for a scalar", lambda: ([_t(()).requires_grad_()], [None]), False),
    ("None for a vector", lambda: ([_t(3).requires_grad_()], [None]), False),
    ("mixed", lambda: ([_t(2), _t(()).requires_grad_()], [_t(2), None]), False),
    ("batched", lambda: ([_t(2)], [_t(4, 2)]), True),
    ("batched mismatch", lambda: ([_t(2)], [_t(4, 3)]), True),
    ("not a tensor", lambda: ([_t(2)], [1.0]), False),
]


def _outcome(fn, build, batched):
    outputs, grads = build()
    try:
        result = fn(outputs, grads, is_grads_batched=batched)
    except (RuntimeError, TypeError) as e:
        return ("raised", type(e).__name__, str(e))
    return ("returned", [None if g is None else (tuple(g.shape), g.dtype) for g in result])


@pytest.mark.parametrize("label,build,batched", PATTERNS, ids=[p[0] for p in PATTERNS])
def test_shim_gives_what_torchs_function_gives(shim, label, build, batched):
    original = grads_shim.PATCH.original
    assert original is not None
    mine = _outcome(grads_shim._make_grads_without_sympy, build, batched)
    theirs = _outcome(original, build, batched)
    assert mine == theirs, label


@pytest.fixture
def torch_calls(shim):
    """The calls that reach torch's own ``_make_grads`` through the shim, for one test."""
    calls: list[tuple] = []
    original = grads_shim.PATCH.original
    assert original is not None

    def spy(*a, **k):
        calls.append(a)
        return original(*a, **k)

    grads_shim.PATCH.original = spy
    try:
        yield calls
    finally:
        grads_shim.PATCH.original = original


def test_only_what_torch_returns_unchanged_is_taken_without_torchs_function(torch_calls):
    taken = []
    for label, build, batched in PATTERNS:
        torch_calls.clear()
        _outcome(grads_shim._make_grads_without_sympy, build, batched)
        if not torch_calls:
            taken.append(label)
    assert taken == ["match", "two outputs", "scalar"]


def test_the_gradients_are_the_same_through_torch_autograd_grad(shim):
    x = torch.randn(3, 2, dtype=torch.float64, requires_grad=True)
    g = torch.randn(3, 2, dtype=torch.float64)
    (mine,) = torch.autograd.grad(torch.sin(x) * x, x, g, create_graph=True)
    grads_shim.PATCH.uninstall()
    (theirs,) = torch.autograd.grad(torch.sin(x) * x, x, g, create_graph=True)
    torch.testing.assert_close(mine, theirs, rtol=0, atol=0)
    assert mine.requires_grad and theirs.requires_grad
    with pytest.raises(RuntimeError, match=r"Mismatch in shape: grad_output\[0\]"):
        grads_shim.PATCH.install()
        torch.autograd.grad(torch.sin(x), x, torch.ones(2, 3, dtype=torch.float64))


def test_once_symbolic_shapes_is_imported_torchs_function_runs(torch_calls, monkeypatch):
    grads_shim._make_grads_without_sympy([_t(2)], [_t(2)], False)
    assert torch_calls == []
    monkeypatch.setitem(sys.modules, ABSENT, types.ModuleType(ABSENT))  # now imported

    grads_shim._make_grads_without_sympy([_t(2)], [_t(2)], False)
    assert len(torch_calls) == 1


def test_forbid_puts_torchs_function_back_for_good(shim):
    original = grads_shim.PATCH.original
    grads_shim.PATCH.forbid()
    assert torch.autograd._make_grads is original
    assert not grads_shim.PATCH.installed()
    assert grads_shim.PATCH.install() is False


def test_not_installed_over_a_function_it_was_not_written_for(monkeypatch):
    grads_shim.PATCH.uninstall()
    monkeypatch.setattr(grads_shim.PATCH, "off", False)

    def other(outputs, grads, is_grads_batched, extra=1):
        raise AssertionError("not called")

    monkeypatch.setattr(torch.autograd, "_make_grads", other)
    assert not grads_shim.PATCH.compatible()
    assert grads_shim.PATCH.install() is False
    assert torch.autograd._make_grads is other


def test_compile_certification_forbids_it(capsys, tmp_path, monkeypatch):
    from harness.cli.main import main
    from harness.core import dynamo_shim

    monkeypatch.setattr(grads_shim.PATCH, "off", False)
    monkeypatch.setattr(dynamo_shim.PATCH, "off", False)
    assert grads_shim.PATCH.install()
    argv = ["certify", "--compile", "afdb_test_exact", "--import", "tests.planted_backends"]
    main([*argv, "MulGenerated", "--checks", "vmap", "-q", "--json", str(tmp_path / "c.json")])
    capsys.readouterr()
    assert grads_shim.PATCH.off and not grads_shim.PATCH.installed()
    assert torch.autograd._make_grads is not grads_shim._make_grads_without_sympy
