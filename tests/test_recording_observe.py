"""The observer: what it records, what it leaves alone, and that the program runs as before."""

from __future__ import annotations

import pytest
import torch
from torch.autograd.function import Function

import harness
from harness.core.errors import UsageError
from harness.recording import load_recording, recording
from tests import recording_functions as rf

MOD = "tests.recording_functions"


class Config:
    """An argument no recording can hold."""


def _program(seed: int) -> dict[str, object]:
    """Seeded calls of every kind; what they return, their gradients (first and second
    order), the autograd graph's node names and an exception's text."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(3, 4, generator=g, dtype=torch.float64, requires_grad=True)
    w = torch.randn(3, 4, generator=g, dtype=torch.float64, requires_grad=True)
    y = rf.Scale.apply(x, 1.5) + rf.Legacy.apply(x, w) + rf.Outer.apply(x.t()).t()
    (gx,) = torch.autograd.grad(y.sum(), x, create_graph=True)
    (ggx,) = torch.autograd.grad((gx * gx).sum(), x)
    nodes = []
    fn = y.grad_fn
    while fn is not None:
        nodes.append(type(fn).__name__)
        fn = fn.next_functions[0][0] if fn.next_functions else None
    try:
        rf.Legacy.apply(x, "not a tensor")
        error = ""
    except Exception as e:
        error = f"{type(e).__name__}: {e}"
    return {"y": y.detach(), "gx": gx.detach(), "ggx": ggx, "nodes": nodes, "error": error}


def test_observing_changes_nothing_and_the_observer_is_removed(tmp_path):
    original = Function.__dict__["apply"]
    plain = _program(0)
    with recording(tmp_path / "rec") as recorder:
        observed = _program(0)
        assert Function.__dict__["apply"] is not original  # it was observing
    assert Function.__dict__["apply"] is original
    for key in ("y", "gx", "ggx"):
        assert torch.equal(plain[key], observed[key]), key
    assert plain["nodes"] == observed["nodes"] and "ScaleBackward" in str(plain["nodes"])
    assert plain["error"] == observed["error"] and plain["error"].startswith("TypeError")
    assert {f.target for f in recorder.result().functions} >= {f"{MOD}:Scale", f"{MOD}:Legacy"}


def test_the_observer_is_removed_when_the_block_raises(tmp_path):
    original = Function.__dict__["apply"]
    try:
        with recording(tmp_path / "rec"):
            rf.Scale.apply(torch.ones(2), 2.0)
            raise KeyError("the program failed")
    except KeyError:
        pass
    assert Function.__dict__["apply"] is original
    rec = load_recording(tmp_path / "rec")  # written all the same
    assert rec.function(f"{MOD}:Scale").call_count == 1


def test_arguments_are_restored_with_dtype_grad_strides_and_options(tmp_path):
    x = torch.arange(12.0).reshape(3, 4).t()  # non-contiguous
    e = torch.randn(4).expand(3, 4)  # stride 0
    table = {"b": torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)}
    with recording(tmp_path / "rec") as recorder:
        rf.Scale.apply(x.requires_grad_(), 2)
        rf.Scale.apply(e, -0.5)
        rf.Options.apply(
            torch.ones(3, dtype=torch.float64), 3, True, "add", torch.float32, None, table
        )
    with torch.no_grad():
        x.mul_(100)  # changed after the call: the recording keeps what the call saw
    scale = recorder.result().function(f"{MOD}:Scale")
    (a, k), (b, k2) = (c.args for c in scale.calls)
    assert a.stride() == (1, 4) and a.shape == (4, 3) and a.requires_grad and k == 2
    assert torch.equal(a, torch.arange(12.0).reshape(3, 4).t())
    assert b.stride() == (0, 1) and torch.equal(b, e) and not b.requires_grad and k2 == -0.5
    (call,) = recorder.result().function(f"{MOD}:Options").calls
    assert call.args[1:6] == (3, True, "add", torch.float32, None)
    assert torch.equal(call.args[6]["b"], table["b"]) and call.args[6]["b"].dtype == torch.float64
    assert not scale.legacy and scale.importable and scale.kind == "function"
    # read back from the files: the same arguments
    (la, lk), (lb, _) = (
        c.args for c in load_recording(tmp_path / "rec").function(f"{MOD}:Scale").calls
    )
    assert torch.equal(la, a) and la.stride() == a.stride() and la.requires_grad and lk == 2
    assert torch.equal(lb, b) and lb.stride() == (0, 1)


def test_distinct_calls_up_to_k_and_every_call_counted(tmp_path, request):
    with recording(tmp_path / "rec", max_calls=2) as recorder:
        rf.Scale.apply(torch.ones(3), 2.0)
        rf.Scale.apply(torch.zeros(3), 2.0)  # the same call: shapes, dtypes, values of options
        rf.Scale.apply(torch.ones(3), 3.0)  # another option value
        rf.Scale.apply(torch.ones(5), 2.0)  # over K
    scale = recorder.result().function(f"{MOD}:Scale")
    assert scale.call_count == 4
    assert [c.args[1] for c in scale.calls] == [2.0, 3.0]
    assert {c.where for c in scale.calls} == {request.node.nodeid}


def test_calls_under_a_transform_are_counted_not_recorded(tmp_path):
    with recording(tmp_path / "rec") as recorder:
        torch.func.vmap(lambda t: rf.Scale.apply(t, 2.0))(torch.ones(2, 3))
        torch.func.grad(lambda t: rf.Scale.apply(t, 2.0).sum())(torch.ones(3))
        torch.func.jvp(lambda t: rf.Scale.apply(t, 2.0), (torch.ones(3),), (torch.ones(3),))
    scale = recorder.result().function(f"{MOD}:Scale")
    assert scale.calls == () and scale.under_transform == 3 and scale.call_count == 3


def test_nested_calls_name_the_outer_staticmethod_and_are_samples_when_alone(tmp_path):
    with recording(tmp_path / "rec") as recorder:
        rf.Outer.apply(torch.ones(3, requires_grad=True)).sum().backward()
    rec = recorder.result()
    inner = rec.function(f"{MOD}:Inner")
    assert inner.call_count == 2
    assert inner.nested_in == (f"{MOD}:Outer.backward", f"{MOD}:Outer.forward")
    # no top-level call: the calls made inside Outer are its samples, saying where from
    assert [c.where.split(" (inside ")[1] for c in inner.calls] == [
        f"{MOD}:Outer.forward)",
        f"{MOD}:Outer.backward)",
    ]
    assert len(rec.function(f"{MOD}:Outer").calls) == 1
    with recording(tmp_path / "both") as recorder:  # a top-level call too: only that one
        rf.Inner.apply(torch.ones(4))
        rf.Outer.apply(torch.ones(3, requires_grad=True)).sum().backward()
    inner = recorder.result().function(f"{MOD}:Inner")
    assert [c.args[0].shape for c in inner.calls] == [(4,)] and inner.call_count == 3


def test_a_value_that_is_not_data_is_kept_live_and_described(tmp_path):
    from harness.recording.live import Live

    with recording(tmp_path / "rec") as recorder:
        for _ in range(2):
            rf.Options.apply(
                torch.ones(2), 1, False, "add", torch.float32, Config(), {"b": torch.ones(2)}
            )
    f = recorder.result().function(f"{MOD}:Options")
    assert f.call_count == 2 and f.skipped == ()
    (call,) = f.calls  # the same call twice: kept once
    live_arg = call.args[5]
    assert (live_arg.type, live_arg.name) == ("tests.test_recording_observe:Config", "")
    why = "argument 5 is a `tests.test_recording_observe.Config`: not recordable"
    assert live_arg == Live(live_arg.type, "", why, "deep copy")  # why it is not data, how kept
    (live,) = recorder.live_calls()[f"{MOD}:Options"].values()
    assert type(live[0][5]) is Config and torch.equal(live[0][6]["b"], torch.ones(2))


def test_a_value_that_cannot_be_copied_is_kept_by_reference(tmp_path):
    import threading

    with recording(tmp_path / "rec") as recorder:
        for _ in range(2):
            rf.Options.apply(
                torch.ones(2),
                1,
                False,
                "add",
                torch.float32,
                threading.Lock(),
                {"b": torch.ones(2)},
            )
    # a lock holds no tensor and no call changes it: kept by reference, and said so
    f = recorder.result().function(f"{MOD}:Options")
    assert len(f.calls) == 1 and f.call_count == 2 and f.skipped == ()
    assert f.calls[0].args[5].kept == (
        "copied, 1 part kept by reference (`_thread:lock`) and checked unchanged by the call"
    )
    (live,) = recorder.live_calls()[f"{MOD}:Options"].values()
    assert type(live[0][5]).__name__ == "lock" and live[0][6]["b"] is not None


def test_size_limits_name_the_call_and_keep_the_rest(tmp_path):
    with recording(tmp_path / "rec", tensor_limit=64, total_limit=100) as recorder:
        rf.Scale.apply(torch.ones(17), 1.0)  # 68 bytes: over the per-tensor limit
        rf.Scale.apply(torch.ones(16), 1.0)  # 64 bytes: kept
        rf.Scale.apply(torch.ones(10), 1.0)  # 40 more: over the total
        rf.Scale.apply(torch.ones(9), 1.0)  # 36 more: 100, kept
    f = recorder.result().function(f"{MOD}:Scale")
    assert [c.args[0].numel() for c in f.calls] == [16, 9]
    (per, total) = f.skipped
    assert "over the per-tensor limit" in per.reason and "--tensor-limit" in per.reason
    assert "over its total limit" in total.reason and "--total-limit" in total.reason


def test_legacy_functions_and_custom_ops_are_recorded(tmp_path):
    x = torch.ones(2, 3)
    with recording(tmp_path / "rec", ops=("afdbrec",)) as recorder:
        rf.Legacy.apply(x, x)
        rf.twice(x, 1.5)  # through the CustomOpDef
        torch.ops.afdbrec.twice(x, 2.5)  # through torch.ops
        torch.func.vmap(lambda t: rf.twice(t, 1.0))(x)
    rec = recorder.result()
    legacy = rec.function(f"{MOD}:Legacy")
    assert legacy.legacy and len(legacy.calls) == 1
    op = rec.function("torch.ops.afdbrec.twice")
    assert op.kind == "custom_op" and [c.args[1] for c in op.calls] == [1.5, 2.5]
    assert op.under_transform == 1
    with recording(tmp_path / "plain") as recorder:  # no --ops: not observed
        rf.twice(x, 1.5)
    assert recorder.result().function("torch.ops.afdbrec.twice") is None


def test_the_suites_own_calls_are_not_recorded(tmp_path):
    samples = [(torch.randn(3, dtype=torch.float64), 2.0)]
    with recording(tmp_path / "rec") as recorder:
        result = harness.check(rf.Scale, samples, checks=["vmap"])
        rf.Legacy.apply(torch.ones(2), torch.ones(2))
    assert result.conforms
    assert recorder.result().function(f"{MOD}:Scale") is None
    assert recorder.result().function(f"{MOD}:Legacy") is not None


def test_a_failing_observer_never_breaks_the_call(tmp_path, monkeypatch):
    from harness.recording import observer

    def broken(*args, **kwargs):
        raise RuntimeError("planted observer bug")

    monkeypatch.setattr(observer, "snapshot", broken)
    with recording(tmp_path / "rec") as recorder:
        y = rf.Scale.apply(torch.ones(2), 2.0)
    assert torch.equal(y, torch.full((2,), 2.0))
    (skip,) = recorder.result().function(f"{MOD}:Scale").skipped
    assert "the recorder failed on this call (RuntimeError: planted observer bug)" in skip.reason


def test_never_called_lists_the_uncalled_functions_of_the_sources(tmp_path):
    with recording(tmp_path / "rec", sources=[MOD]) as recorder:
        rf.Scale.apply(torch.ones(2), 2.0)
    never = recorder.result().never_called
    assert f"{MOD}:Legacy" in never and f"{MOD}:Scale" not in never


def _deterministic() -> None:
    g = torch.Generator().manual_seed(1)
    rf.Scale.apply(torch.randn(3, 4, generator=g).t(), 2.0)
    rf.Legacy.apply(torch.randn(5, generator=g), torch.randn(5, generator=g))
    rf.Options.apply(torch.ones(2), 1, True, "mul", torch.float64, None, {"b": torch.ones(2)})


def _files(root):
    return {p.relative_to(root): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_the_same_program_recorded_twice_gives_the_same_bytes(tmp_path):
    for name in ("a", "b"):
        with recording(tmp_path / name, program="-m demo"):
            _deterministic()
    a, b = _files(tmp_path / "a"), _files(tmp_path / "b")
    assert a == b and len(a) == 4  # recording.json and three tensor files
    text = a[next(k for k in a if k.name == "recording.json")].decode()
    assert str(tmp_path) not in text and str(torch.__file__) not in text
    # recorded again into the same folder, with fewer Functions: stale files go
    with recording(tmp_path / "a", program="-m demo"):
        rf.Scale.apply(torch.ones(2), 2.0)
    assert len(_files(tmp_path / "a")) == 2


def test_harness_recording_is_the_context_manager(tmp_path):
    with harness.recording(tmp_path / "rec") as recorder:
        rf.Scale.apply(torch.ones(2), 2.0)
    assert recorder.classes == {f"{MOD}:Scale": rf.Scale}
    assert len(recorder.result().functions) == 1


def test_compiled_code_runs_as_without_the_observer(tmp_path):
    """Under torch.compile the wrapper steps aside: dynamo traces the original apply in one
    graph (fullgraph) and the calls it traced are not recorded."""
    f = torch.compile(lambda x: rf.Inner.apply(x).sin(), backend="eager", fullgraph=True)
    x = torch.ones(3, requires_grad=True)
    expected = f(x)
    torch._dynamo.reset()
    with recording(tmp_path / "rec") as recorder:
        y = f(x)
    torch._dynamo.reset()
    assert torch.equal(y, expected)
    assert recorder.result().functions == ()


def test_a_folder_that_is_not_a_recording_is_refused_before_the_program_runs(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "code.py").write_text("x = 1\n")
    ran = []
    with (
        pytest.raises(UsageError, match="a folder that is not a recording"),
        recording(tmp_path / "src"),
    ):
        ran.append(True)
    assert not ran and sorted(p.name for p in (tmp_path / "src").iterdir()) == ["code.py"]
