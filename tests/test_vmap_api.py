"""The whole vmap-staticmethod API: pytree arguments, forward mode through the rule,
pairwise plans, distinct slices for every argument, numpy-safe seeds, the hazard probe.
Each planted bug is flagged by the named check and its correct twin passes."""

from __future__ import annotations

import pytest

from autograd_function_db.containers import ScaleShiftPair, pair_samples
from autograd_function_db.entry import entry
from harness.options import Options
from harness.runner import run_entries
from tests import planted_vmap_api as pa

BAD = {"fail", "error"}

# (planted Function, its correct twin, samples, check, words in a flagged message)
PLANTED = [
    (pa.TupleDimMixup, ScaleShiftPair, pair_samples, "vmap", ",(0,-1))"),
    (pa.TupleDimMixup, ScaleShiftPair, pair_samples, "vmap_nested", "vmap_nested"),
    (pa.TupleDimMixup, ScaleShiftPair, pair_samples, "vmap_chunked", "chunk=2"),
    (pa.TupleDimMixup, ScaleShiftPair, pair_samples, "grad_of_vmap", "grad_of_vmap"),
    (pa.FlattenFromJvpIgnoresStart, pa.FlattenFrom, pa.flatten_samples, "jvp_of_vmap", "jvp"),
    (pa.RowScaleViews, pa.RowScale, pa.row_samples, "grad_of_vmap", "view"),
]


def run(cls, samples, check, **kw):
    e = entry(cls.__name__, cls, samples, **kw)
    return run_entries([e], Options(checks=(check,)))


@pytest.mark.parametrize(
    "planted,twin,samples,check,words",
    PLANTED,
    ids=[f"{p.__name__}-{c}" for p, _, _, c, _ in PLANTED],
)
def test_planted_bug_is_flagged_and_twin_passes(planted, twin, samples, check, words):
    results = run(planted, samples, check)
    flagged = [r for r in results if r.status in BAD]
    assert flagged, f"{planted.__name__}: check {check} did not flag the planted bug"
    assert any(words in r.id or words in r.message for r in flagged), [
        (r.id, r.message[:200]) for r in flagged
    ][:3]
    twin_results = run(twin, samples, check)
    assert twin_results and all(r.status == "pass" for r in twin_results), [
        (r.id, r.message) for r in twin_results if r.status != "pass"
    ]
