"""The per-case fast paths keep what the slow paths found (children, state, slices)."""

from __future__ import annotations

import subprocess
import sys
import threading

import torch

from autograd_function_db.entry import Sample
from harness import children
from harness.case_state import GlobalState, differences
from harness.plans import LevelPlan, Plan
from harness.slices import PlanSlices, SliceSource


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
