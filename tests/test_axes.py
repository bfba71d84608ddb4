"""The axis catalogue: every axis covered by at least two registry entries, and the
axes x checks table data."""

from __future__ import annotations

import pytest

from autograd_function_db import REGISTRY
from autograd_function_db.axes import (
    AXES,
    AXIS_BY_NAME,
    MIN_ENTRIES,
    axes_of,
    axis_check_table,
    coverage,
    undercovered,
)
from harness.core.results import CaseResult


@pytest.mark.parametrize("axis", [a.name for a in AXES])
def test_every_axis_has_at_least_two_entries(axis):
    entries = coverage(REGISTRY)[axis]
    assert len(entries) >= MIN_ENTRIES, f"{axis}: only {entries}"


def test_no_axis_undercovered_and_names_unique():
    assert undercovered(REGISTRY) == {}
    assert len(AXIS_BY_NAME) == len(AXES)


def test_issue_axes_are_all_in_the_catalogue():
    wanted = {
        "saved:inputs", "saved:outputs", "saved:intermediates", "saved:non-tensor",
        "saved:save_for_backward", "saved:save_for_forward",
        "inputs:one-tensor", "inputs:several", "inputs:mixed-python", "inputs:default-args",
        "inputs:none-arg", "inputs:index-tensor",
        "outputs:one-tensor", "outputs:tuple", "outputs:nondiff-int", "outputs:nondiff-float",
        "outputs:input-as-is", "outputs:view",
        "ctx:mark_dirty", "ctx:mark_non_differentiable", "ctx:once_differentiable",
        "ctx:set_materialize_grads", "ctx:needs_input_grad",
        "vmap:rule", "vmap:generated", "vmap:composed", "vmap:expand-unbatched",
        "vmap:none-out-dim", "vmap:randomness",
        "op:elementwise-unary", "op:elementwise-binary-broadcast", "op:reduction",
        "op:indexing", "op:sort", "op:shape", "op:matmul", "op:linalg",
        "backend:numpy", "backend:torch",
        "dtype:float32", "dtype:float64", "dtype:complex", "custom-op",
    }  # fmt: skip
    assert wanted <= set(AXIS_BY_NAME)


def test_axes_of_an_entry():
    names = axes_of(REGISTRY.get("NumpySort"))
    assert {"op:sort", "outputs:nondiff-int", "backend:numpy", "vmap:rule"} <= set(names)
    assert "custom-op" in axes_of(REGISTRY.get("CustomNumpySin"))
    assert "dtype:complex" in axes_of(REGISTRY.get("MatMul"))


def _result(entry: str, check: str, status: str) -> CaseResult:
    return CaseResult(f"{entry}/{check}", entry, check, 0, "", None, status)


def test_axis_check_table_counts_statuses_per_check():
    results = [
        _result("NumpyMul", "vmap", "pass"),
        _result("NumpyMul", "vmap", "fail"),
        _result("MulGenerated", "contract", "unsupported"),
        _result("NumpySort", "vmap", "pass"),
    ]
    rows = {r.axis: r for r in axis_check_table(REGISTRY, results)}
    binary = rows["op:elementwise-binary-broadcast"]
    assert binary.checks["vmap"] == {"pass": 1, "fail": 1}
    assert binary.checks["contract"] == {"unsupported": 1}
    assert "NumpyMul" in binary.entries
    assert rows["op:sort"].checks == {"vmap": {"pass": 1}}
    assert rows["op:linalg"].checks == {}
    d = binary.to_dict()
    assert d["entry_count"] == len(binary.entries) and d["checks"]["vmap"]["fail"] == 1
    # dicts from a JSON report work as well as CaseResults
    as_dicts = axis_check_table(REGISTRY, [r.to_dict() for r in results])
    assert [r.to_dict() for r in as_dicts] == [r.to_dict() for r in rows.values()]
