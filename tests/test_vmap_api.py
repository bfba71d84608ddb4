"""The whole vmap-staticmethod API: pytree arguments, forward mode through the rule,
pairwise plans, distinct slices for every argument, numpy-safe seeds, the hazard probe.
Each planted bug is flagged by the named check and its correct twin passes."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import harness
from autograd_function_db.containers import ScaleShiftPair, pair_samples
from autograd_function_db.entry import entry
from autograd_function_db.numpy_ops import NumpyMul
from harness.core.options import Options
from harness.engine.runner import run_entries
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


# --- distinct slices for integer arguments, numpy-safe seeds ---------------------------------


def test_batched_index_without_a_seed_gets_distinct_slices():
    flagged = harness.check(pa.GatherFirstIndex, pa.gather_samples, checks=["vmap"])
    bad = [c for c in flagged.cases if c.status in BAD]
    assert bad and all("in_dims=(" in c.id for c in bad)
    assert any(",0)" in c.id or ",-1)" in c.id for c in bad)  # the index batched
    twin = harness.check(pa.Gather, pa.gather_samples, checks=["vmap", "contract"])
    assert twin.ok and twin.cases, [(c.id, c.message) for c in twin.failures()]
    assert not twin.metadata.get("slice_note")


def test_an_index_the_forward_refuses_shuffled_stays_identical_and_the_report_says_so(tmp_path):
    result = harness.check(pa.SortedGather, pa.sorted_gather_samples, checks=["vmap"])
    assert result.ok, [(c.id, c.message) for c in result.failures()]
    note = result.metadata["slice_note"]
    assert (
        "argument 1 is the same in every slice: a rule that mixes its slices would go "
        "unnoticed; give the samples a seed parameter"
    ) in note
    assert "argument 0" not in note  # floating data is varied as before
    from harness.reports.report import to_markdown

    assert "argument 1 is the same in every slice" in to_markdown(result)


def test_seeds_handed_to_samples_suit_numpy_and_arithmetic():
    seen = []

    def samples(seed):
        seen.append(seed)
        rs = np.random.RandomState(seed)  # raises for seeds >= 2**32
        torch.manual_seed(seed * 7919 + 1)  # overflowed for 63-bit seeds
        x = torch.as_tensor(rs.standard_normal(5))
        return [(x, torch.randn(5, dtype=torch.float64))]

    result = harness.check(NumpyMul, samples, checks=["vmap"])
    assert result.ok and result.cases, [(c.id, c.message) for c in result.failures()]
    assert seen and all(0 <= s < 2**31 for s in seen)
    assert len(set(seen)) > 1  # still derived per slice


# --- the hazard probe --------------------------------------------------------------------


def test_hazard_probe_catches_a_rule_that_finds_the_batch_by_size(tmp_path):
    quiet = harness.check(pa.FindsBatchBySize, pa.matrix_samples, checks=["vmap", "vmap_hazard"])
    assert quiet.ok and not [c for c in quiet.cases if c.check == "vmap_hazard"]  # off by default
    probed = harness.check(
        pa.FindsBatchBySize, pa.matrix_samples, checks=["vmap_hazard"], hazard_probe=True
    )
    ids = [c.id for c in probed.cases]
    assert ids and all(",hazard=" in i for i in ids)
    assert {i.rsplit("hazard=", 1)[1] for i in ids} == {"4", "5"}  # each sample dim size
    assert any(c.status in BAD for c in probed.cases)
    from harness.reports.report import to_markdown

    text = to_markdown(probed)
    assert "## Hazard probe" in text and "hazard=" in text
    twin = harness.check(
        pa.UsesInDims, pa.matrix_samples, checks=["vmap_hazard"], hazard_probe=True
    )
    assert twin.ok and twin.cases, [(c.id, c.message) for c in twin.failures()]


def test_hazard_probe_on_the_command_line(tmp_path, capsys):
    from harness.cli.main import main

    out = tmp_path / "r.md"
    rc = main(
        [
            "run",
            "NumpyCube",
            "ScaleShiftPair",
            "--checks",
            "vmap_hazard",
            "--hazard-probe",
            "--markdown",
            str(out),
            "-q",
        ]
    )
    assert rc == 0, capsys.readouterr()
    assert "## Hazard probe" in out.read_text()
