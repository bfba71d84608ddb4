"""harness.core.dynamo_shim: torch.func.vjp's backward without the torch._dynamo import.

The shim must compute what torch's ``_autograd_grad`` computes, step aside once
``torch._dynamo`` is imported, stay out where torch's function is not the one it was
written for, and never run under ``afdb certify --compile`` (whose statuses it must not
change). The fresh-process tests show the import it avoids.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch._functorch.eager_transforms as eager_transforms

from harness.core import dynamo_shim
from tests.fresh_process import fresh_json, install_for_test

ROOT = Path(__file__).resolve().parent.parent

FRESH = r"""
import json, os, sys
import torch
from harness.core import dynamo_shim
from harness.engine import warmup
installed = dynamo_shim.PATCH.install()
out, vjp_fn = torch.func.vjp(lambda t: t.sin() * t, torch.ones(3, dtype=torch.float64))
vjp_fn(torch.ones(3, dtype=torch.float64))
after_vjp = "torch._dynamo" in sys.modules
warmup.warm(["backward", "forward"])
print(json.dumps({"installed": installed, "after_vjp": after_vjp,
                  "after_warmup": "torch._dynamo" in sys.modules}))
"""


def _fresh(env_extra: dict[str, str]) -> dict[str, bool]:
    return fresh_json(FRESH, env_extra)


def test_vjp_backward_in_a_fresh_process_imports_no_dynamo_with_the_shim_and_does_without():
    on = _fresh({"AFDB_DYNAMO_SHIM": "1"})
    assert on == {"installed": True, "after_vjp": False, "after_warmup": False}
    off = _fresh({"AFDB_DYNAMO_SHIM": "0"})
    assert off["installed"] is False
    assert off["after_vjp"] is True  # torch's own path imports it: what the shim avoids


@pytest.fixture
def shim(monkeypatch):
    """The shim installed for one test, whatever the process did before; removed after."""
    install_for_test(dynamo_shim, monkeypatch)
    yield dynamo_shim
    dynamo_shim.PATCH.uninstall()


def _cases():
    """(outputs, inputs, grad_outputs, retain_graph, create_graph) as torch.func passes them."""
    x = torch.randn(3, dtype=torch.float64, requires_grad=True)
    y = torch.randn(2, 3, dtype=torch.float64, requires_grad=True)
    unused = torch.randn(4, dtype=torch.float64, requires_grad=True)
    c = torch.randn(3, dtype=torch.complex128, requires_grad=True)
    yield (
        "scalars, no cotangents",
        lambda: ([x.sin().sum(), (x * y).sum()], [x, y], None),
        False,
        True,
    )
    yield (
        "cotangents, one output without grad",
        lambda: (
            [x.exp(), torch.ones(3, dtype=torch.float64)],
            [x],
            [torch.full((3,), 2.0, dtype=torch.float64), torch.ones(3, dtype=torch.float64)],
        ),
        False,
        True,
    )
    ones = torch.ones(3, dtype=torch.float64)
    yield "an unused input", lambda: ([x.cos()], [x, unused], [ones]), False, False
    yield "nothing requires grad", lambda: ([ones.clone()], [x], [ones]), False, True
    yield (
        "complex",
        lambda: ([c * c.conj()], [c], [torch.ones(3, dtype=torch.complex128)]),
        False,
        True,
    )
    yield (
        "retain graph",
        lambda: ([x.tanh()], [x], [torch.ones(3, dtype=torch.float64)]),
        True,
        False,
    )


CASES = list(_cases())


@pytest.mark.parametrize("label,build,retain,create", CASES, ids=[c[0] for c in CASES])
def test_shim_gives_what_torchs_function_gives(shim, monkeypatch, label, build, retain, create):
    monkeypatch.setattr(dynamo_shim, "_dynamo_imported", lambda: False)  # the shim's own path
    original = dynamo_shim.PATCH.original
    assert original is not None
    with torch.enable_grad():
        outs, ins, gos = build()
        mine = dynamo_shim._autograd_grad_without_dynamo(outs, ins, gos, retain, create)
        outs, ins, gos = build()
        theirs = original(outs, ins, gos, retain, create)  # torch's own (imports dynamo)
    assert len(mine) == len(theirs), label
    for a, b in zip(mine, theirs):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
        assert a.requires_grad == b.requires_grad, label


def test_create_graph_result_differentiates_again(shim, monkeypatch):
    monkeypatch.setattr(dynamo_shim, "_dynamo_imported", lambda: False)
    x = torch.tensor([0.3, -1.2], dtype=torch.float64)
    grad_fn = torch.func.grad(lambda t: (t.sin() ** 2).sum())
    second = torch.func.jacrev(grad_fn)(x)
    expected = torch.diag(2 * torch.cos(2 * x))
    torch.testing.assert_close(second, expected)


def test_once_dynamo_is_imported_torchs_function_runs(shim, monkeypatch):
    calls = []
    original = dynamo_shim.PATCH.original

    def spy(*a):
        calls.append(a)
        return original(*a)

    dynamo_shim.PATCH.original = spy
    try:
        monkeypatch.setattr(dynamo_shim, "_dynamo_imported", lambda: True)
        _, vjp_fn = torch.func.vjp(torch.sin, torch.ones(2, dtype=torch.float64))
        vjp_fn(torch.ones(2, dtype=torch.float64))
        assert len(calls) == 1
        monkeypatch.setattr(dynamo_shim, "_dynamo_imported", lambda: False)
        vjp_fn2 = torch.func.vjp(torch.sin, torch.ones(2, dtype=torch.float64))[1]
        vjp_fn2(torch.ones(2, dtype=torch.float64))
        assert len(calls) == 1  # absent again: the shim computed it
    finally:
        dynamo_shim.PATCH.original = original


def test_forbid_puts_torchs_function_back_for_good(shim, monkeypatch):
    original = dynamo_shim.PATCH.original
    dynamo_shim.PATCH.forbid()
    assert eager_transforms._autograd_grad is original
    assert not dynamo_shim.PATCH.installed()
    assert dynamo_shim.PATCH.install() is False


def test_not_installed_over_a_function_it_was_not_written_for(monkeypatch):
    dynamo_shim.PATCH.uninstall()
    monkeypatch.setattr(dynamo_shim.PATCH, "off", False)

    def other(outputs, inputs, grad_outputs=None, retain_graph=False, create_graph=True, extra=1):
        raise AssertionError("not called")

    monkeypatch.setattr(eager_transforms, "_autograd_grad", other)
    assert not dynamo_shim.PATCH.compatible()
    assert dynamo_shim.PATCH.install() is False
    assert eager_transforms._autograd_grad is other


def _compile_statuses(capsys, tmp_path, name):
    from harness.cli.main import main

    statuses = {}
    for backend in ("afdb_test_exact", "afdb_test_skewed"):
        path = tmp_path / f"{name}-{backend}.json"
        argv = ["certify", "--compile", backend, "--import", "tests.planted_backends"]
        argv += ["MulGenerated", "--checks", "vmap,vjp", "-q", "--json", str(path)]
        main(argv)
        capsys.readouterr()
        cert = json.loads(path.read_text())
        statuses.update({(backend, c["id"]): c["status"] for c in cert["cases"]["cases"]})
    return statuses


def test_compile_certification_runs_torchs_backward_and_keeps_its_statuses(
    capsys, tmp_path, monkeypatch
):
    monkeypatch.setattr(dynamo_shim.PATCH, "off", True)  # as with AFDB_DYNAMO_SHIM=0
    dynamo_shim.PATCH.uninstall()
    without = _compile_statuses(capsys, tmp_path, "without")
    monkeypatch.setattr(dynamo_shim.PATCH, "off", False)
    assert dynamo_shim.PATCH.install()
    seen = []
    from harness.certify import checks as certify_checks

    real = certify_checks.run_compiled

    def spy(ctx, transform, placement):
        seen.append(eager_transforms._autograd_grad is dynamo_shim._autograd_grad_without_dynamo)
        return real(ctx, transform, placement)

    monkeypatch.setattr(certify_checks, "run_compiled", spy)
    with_shim = _compile_statuses(capsys, tmp_path, "with")
    assert with_shim == without
    assert {s for (b, _), s in with_shim.items() if b == "afdb_test_skewed"} >= {"fail"}
    assert seen and not any(seen)  # certify --compile forbade it before any compiled case
    assert dynamo_shim.PATCH.off and not dynamo_shim.PATCH.installed()
    dynamo_shim.PATCH.uninstall()
