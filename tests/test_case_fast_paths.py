"""The per-case fast paths keep what the slow paths found (children, state, slices)."""

from __future__ import annotations

import subprocess
import sys
import threading

import torch

from autograd_function_db.entry import Sample
from harness.engine import children
from harness.engine.case_state import GlobalState, differences
from harness.plans.batching import loop_reference
from harness.plans.plan import LevelPlan, Plan
from harness.plans.pytrees import FlatCall
from harness.plans.slices import PlanSlices, SliceSource


def test_a_child_started_by_another_thread_is_seen_by_the_one_syscall_check():
    if not children.supported():
        return
    started: list[subprocess.Popen[bytes]] = []
    t = threading.Thread(
        target=lambda: started.append(
            subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
        )
    )
    t.start()
    t.join()
    try:
        assert not children._no_child()
        assert started[0].pid in {pid for pid, _ in children.descendants()}
    finally:
        started[0].kill()
        started[0].wait()


def test_the_unchanged_state_fast_path_still_names_a_change():
    before = GlobalState.capture()
    assert differences(before, GlobalState.capture()) == []
    threads = torch.get_num_threads()
    torch.set_num_threads(threads + 1)
    try:
        assert differences(before, GlobalState.capture()) == [
            f"left the number of threads at {threads + 1} (was {threads})"
        ]
    finally:
        torch.set_num_threads(threads)


def test_call_args_are_fresh_copies_even_when_slices_are_shared_between_plans():
    def draw(seed: int) -> list[Sample]:
        g = torch.Generator().manual_seed(seed)
        return [Sample((torch.randn(3, generator=g), 2.0))]

    source = SliceSource(draw, 0, ("t",))
    a = PlanSlices.of(Plan((LevelPlan(2, (0, None)),)), source)
    b = PlanSlices.of(Plan((LevelPlan(2, (-1, None)),)), source)
    first = a.call_args((1,))
    first[0].add_(100.0)  # an in-place Function modifies its argument
    again = b.call_args((1,))
    assert again[0] is not first[0]
    assert torch.equal(again[0], source.peek((1,))[0])
    assert not torch.equal(again[0], first[0])
    assert again[1] == 2.0


def _binary_source() -> SliceSource:
    def draw(seed: int) -> list[Sample]:
        g = torch.Generator().manual_seed(seed)
        return [Sample((torch.randn(3, 4, generator=g), torch.randn(4, generator=g)))]

    return SliceSource(draw, 0, ("reuse",))


def test_plans_reading_the_same_slices_reuse_the_reference_outputs():
    """The forward's per-slice outputs are computed once per sample for every plan that
    batches the same arguments at the same levels; the stacked reference and the
    remembered output structure equal a loop that calls every slice."""
    calls: list[int] = []

    def f(x, y):
        calls.append(1)
        return {"prod": x * y, "sum": x.sum(0)}

    source = _binary_source()
    key = ("forward", f)
    first = FlatCall(f)
    plan_a = Plan((LevelPlan(2, (0, None)),))
    loop_reference(first, plan_a, source, reuse=key)
    assert len(calls) == 2
    moved = Plan((LevelPlan(2, (-1, None), out_dims=-1),))  # same slices, other positions
    reused = FlatCall(f)
    got, returned_tuple = loop_reference(reused, moved, source, reuse=key)
    assert len(calls) == 2  # nothing called again
    fresh = FlatCall(f)
    want, want_tuple = loop_reference(fresh, moved, _binary_source())
    assert len(calls) == 4
    assert returned_tuple == want_tuple
    assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))
    assert reused.same_structure(fresh) and reused.names() == fresh.names()
    both = Plan((LevelPlan(2, (0, 0)),))  # another argument batched: other slices
    loop_reference(FlatCall(f), both, source, reuse=key)
    assert len(calls) == 6
    nested = Plan((LevelPlan(2, (0, None)), LevelPlan(3, (0, None))))
    loop_reference(FlatCall(f), nested, source, reuse=key)
    assert len(calls) == 12  # a nested plan reads its own slices


def test_reference_outputs_are_not_reused_across_callables():
    calls: list[str] = []

    def f(x, y):
        calls.append("f")
        return x * y

    def g(x, y):
        calls.append("g")
        return x + y

    source = _binary_source()
    plan = Plan((LevelPlan(2, (0, None)),))
    out_f, _ = loop_reference(FlatCall(f), plan, source, reuse=("forward", f))
    out_g, _ = loop_reference(FlatCall(g), plan, source, reuse=("forward", g))
    assert calls == ["f", "f", "g", "g"]
    assert not torch.equal(out_f[0], out_g[0])
