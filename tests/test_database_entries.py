"""The registry's entries: enough of them, hazard-free, grouped by theme, and conforming
under every vmap-family check (apart from documented torch limitations)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import autograd_function_db as afdb
from autograd_function_db import REGISTRY, THEMES
from autograd_function_db.entry import VMAP_NONE, Capabilities, Entry, Sample, entry
from autograd_function_db.hazards import DEFAULT_HAZARD_SIZES, find_hazards
from autograd_function_db.registry import structure_of, validate_entry
from harness.core.options import Options
from harness.engine.runner import run_entries
from harness.sources.database import expectations_path

VMAP_FAMILY = ("vmap", "vmap_nested", "vmap_chunked", "contract")
EXPECTATIONS = Path(str(expectations_path("afdb")))


def _expected() -> list[dict]:
    """The expectations that hold on the installed torch (their "torch" conditions)."""
    from harness import expectations as ex

    return [ex.as_dict(e) for e in ex.load(EXPECTATIONS).active]


def _matches(case_id: str, exp: dict) -> bool:
    return case_id == exp["id"] or case_id.startswith(exp["id"].rstrip("/") + "/")


def test_at_least_forty_entries_custom_ops_included():
    assert len(REGISTRY) >= 40
    assert sum(1 for e in REGISTRY if e.custom_op is not None) >= 4


def test_every_theme_contributes_and_names_are_unique():
    names = [e.name for theme in THEMES for e in theme.entries()]
    assert len(names) == len(set(names)) == len(REGISTRY)
    for theme in THEMES:
        assert theme.entries(), f"{theme.__name__} contributes no entries"


@pytest.mark.parametrize("name", REGISTRY.names())
def test_samples_hazard_free_for_every_dtype(name):
    e = REGISTRY.get(name)
    validate_entry(e, DEFAULT_HAZARD_SIZES)
    for dtype in e.dtypes:
        first, second = e.make_samples(0, dtype), e.make_samples(7, dtype)
        assert [structure_of(s) for s in first] == [structure_of(s) for s in second]
        for s in first:
            assert not find_hazards(s.args, DEFAULT_HAZARD_SIZES), (name, s.name)
            for a in s.args:
                if isinstance(a, torch.Tensor) and (a.is_floating_point() or a.is_complex()):
                    assert a.dtype == dtype, (name, s.name, a.dtype)


def test_hazardous_entry_is_refused():
    bad = entry(
        "Bad",
        REGISTRY.get("TanhGenerated").function,
        lambda seed, dtype, device: [
            Sample((torch.randn(3, 4, generator=torch.Generator().manual_seed(seed)),))
        ],
    )
    with pytest.raises(afdb.HazardousSampleError):
        validate_entry(bad)


@pytest.mark.parametrize("name", REGISTRY.names())
def test_vmap_family_conforms(name):
    e = REGISTRY.get(name)
    expected = [x for x in _expected() if x["status"] == "xfail"]
    results = run_entries([e], Options(checks=VMAP_FAMILY))
    assert results
    for r in results:
        known = [x for x in expected if _matches(r.id, x)]
        if known:
            assert r.status in ("fail", "error"), f"{r.id} is listed as xfail but gave {r.status}"
        elif r.status == "xfail":  # a torch bug the suite recognised by its signature
            assert "bug, not the Function's" in r.message and "Plain torch" in r.message, r.id
        else:
            assert r.status in ("pass", "unsupported"), f"{r.id}: {r.status}: {r.message}"


def test_afdb_expectations_name_registry_entries():
    data = json.loads(EXPECTATIONS.read_text())
    assert data["schema"] == "afdb-expectations/1"
    for x in data["expectations"]:
        assert x["status"] in ("xfail", "skip") and x["reason"].strip()
        assert x["id"].split("/")[0] in REGISTRY, x["id"]


# --- the custom-op and randomness machinery catches what it is meant to catch ---------------


def test_custom_op_without_rule_is_reported_not_passed():
    e = REGISTRY.get("CustomNoVmapTanh")
    assert e.caps.vmap == VMAP_NONE
    results = run_entries([e], Options(checks=("vmap", "contract")))
    vmap = [r for r in results if r.check == "vmap"]
    assert vmap and all(r.status == "unsupported" for r in vmap)
    assert all("fell back to a slow per-slice loop" in r.message for r in vmap)
    assert all("register_vmap" in r.message for r in results)


def _random_variant(mode_bug: str) -> Entry:
    """RandomMask with a rule broken for one randomness mode."""
    base = REGISTRY.get("RandomMask")

    class Broken(base.function):  # type: ignore[misc,valid-type]
        @staticmethod
        def vmap(info, in_dims, x, p):
            x = x.movedim(in_dims[0], 0)
            if info.randomness == "error" and mode_bug != "error":
                raise RuntimeError("refuses")
            per_slice = info.randomness == "same"
            if mode_bug == "same":
                per_slice = False  # draws per batch element under 'same'
            if mode_bug == "different":
                per_slice = True  # one shared draw under 'different'
            shape = x.shape[1:] if per_slice else x.shape
            keep = (torch.rand(shape, dtype=torch.float64) >= p).to(x.dtype)
            return (x * keep / (1 - p), keep + torch.zeros_like(x)), (0, 0)

    return Entry(
        name=f"Broken{mode_bug}",
        function=Broken,
        samples=base.samples,
        caps=Capabilities.from_function(Broken, nondiff_outputs=(1,), randomness=True),
    )


@pytest.mark.parametrize("mode", ["error", "same", "different"])
def test_randomness_check_catches_a_rule_that_ignores_the_mode(mode):
    results = run_entries([_random_variant(mode)], Options(checks=("vmap",)))
    bad = [r for r in results if r.status == "fail"]
    assert bad, [(r.id, r.status, r.message) for r in results]
    assert all(f"randomness='{mode}'" in r.message for r in bad)


def test_contract_intercepts_a_custom_op_rule():
    op_name = "afdb_test::bad_rule_double"
    if not hasattr(test_contract_intercepts_a_custom_op_rule, "op"):

        @torch.library.custom_op(op_name, mutates_args=())
        def double(x: torch.Tensor) -> torch.Tensor:
            return x * 2

        double.register_fake(lambda x: torch.empty_like(x))
        # Wrong: reports out_dim 0 whatever the input's batch dim was.
        double.register_vmap(lambda info, in_dims, x: (double(x), 0))
        test_contract_intercepts_a_custom_op_rule.op = double  # type: ignore[attr-defined]
    op = test_contract_intercepts_a_custom_op_rule.op  # type: ignore[attr-defined]
    e = Entry(
        name="BadRuleDouble",
        function=op,
        op=op,
        custom_op=op,
        samples=lambda seed, dtype, device: [
            Sample((torch.randn(4, 5, generator=torch.Generator().manual_seed(seed), dtype=dtype),))
        ],
        caps=Capabilities(vmap="rule", jvp=False),
    )
    results = run_entries([e], Options(checks=("contract",)))
    failing = [r for r in results if r.status == "fail"]
    assert failing
    assert any("afdb_test::bad_rule_double" in r.message for r in failing)
