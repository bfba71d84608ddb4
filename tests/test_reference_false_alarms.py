"""Issue 42 part 7: false alarms of references on correct Functions, each with a planted twin.

* ``vmap_of_autograd_grad``'s float64 leg of a Function that runs only at float32 (its
  float64 copy raises): ``unsupported`` naming the raise, as the finite-difference
  references already follow the Function's own dtype; the float32 plans still check it
  (a backward that writes into grad_output fails there).
* The bracket a recorded failure gets for an argument no call differentiated names the
  inputs it does not explain: failing values of a differentiated input are not excused.
"""

from __future__ import annotations

import torch

import harness
from harness.cli.main import main
from harness.core.schema import read_report
from harness.recording import recording
from tests import float32_functions as f32


def _by_id(fn):
    result = harness.check(fn, f32.samples, checks=["vmap_of_autograd_grad", "vjp"])
    return {c.id.split("/", 1)[1]: c for c in result.cases}


def test_the_float64_leg_of_a_float32_only_function_is_unsupported_not_error():
    found = _by_id(f32.F32Only)
    wide = [c for k, c in found.items() if k.endswith(",float64")]
    assert len(wide) == 2 and all(c.status == "unsupported" for c in wide), wide
    assert "the float64 leg: the Function's forward raises on the sample cast to float64" in (
        wide[0].message
    )
    own = [c for k, c in found.items() if k.startswith("vmap_of_autograd_grad") and c not in wide]
    assert own and all(c.status == "pass" for c in own)
    assert found["vjp/s0"].status == "pass"


def test_its_planted_twin_still_fails_at_its_own_dtype():
    found = _by_id(f32.F32OnlyWrong)
    own = [c for k, c in found.items() if "vmap_of_autograd_grad" in k and "float64" not in k]
    assert own and all(c.status == "fail" for c in own), own
    assert "modified in place" in own[0].message


def test_the_bracket_names_the_differentiated_input_it_does_not_explain(tmp_path, capsys):
    out = str(tmp_path / "rec")
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(5, 7, generator=gen, dtype=torch.float64).requires_grad_()
    w = torch.randn(5, 7, generator=gen, dtype=torch.float64)
    with recording(out):
        f32.MulWrongXDropsW.apply(x, w).sum().backward()
    report = tmp_path / "r.json"
    argv = ["check", "--recorded", out, "--checks", "vjp", "-n", "0", "--json", str(report)]
    assert main(argv) == 1
    capsys.readouterr()
    failing = [c for c in read_report(str(report))["cases"] if c.get("status") == "fail"]
    assert failing
    for c in failing:
        assert c["message"].startswith(
            "[the failing values include input 0, which the recorded calls differentiate"
        ), c["message"]
        assert "argument 1 never had requires_grad" in c["message"]
