"""A recorded Function that raises on a set of inputs to differentiate no recorded call used
(an ODE adjoint whose backward assumes its parameters require grad) has that sub-check named
as not checked; a raise on a set a call used, and a wrong value, still do not pass. A Function
that refuses torch.autograd.grad but not .backward() (reentrant checkpointing) is checked
through .backward(), and vmap_of_autograd_grad is unsupported for it."""

from __future__ import annotations

from harness.cli.main import main
from harness.recording import recording
from tests import recorded_use_functions as uf

CHECKS = ["--checks", "vjp,eager_vjp", "-n", "0"]


def _line(out: str, name: str) -> str:
    """The Function's verdict line (after the run's per-check lines)."""
    lines = [ln for ln in out.splitlines() if f"recorded_use_functions:{name} " in ln]
    return lines[-1]


def test_a_raise_outside_the_programs_use_is_noted_not_an_error(tmp_path, capsys):
    rec = str(tmp_path / "rec")
    with recording(rec):
        uf.call(uf.AdjointLike)  # the program always differentiates x and p together
    json_out = tmp_path / "r.json"
    assert main(["check", "--recorded", rec, *CHECKS, "--json", str(json_out)]) == 0
    assert "conforms (" in _line(capsys.readouterr().out, "AdjointLike")
    text = json_out.read_text()
    assert "input 1 alone" in text and "not checked: the Function raises when only" in text
    assert "no recorded call differentiated only these" in text


def test_the_same_raise_on_a_set_a_call_used_is_an_error(tmp_path, capsys):
    rec = str(tmp_path / "rec")
    with recording(rec):
        uf.call(uf.AdjointLike)
        # now a call differentiates p alone (its program never runs backward there)
        uf.call(uf.AdjointLike, x_grad=False, backward=False)
    assert main(["check", "--recorded", rec, *CHECKS]) == 1
    assert "FAIL: " in _line(capsys.readouterr().out, "AdjointLike")


def test_a_wrong_value_still_fails(tmp_path, capsys):
    rec = str(tmp_path / "rec")
    with recording(rec):
        uf.call(uf.AdjointLikeWrong)
    assert main(["check", "--recorded", rec, *CHECKS]) == 1
    assert "FAIL: " in _line(capsys.readouterr().out, "AdjointLikeWrong")


def test_a_function_refusing_autograd_grad_is_checked_through_backward(monkeypatch):
    import harness
    from harness.checks import references

    checks = ["eager_vjp", "vmap_of_autograd_grad"]
    good = harness.check(uf.Checkpointed, uf.checkpoint_samples, checks=checks)
    assert {c.status for c in good.cases if c.check == "eager_vjp"} == {"pass"}, [
        (c.id, c.status, c.message[:300]) for c in good.cases
    ]
    batched = [c for c in good.cases if c.check == "vmap_of_autograd_grad"]
    assert batched and all(
        c.status == "unsupported" and "refuses torch.autograd.grad" in c.message for c in batched
    )
    bad = harness.check(uf.CheckpointedWrong, uf.checkpoint_samples, checks=checks)
    assert {c.status for c in bad.cases if c.check == "eager_vjp"} == {"fail"}, [
        (c.id, c.status, c.message[:300]) for c in bad.cases
    ]
    # without the way through .backward(): torch.autograd.grad's refusal is all there is
    monkeypatch.setattr(references, "refuses_grad", lambda error: False)
    refused = harness.check(uf.Checkpointed, uf.checkpoint_samples, checks=checks)
    assert {c.status for c in refused.cases if c.check == "eager_vjp"} == {"error"}
