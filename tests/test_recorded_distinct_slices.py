"""Loop-referenced checks give every argument of a recorded call distinct valid data per
slice (issue 42 part 5): a vmap rule that drops the batch of an index argument no recorded
call differentiated fails again (equal index slices hid it); its correct twin conforms; an
argument the forward refuses perturbed stays as recorded and the verdict line says which;
the finite-difference checks still read the call as made (the base slice)."""

from __future__ import annotations

import torch

from harness.cli.main import main
from harness.core.options import Options
from harness.engine.sample_cache import EntryData
from harness.recording import load_recording, recording
from harness.sources.recorded import recorded_entries
from tests import slice_functions as sf

CHECKS = "vmap,vmap_of_vjp,grad_of_vmap,vjp"


def _check(tmp_path, capsys, program, *args) -> tuple[int, str]:
    out = str(tmp_path / "rec")
    with recording(out):
        program(*args)
    code = main(["check", "--recorded", out, "--checks", CHECKS, "-n", "0"])
    return code, capsys.readouterr().out


def _verdict(said: str, name: str) -> str:
    """The Function's verdict line (after its per-check breakdown, if any)."""
    return [
        ln for ln in said.splitlines() if ln.strip().startswith(f"tests.slice_functions:{name}  ")
    ][-1]


def test_a_rule_dropping_an_index_arguments_batch_fails(tmp_path, capsys):
    code, said = _check(tmp_path, capsys, sf.program, sf.TakeDropsIndexBatch)
    line = _verdict(said, "TakeDropsIndexBatch")
    assert code == 1 and "FAIL" in line, said


def test_its_correct_twin_conforms_with_distinct_index_slices(tmp_path, capsys):
    code, said = _check(tmp_path, capsys, sf.program, sf.Take)
    line = _verdict(said, "Take")
    assert code == 0 and "conforms (" in line, said
    assert "as recorded in every batch slice" not in line


def test_slices_vary_the_index_by_permutation_and_keep_the_base_call(tmp_path):
    out = str(tmp_path / "rec")
    with recording(out):
        sf.program(sf.Take)
    (rec,) = recorded_entries(load_recording(out))
    data = EntryData(rec.entry, Options(dtype=None))
    base = data.base_samples()[0].args
    assert torch.equal(base[1], torch.tensor([4, 0, 6, 2, 2]))  # the call as made
    others = [data.slices(0).args((i,)) for i in (1, 2, 3)]
    assert any(not torch.equal(a[1], base[1]) for a in others)
    for a in others:  # a permutation: every index still valid
        assert sorted(a[1].tolist()) == sorted(base[1].tolist())
    assert rec.entry.samples.fixed_args() == []


def test_an_argument_the_forward_refuses_perturbed_stays_as_recorded(tmp_path, capsys):
    code, said = _check(tmp_path, capsys, sf.knots_program)
    line = _verdict(said, "Ordered")
    assert code == 0 and "conforms (" in line, said
    assert "argument 1 as recorded in every batch slice (the forward refused it" in line
