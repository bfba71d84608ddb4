"""Issue 34 part 7: a recorded call is checked as it was made. The base slice is the call
itself, bit for bit (complex included); other slices take the Function's other recorded
calls that stack, then distinct valid data for every argument the forward accepts perturbed
(complex in both parts; issue 42 part 5, tests/test_recorded_distinct_slices.py); the rest
stays as recorded and is named."""

from __future__ import annotations

import torch

from harness.cli.main import main
from harness.core.options import Options
from harness.engine.sample_cache import EntryData
from harness.recording import load_recording, recording
from harness.sources.declare import parse_declarations
from harness.sources.recorded import recorded_entries
from tests import data_kinds_functions as dk

TARGET = "tests.data_kinds_functions:Probe"


def _filter_program(cls) -> None:
    x = torch.randn(9, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    h = torch.tensor([0.25, 0.5, 1.0, 0.5, 0.25], dtype=torch.float64)  # symmetric
    cls.apply(x.requires_grad_(), h).sum().backward()


def test_a_backward_relying_on_the_programs_symmetric_filter_passes(tmp_path, capsys):
    out = str(tmp_path / "rec")
    with recording(out):
        _filter_program(dk.SymFilter)
    assert main(["check", "--recorded", out, "--checks", "vjp,vmap,vmap_of_vjp", "-n", "0"]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ":SymFilter " in ln)
    assert "tests.data_kinds_functions:SymFilter  conforms (" in line
    # the filter varies in the loop-referenced slices (the loop runs the same backward); the
    # finite-difference-referenced vjp reads the call as made, symmetric filter included
    assert "as recorded in every batch slice" not in line


def test_its_wrong_twin_fails(tmp_path, capsys):
    out = str(tmp_path / "rec")
    with recording(out):
        _filter_program(dk.SymFilterWrong)
    assert main(["check", "--recorded", out, "--checks", "vjp,vmap,vmap_of_vjp", "-n", "0"]) == 1
    assert "tests.data_kinds_functions:SymFilterWrong  FAIL: " in capsys.readouterr().out


def _complex(seed: int, grad: bool) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    z = torch.complex(
        torch.randn(4, 3, generator=gen, dtype=torch.float64),
        torch.randn(4, 3, generator=gen, dtype=torch.float64),
    )
    return z.requires_grad_(grad)


def _entry(out: str, declare: tuple[str, ...] = ()):
    (rec,) = recorded_entries(load_recording(out), declarations=parse_declarations(declare))
    return rec.entry


def _slices(entry, sample: int = 0):
    data = EntryData(entry, Options(dtype=None))
    source = data.slices(sample)
    return data.base_samples()[sample].args, [source.args((i,)) for i in (1, 2, 3)]


def test_the_base_slice_is_the_call_bit_for_bit_and_the_other_slices_vary(tmp_path):
    out = str(tmp_path / "rec")
    z, w = _complex(0, True), _complex(1, False)
    with recording(out):
        dk.Probe.apply(z, w)
    entry = _entry(out)
    base, others = _slices(entry)
    assert torch.equal(torch.view_as_real(base[0]), torch.view_as_real(z.detach()))
    assert torch.equal(torch.view_as_real(base[1]), torch.view_as_real(w))
    for args in others:  # every argument varies (issue 42: loop references need it)
        assert (args[0].real != z.real).all() and (args[0].imag != z.imag).all()
        assert (args[1].real != w.real).all() and (args[1].imag != w.imag).all()
    assert entry.samples.fixed_args() == [] and entry.samples.notes() == []


def test_a_declared_perturbable_argument_varies(tmp_path):
    out = str(tmp_path / "rec")
    w = _complex(1, False)
    with recording(out):
        dk.Probe.apply(_complex(0, True), w)
    entry = _entry(out, (f"{TARGET} perturb-args=1",))
    _, others = _slices(entry)
    assert all((args[1].imag != w.imag).all() for args in others)
    assert entry.samples.fixed_args() == [] and entry.samples.notes() == []


def test_other_recorded_calls_that_stack_come_first(tmp_path):
    out = str(tmp_path / "rec")
    first, second = _complex(0, True), _complex(5, False)
    with recording(out):
        dk.Probe.apply(first, 1)
        dk.Probe.apply(second, 1)  # the same shapes: a slice of the first call
    entry = _entry(out)
    base, others = _slices(entry)
    assert torch.equal(torch.view_as_real(base[0]), torch.view_as_real(first.detach()))
    assert torch.equal(torch.view_as_real(others[0][0]), torch.view_as_real(second))
    assert not torch.equal(others[1][0], first.detach())  # past the other calls: noise


def test_a_reproducer_of_a_recorded_case_still_reproduces(tmp_path, capsys):
    import subprocess
    import sys

    out = str(tmp_path / "rec")
    with recording(out):
        _filter_program(dk.SymFilterWrong)
    script = tmp_path / "repro.py"
    case = "tests.data_kinds_functions:SymFilterWrong/vjp/s0"
    assert main(["repro", case, "--recorded", out, "-o", str(script)]) == 0
    capsys.readouterr()
    proc = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "REPRODUCED" in proc.stdout
