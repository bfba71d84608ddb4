"""What a call passes that a deep copy cannot take, and live values that fight back
(issues 43 and 44.1), on the Functions of ``tests.reach_functions``.

Each class of argument is recorded, checked in the recording process, and the planted bug
is found while its correct twin conforms: an operator's representation object holding an
``odict_keys`` view (kept by reference, checked unchanged by the call), a quantized-weight
subclass that is not a graph leaf (rebuilt from a copy of its data), a sparse COO matrix
passed as data (held fixed; plans that would batch it are ``unsupported``). The hostile
values (a ``__deepcopy__`` that sleeps or returns ``None`` or counts, a subclass counting
its ``__torch_function__``, an object holding a large tensor, a raising ``__getattr__``)
neither hang the session nor change what the program observes.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import harness
from harness.recording import live as live_values
from tests import reach_functions as rf

MOD = "tests.reach_functions"


def _lines(out: str) -> dict[str, str]:
    found = {}
    for line in out.splitlines():
        if line.startswith(f"  {MOD}:"):
            target, _, rest = line.strip().partition("  ")
            found[target.removeprefix(f"{MOD}:")] = rest.strip()
    return found


def _check(recorder, capsys, *extra: str) -> tuple[int, dict[str, str], str]:
    capsys.readouterr()
    status = harness.check_recorded(recorder, "-n", "0", *extra)
    out = capsys.readouterr().out
    return status, _lines(out), out


def _kept(recorder, name: str) -> list[str]:
    f = recorder.result().function(f"{MOD}:{name}")
    return [a.kept for c in f.calls for a in c.args if hasattr(a, "kept")]


def test_a_representation_object_deepcopy_refuses_is_kept_and_checked(tmp_path, capsys):
    torch.manual_seed(0)
    with harness.recording(tmp_path / "rec") as recorder:
        for F in (rf.RepMatmul, rf.BuggyRepMatmul):
            rhs = torch.randn(3, 2, dtype=torch.float64, requires_grad=True)
            diag = torch.randn(3, dtype=torch.float64, requires_grad=True)
            F.apply(rf.Representation(1.5), rhs, diag).sum().backward()
    want = (
        "copied, 1 part kept by reference (`builtins:odict_keys`) and checked unchanged by the call"
    )
    assert _kept(recorder, "RepMatmul") == [want]
    doc = json.loads((tmp_path / "rec" / "recording.json").read_text())
    assert want in json.dumps(doc)  # said per call in the recording
    status, lines, out = _check(recorder, capsys, "--checks", "vjp")
    assert status == 1, out
    assert lines["RepMatmul"].startswith("conforms ("), out
    assert lines["BuggyRepMatmul"].startswith("FAIL: "), out


def test_what_cannot_be_copied_and_changes_during_the_call_is_not_recordable(tmp_path):
    x = torch.ones(3, dtype=torch.float64, requires_grad=True)
    held = torch.zeros(2)
    with harness.recording(tmp_path / "rec") as recorder:
        out = rf.Accumulate.apply(x, rf.Frozen(2.0, held))  # changes held during the call
        rf.Scaled.apply(x, rf.Frozen(3.0, torch.zeros(2)))  # leaves it as it was
    assert torch.equal(out, 2 * x) and torch.equal(held, torch.ones(2))  # the program ran
    acc = recorder.result().function(f"{MOD}:Accumulate")
    assert acc.calls == () and acc.call_count == 1
    (skip,) = acc.skipped
    assert "`tests.reach_functions:Frozen`" in skip.reason, skip.reason
    assert "cannot be copied and a tensor held by" in skip.reason
    assert skip.reason.endswith("changed during the call") and skip.kind == "not copyable"
    assert skip.where.endswith(
        "test_what_cannot_be_copied_and_changes_during_the_call_is_not_recordable"
    )
    assert _kept(recorder, "Scaled") == [
        "copied, 1 part kept by reference (`tests.reach_functions:Frozen`) and checked "
        "unchanged by the call"
    ]


def test_a_quantized_weight_subclass_that_is_not_a_leaf_is_rebuilt(tmp_path, capsys):
    torch.manual_seed(0)
    with harness.recording(tmp_path / "rec") as recorder:
        for F in (rf.QLinear, rf.BuggyQLinear):
            w = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
            q = rf.QuantWeight.make(w, 0.1)
            assert not q.is_leaf and q.requires_grad
            F.apply(torch.randn(5, 3, dtype=torch.float64, requires_grad=True), q)
            q_seen = q
    assert _kept(recorder, "QLinear") == [
        "copied, `tests.reach_functions:QuantWeight` rebuilt from copies of its attributes"
    ]
    ((args, _, _),) = recorder.live_calls()[f"{MOD}:BuggyQLinear"].values()
    copy = args[1]
    assert type(copy) is rf.QuantWeight and copy.qscale == 0.1 and copy.requires_grad
    assert copy is not q_seen and copy.is_leaf
    assert torch.equal(copy.as_subclass(torch.Tensor), q_seen.detach().as_subclass(torch.Tensor))
    status, lines, out = _check(recorder, capsys, "--checks", "vjp")
    assert status == 1, out
    assert lines["QLinear"].startswith("conforms ("), out
    assert lines["BuggyQLinear"].startswith("FAIL: "), out


def _sparse() -> torch.Tensor:
    dense = torch.tensor([[0.0, 2.0, 0.0], [1.0, 0.0, 3.0], [5.0, 0.0, 4.0]], dtype=torch.float64)
    return dense.to_sparse()


def test_a_sparse_argument_no_call_differentiates_is_data_for_every_check(tmp_path, capsys):
    with harness.recording(tmp_path / "rec") as recorder:
        for F in (rf.SparseMatmul, rf.BuggySparseMatmul, rf.VmapSparseMatmul, rf.TorchMmSparse):
            x = torch.randn(3, 2, dtype=torch.float64, requires_grad=True)
            F.apply(_sparse(), x).sum().backward()
    report = tmp_path / "r.json"
    status, lines, out = _check(
        recorder, capsys, "--checks", "vjp,vmap,vmap_of_autograd_grad", "--json", str(report)
    )
    assert status == 1, out
    assert lines["SparseMatmul"].startswith("conforms ("), out
    assert lines["BuggySparseMatmul"].startswith("FAIL: "), out
    assert lines["VmapSparseMatmul"].startswith("conforms ("), out
    cases = {c["id"]: c for c in json.loads(report.read_text())["cases"]}
    vmap = {k: c for k, c in cases.items() if k.startswith(f"{MOD}:VmapSparseMatmul/vmap/")}
    batched = [c for k, c in vmap.items() if "in_dims=(None," not in k]
    held = [c for k, c in vmap.items() if "in_dims=(None," in k]
    assert batched and all(c["status"] == "unsupported" for c in batched)
    assert (
        "argument 0 is a sparse_coo tensor, which torch.func.vmap cannot batch"
        in (batched[0]["message"])
    )
    assert held and all(c["status"] == "pass" for c in held)  # the sparse data unbatched
    # the backward under vmap meets the sparse matrix: torch cannot batch that, said so
    assert lines["TorchMmSparse"].startswith("conforms ("), out
    ran = [c for k, c in cases.items() if f"{MOD}:SparseMatmul/vmap_of_autograd_grad" in k]
    assert ran and all(c["status"] == "pass" for c in ran)  # torch.sparse.mm batches
    grads = [c for k, c in cases.items() if f"{MOD}:TorchMmSparse/vmap_of_autograd_grad" in k]
    assert grads and all(c["status"] == "unsupported" for c in grads), [
        (c["status"], c["message"][:300]) for c in grads
    ]
    assert "the Function raised under torch.func.vmap (" in grads[0]["message"]
    assert "argument 0 is a sparse_coo tensor: torch has no batching rule" in grads[0]["message"]


def test_a_sparse_argument_that_requires_grad_is_still_named_not_checkable(tmp_path, capsys):
    with harness.recording(tmp_path / "rec") as recorder:
        rf.SparseMatmul.apply(_sparse().requires_grad_(), torch.ones(3, 2, dtype=torch.float64))
    status, lines, out = _check(recorder, capsys, "--checks", "vjp")
    assert "argument 0 is a sparse_coo tensor: recorded exactly" in lines["SparseMatmul"], out


# --- live values that fight back (issue 44.1) ------------------------------------------------


def test_a_deepcopy_that_sleeps_is_never_called_or_is_given_up(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(live_values, "SNAPSHOT_SECONDS", 0.2)
    x = torch.ones(3, dtype=torch.float64, requires_grad=True)
    with harness.recording(tmp_path / "rec") as recorder:
        recorder.snapshot_seconds = 0.2
        rf.Scaled.apply(x, rf.SlowCopy(2.0, 3600.0))  # copied without its hook
        y = rf.Scaled.apply(x, rf.SlowNew(3.0, 3600.0))  # only its hook copies it
    assert torch.equal(y, 3 * x)
    f = recorder.result().function(f"{MOD}:Scaled")
    assert f.call_count == 2 and len(f.calls) == 1
    (skip,) = f.skipped
    assert skip.reason == (
        "an argument (`tests.reach_functions:SlowNew`) was not recorded: copying it took "
        "longer than 0.2 s"
    )
    status, lines, out = _check(recorder, capsys, "--checks", "vjp")
    assert status == 0 and lines["Scaled"].startswith("conforms ("), out


def test_a_deepcopy_that_returns_none_is_not_a_snapshot(tmp_path, capsys):
    x = torch.ones(3, dtype=torch.float64, requires_grad=True)
    with harness.recording(tmp_path / "rec") as recorder:
        rf.Scaled.apply(x, rf.NoneCopy(2.0))
        rf.Scaled.apply(x, rf.NoneNew(3.0))
    kept = _kept(recorder, "Scaled")
    assert kept == [
        "copied, `tests.reach_functions:NoneCopy` rebuilt from copies of its attributes",
        "copied, 1 part kept by reference (`tests.reach_functions:NoneNew`) and checked "
        "unchanged by the call",
    ]
    live = recorder.live_calls()[f"{MOD}:Scaled"]
    assert [type(args[1]).__name__ for args, _, _ in live.values()] == ["NoneCopy", "NoneNew"]
    status, lines, out = _check(recorder, capsys, "--checks", "vjp")
    assert status == 0 and lines["Scaled"].startswith("conforms ("), out
    assert "NoneType" not in out


def test_recording_calls_no_copy_hook_and_no_torch_function_of_the_program(tmp_path):
    rf.CountingCopy.copies = 0
    x = torch.ones(3, dtype=torch.float64, requires_grad=True)

    def program() -> int:
        rf.Counted.calls = 0
        c = torch.ones(3, dtype=torch.float64).as_subclass(rf.Counted)
        rf.Counted.calls = 0
        rf.Twice.apply(c)
        return rf.Counted.calls

    plain = program()
    with harness.recording(tmp_path / "rec") as recorder:
        rf.Scaled.apply(x, rf.CountingCopy(2.0))
        observed = program()
    assert rf.CountingCopy.copies == 0
    assert observed == plain, (plain, observed)
    assert recorder.result().function(f"{MOD}:Twice").calls  # it was recorded all the same


def test_every_tensor_an_object_holds_counts_against_the_limits(tmp_path):
    x = torch.ones(3, dtype=torch.float64)
    with harness.recording(tmp_path / "rec", tensor_limit=1024, total_limit=1 << 20) as recorder:
        rf.Scaled.apply(x, rf.Holder(2.0, torch.zeros(1000)))  # 4000 bytes held
        rf.Scaled.apply(x, rf.Holder(2.0, torch.zeros(10)))
    f = recorder.result().function(f"{MOD}:Scaled")
    assert len(f.calls) == 1
    (skip,) = f.skipped
    assert "over the per-tensor limit" in skip.reason and "--tensor-limit" in skip.reason
    with harness.recording(tmp_path / "rec2", total_limit=2000) as recorder:
        rf.Scaled.apply(x, rf.Holder(2.0, torch.zeros(1000)))
    (skip,) = recorder.result().function(f"{MOD}:Scaled").skipped
    assert "--total-limit" in skip.reason


def test_an_object_whose_getattr_raises_keeps_the_call_and_its_place(tmp_path, request):
    x = torch.ones(3, dtype=torch.float64, requires_grad=True)
    with harness.recording(tmp_path / "rec") as recorder:
        rf.Scaled.apply(x, rf.RaisingGetattr(2.0))
    f = recorder.result().function(f"{MOD}:Scaled")
    assert f.skipped == () and len(f.calls) == 1
    assert f.calls[0].where == request.node.nodeid


def test_a_failing_observer_names_the_test_that_made_the_call(tmp_path, monkeypatch, request):
    def broken(*args, **kwargs):
        raise RuntimeError("the observer broke")

    monkeypatch.setattr(live_values, "snapshot", broken)
    x = torch.ones(3, dtype=torch.float64)
    with harness.recording(tmp_path / "rec") as recorder:
        assert torch.equal(rf.Scaled.apply(x, rf.Holder(2.0, x)), 2 * x)
    (skip,) = recorder.result().function(f"{MOD}:Scaled").skipped
    assert "the recorder failed on this call (RuntimeError: the observer broke)" in skip.reason
    assert skip.where == request.node.nodeid


@pytest.mark.parametrize("kind", ["leaf", "nonleaf"])
def test_non_leaf_tensors_inside_objects_are_copied_with_requires_grad(tmp_path, kind):
    w = torch.randn(3, dtype=torch.float64, requires_grad=True)
    held = w if kind == "leaf" else w * 2  # a non-leaf: deepcopy refuses it
    x = torch.ones(3, dtype=torch.float64)
    with harness.recording(tmp_path / "rec") as recorder:
        rf.Scaled.apply(x, rf.Holder(2.0, held))
    ((args, _, _),) = recorder.live_calls()[f"{MOD}:Scaled"].values()
    copy = args[1].payload
    assert copy is not held and copy.is_leaf and copy.requires_grad
    assert torch.equal(copy.detach(), held.detach())
    with torch.no_grad():
        held.zero_() if kind == "nonleaf" else w.zero_()
    assert not torch.equal(copy.detach(), held.detach())  # the snapshot kept its values


def test_the_recording_reads_back_the_way_each_value_was_kept(tmp_path):
    with harness.recording(tmp_path / "rec"):
        rf.RepMatmul.apply(
            rf.Representation(1.0), torch.ones(2, 1), torch.ones(2, requires_grad=True)
        )
    from harness.recording import load_recording

    f = load_recording(Path(tmp_path / "rec")).function(f"{MOD}:RepMatmul")
    assert "kept by reference (`builtins:odict_keys`)" in f.calls[0].args[0].kept


# --- every Function reached is accounted for (issue 43.4) --------------------------------------


def test_a_run_that_checks_nothing_says_why_per_function_and_still_writes_reports(tmp_path, capsys):
    x = torch.ones(3, dtype=torch.float64, requires_grad=True)
    with harness.recording(tmp_path / "rec", tensor_limit=64) as recorder:
        rf.Accumulate.apply(x, rf.Frozen(2.0, torch.zeros(2)))  # not copyable
        rf.Twice.apply(torch.ones(2, device="meta"))  # not data
        rf.Scaled.apply(x, rf.Holder(2.0, torch.zeros(100)))  # over --tensor-limit
    kinds = {f.target: [s.kind for s in f.skipped] for f in recorder.result().functions}
    assert kinds == {
        f"{MOD}:Accumulate": ["not copyable"],
        f"{MOD}:Twice": ["not data"],
        f"{MOD}:Scaled": ["limit"],
    }
    report, markdown = tmp_path / "r.json", tmp_path / "r.md"
    status, lines, out = _check(
        recorder, capsys, "--json", str(report), "--markdown", str(markdown)
    )
    assert status == 5, out  # nothing checked
    assert lines["Accumulate"].endswith(
        "[not copyable: give the argument's class a __deepcopy__ that returns a faithful copy, "
        "or call the Function in one test with arguments it does not change during the call]"
    ), out
    assert lines["Twice"].endswith("see docs/recording.md, What is recorded]"), out
    assert "[over a size limit: raise --afdb-tensor-limit" in lines["Scaled"], out
    recorded = json.loads(report.read_text())["metadata"]["recorded"]
    assert recorded["functions"] == 3 and recorded["not_checkable"] == {"not recordable": 3}
    assert [v["line"] for v in recorded["verdicts"]] == [
        lines[t.removeprefix(f"{MOD}:")] for t in (v["target"] for v in recorded["verdicts"])
    ]
    assert "[over a size limit: raise --afdb-tensor-limit" in markdown.read_text()


def test_a_closure_that_holds_itself_is_copied_with_its_tensors(tmp_path):
    w = torch.full((3,), 2.0, dtype=torch.float64)

    def power(v, n=1):  # recursive: its closure cell holds itself
        return v if n == 0 else power(v * w, n - 1)

    cfg = rf.Holder(2.0, torch.zeros(1))
    cfg.fn = power
    with harness.recording(tmp_path / "rec") as recorder:
        rf.Scaled.apply(torch.ones(3, dtype=torch.float64), cfg)
    ((args, _, _),) = recorder.live_calls()[f"{MOD}:Scaled"].values()
    copy = args[1].fn
    assert copy is not power and copy.__closure__[0].cell_contents is copy
    w.fill_(0.0)  # the program changes its tensor after the call: the copy kept its own
    assert torch.equal(copy(torch.ones(3, dtype=torch.float64)), torch.full((3,), 2.0).double())
