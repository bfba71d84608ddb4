"""A Function that hangs costs one timeout per staticmethod and sample (issue 31 part 1).

Before: a backward that never returned cost two timeouts in each of the dozen checks that
call it ("two timeouts in a check and the rest is not run"). Now the watchdog names the
staticmethod that was running when the time ran out, and every later case on that sample
of a check that calls it is ``timeout`` "not run" at once; checks that never call it run.
The limits here are 1 s; a correct twin runs first in the same process, so torch's first
uses (seconds on a busy machine) do not count against them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest
import torch

from harness import check
from harness.checks.catalogue import STATICMETHODS_CALLED, check_names, staticmethods_called
from harness.engine.hangs import running_staticmethod, staticmethod_codes, staticmethod_in_dump
from harness.engine.timeouts import NOT_RUN_PREFIX, TimeoutLedger
from harness.sources.entries import make_entry
from tests import hang_functions as hf

ROOT = Path(__file__).resolve().parent.parent
PLANTED = Path(__file__).resolve().parent / "hang_functions.py"

#: The default checks that call ``backward`` (derivative mode) and those that call ``vmap``.
BACKWARD = {c for c, called in STATICMETHODS_CALLED.items() if "backward" in called}
VMAP = {c for c, called in STATICMETHODS_CALLED.items() if "vmap" in called}


def _ran_and_not_run(cases: list[dict[str, str]]) -> tuple[list[dict[str, str]], Counter[str]]:
    """The timeouts that ran, and the not-run cases per check."""
    ran = [c for c in cases if c["status"] == "timeout" and not _not_run(c)]
    not_run = Counter(c["id"].split("/")[1] for c in cases if _not_run(c))
    return ran, not_run


def _not_run(c: dict[str, str]) -> bool:
    return c["status"] == "timeout" and c["message"].startswith(NOT_RUN_PREFIX)


def _dicts(result) -> list[dict[str, str]]:
    return [{"id": c.id, "status": c.status, "message": c.message} for c in result.cases]


@pytest.fixture(scope="module")
def warm() -> None:
    """The correct twin: every case passes (and torch's first uses are paid here)."""
    r = check(hf.Correct, hf.samples, timeout_s=60)
    bad = [(c.id, c.status, c.message[:200]) for c in r.cases if c.status != "pass"]
    assert r.cases and not bad, bad


# --- the catalogue's declaration ----------------------------------------------------------


def test_every_check_declares_at_least_the_staticmethods_it_calls():
    """Each check run on a Function that records its staticmethod calls: the calls are
    within the catalogue's declaration (a call not declared would cost a second timeout),
    and the checks declared without ``vmap`` never call it (they still run after a hang
    in the vmap rule)."""
    entry = make_entry(hf.Traced, hf.samples)
    seen = {}
    for name in check_names():
        hf.CALLS.clear()
        r = check(hf.Traced, hf.samples, checks=[name], timeout_s=60)
        if not any(c.status == "pass" for c in r.cases):
            continue  # not run for this Function (the opcheck, eager and opt-in checks)
        seen[name] = set(hf.CALLS)
        declared = staticmethods_called(name, entry)
        assert set(hf.CALLS) <= declared, (name, sorted(set(hf.CALLS) - declared))
    assert len(seen) >= 18, sorted(seen)
    for name in ("jvp", "vjp", "jvp_of_vjp", "vjp_of_vjp"):
        assert "vmap" not in seen[name] and "vmap" not in staticmethods_called(name, entry)
    assert "backward" not in seen["jvp"] and "jvp" not in seen["vjp"]


def test_the_eager_checks_call_what_they_declare():
    entry = make_entry(hf.LegacyTraced, hf.samples)
    for name in ("eager_vjp", "eager_jvp", "eager_vjp_of_vjp"):
        hf.CALLS.clear()
        r = check(hf.LegacyTraced, hf.samples, checks=[name], timeout_s=60)
        assert r.cases and {c.status for c in r.cases} == {"pass"}, (name, r.cases[0].message)
        declared = staticmethods_called(name, entry)
        assert hf.CALLS and set(hf.CALLS) <= declared, (name, set(hf.CALLS) - declared)


def test_a_custom_ops_registered_functions_are_its_staticmethods():
    @torch.library.custom_op("afdb_test_hangs::twice", mutates_args=())
    def twice(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    def backward(ctx, grad):
        return grad * 2

    def setup_context(ctx, inputs, output):
        pass

    def rule(info, in_dims, x):
        return x * 2, in_dims[0]

    twice.register_autograd(backward, setup_context=setup_context)
    twice.register_vmap(rule)
    codes = staticmethod_codes(make_entry(twice, hf.samples))
    assert codes[backward.__code__] == "backward" and codes[rule.__code__] == "vmap"
    assert codes[setup_context.__code__] == "setup_context"


def test_a_custom_gradients_jvp_reference_calls_the_backward():
    custom = make_entry(hf.Traced, hf.samples, gradient="custom")
    for name in ("jvp", "jacfwd"):
        hf.CALLS.clear()
        r = check(hf.Traced, hf.samples, checks=[name], gradient="custom", timeout_s=60)
        assert r.cases and {c.status for c in r.cases} == {"pass"}
        assert "backward" in hf.CALLS and "backward" in staticmethods_called(name, custom)
    assert "backward" not in staticmethods_called("jvp", make_entry(hf.Traced, hf.samples))


def test_a_check_the_catalogue_does_not_list_may_call_everything():
    entry = make_entry(hf.Traced, hf.samples)
    assert staticmethods_called("compile_something", entry) == {
        "forward",
        "setup_context",
        "backward",
        "jvp",
        "vmap",
    }


# --- which staticmethod was running ---------------------------------------------------------


def test_the_innermost_staticmethod_on_the_first_stack_that_has_one_is_named():
    codes = staticmethod_codes(make_entry(hf.BackwardHangs, hf.samples))
    backward = hf.BackwardHangs.backward.__code__
    forward = hf.Correct.forward.__code__  # inherited from Double: the user's own base class
    assert codes[backward] == "backward" and codes[forward] == "forward"
    helper = _helper.__code__
    assert running_staticmethod([(helper,), (helper, backward, forward)], codes) == "backward"
    assert running_staticmethod([(helper,)], codes) is None
    assert running_staticmethod([(forward,), (backward,)], {}) is None
    # a forward applied from within the backward (a backward that recurses) is the backward's
    assert running_staticmethod([(helper, forward, helper, backward)], codes) == "backward"
    assert running_staticmethod([(helper, forward, helper)], codes) == "forward"
    vmap = hf.BackwardHangs.vmap.__code__
    assert running_staticmethod([(backward, vmap)], codes) == "backward"


def test_torchs_default_staticmethods_are_never_the_functions():
    class NoRules(torch.autograd.Function):
        @staticmethod
        def forward(x):
            return x * 2

        @staticmethod
        def setup_context(ctx, inputs, output):
            pass

        @staticmethod
        @torch.autograd.function.once_differentiable
        def backward(ctx, grad):
            return grad * 2

    codes = staticmethod_codes(make_entry(NoRules, hf.samples))
    assert sorted(codes.values()) == ["backward", "forward", "setup_context"]
    torch_dir = os.path.dirname(torch.__file__)
    assert not any(c.co_filename.startswith(torch_dir) for c in codes)
    # the backward's own code, under once_differentiable's wrapper
    assert NoRules.backward.__wrapped__.__code__ in codes  # type: ignore[attr-defined]


def _helper() -> None:
    pass


def test_a_killed_workers_fault_dump_names_the_staticmethod_at_its_line():
    codes = staticmethod_codes(make_entry(hf.VmapHangs, hf.samples))
    code = hf.VmapHangs.vmap.__code__
    line = max(n for _, _, n in code.co_lines() if n is not None)  # in its body
    dump = (
        "Timeout (0:00:03)!\nThread 0x1 (most recent call first):\n"
        '  File "/usr/lib/python3.11/threading.py", line 320 in wait\n'
        f'  File "{code.co_filename}", line {line} in vmap\n'
        '  File "/x/torch/autograd/function.py", line 5 in apply\n'
    )
    assert staticmethod_in_dump(dump, codes) == "vmap"
    # the same name at a line outside the rule is someone else's vmap
    elsewhere = dump.replace(f"line {line} in vmap", f"line {line + 500} in vmap")
    assert staticmethod_in_dump(elsewhere, codes) is None
    assert staticmethod_in_dump("no frames", codes) is None
    # a forward applied from within the rule (in the same thread's stack) is the rule's
    forward = hf.VmapHangs.forward.__code__
    fline = max(n for _, _, n in forward.co_lines() if n is not None)
    inner = dump.replace(
        "Thread 0x1 (most recent call first):\n",
        f'Thread 0x1 (most recent call first):\n  File "{forward.co_filename}", line {fline} '
        "in forward\n",
    )
    assert staticmethod_in_dump(inner, codes) == "vmap"
    alone = f'Thread 0x2:\n  File "{forward.co_filename}", line {fline} in forward\n'
    assert staticmethod_in_dump(alone, codes) == "forward"


def test_a_hang_noted_by_one_process_is_read_by_another(tmp_path):
    """The ledger file carries a hang from the worker that saw it to the others and to the
    controller (which skips the cases before it sends them)."""
    from harness.core.results import CaseResult

    writer, reader = TimeoutLedger(), TimeoutLedger()
    writer.attach(str(tmp_path))
    reader.attach(str(tmp_path))
    r = CaseResult("F/vjp/s1", "F", "vjp", 1, "", None, "timeout", "the case ran longer")
    writer.note(r, "backward", 20.0)
    assert reader.hung_in("F", 1) == {"backward": ("F/vjp/s1", 20.0)}
    assert reader.hung_in("F", 0) == {}
    # a case that was not run is never counted again, nor a timeout without a staticmethod
    skipped = CaseResult("F/jvp/s2", "F", "jvp", 2, "", None, "timeout", NOT_RUN_PREFIX + "x")
    writer.note(skipped, "jvp", 20.0)
    assert reader.hung_in("F", 2) == {}


# --- in this process ------------------------------------------------------------------------


def _assert_one_per_sample(cases, name: str, blocked: set[str], samples: int = 2) -> None:
    ran, not_run = _ran_and_not_run(cases)
    assert len(ran) == samples, [(c["id"], c["message"][:160]) for c in ran]
    assert {c["id"].split("/")[2] for c in ran} == {f"s{i}" for i in range(samples)}
    assert all(f"`{name}` was running when the time ran out" in c["message"] for c in ran), [
        c["message"] for c in ran
    ]
    statuses = {}
    for c in cases:
        statuses.setdefault(c["id"].split("/")[1], set()).add(c["status"])
    for check_name, seen in statuses.items():
        if check_name in blocked:
            assert seen == {"timeout"}, (check_name, seen)
        else:  # never calls it: runs, and passes
            assert seen == {"pass"}, (check_name, seen)
    assert set(not_run) and set(not_run) <= blocked
    first = next(c for c in cases if _not_run(c))
    assert f"not run: `{name}` did not return in 1 s on sample 0 (case " in first["message"]


def test_a_backward_that_never_returns_costs_one_timeout_per_sample_in_process(warm):
    r = check(hf.BackwardHangs, hf.samples, timeout_s=1)
    _assert_one_per_sample(_dicts(r), "backward", BACKWARD)


def test_a_vmap_rule_that_never_returns_blocks_only_the_cases_that_call_it(warm):
    r = check(hf.VmapHangs, hf.samples, timeout_s=1)
    cases = _dicts(r)
    _assert_one_per_sample(cases, "vmap", VMAP)
    passed = {c["id"].split("/")[1] for c in cases if c["status"] == "pass"}
    assert {"vjp", "jvp", "jvp_of_vjp", "vjp_of_vjp"} <= passed


def test_a_backward_recursing_on_autograd_engine_threads_costs_one_timeout_per_sample():
    """The real Function's hang: the case's thread waits in torch's C++ while the engine's
    own threads run the backward; the watchdog sees it there. In a fresh interpreter (the
    recursion leaves engine threads behind)."""
    checks = ["vmap", "jvp", "vjp", "grad_of_vmap", "vmap_of_vjp", "vjp_of_vjp"]
    code = textwrap.dedent(
        f"""
        import json
        from harness import check
        from tests import hang_functions as hf
        warm = check(hf.Correct, hf.samples, checks={checks!r}, timeout_s=60)
        assert {{c.status for c in warm.cases}} == {{"pass"}}
        r = check(hf.BackwardRecursesOnEngineThreads, hf.samples, checks={checks!r}, timeout_s=1)
        print(json.dumps([{{"id": c.id, "status": c.status, "message": c.message}} for c in r.cases]))
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        cwd=ROOT,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    cases = json.loads(proc.stdout.strip().splitlines()[-1])
    _assert_one_per_sample(cases, "backward", BACKWARD & set(checks))
    ran, _ = _ran_and_not_run(cases)
    assert all("engine's threads ran the Function's backward" in c["message"] for c in ran)


# --- worker processes -----------------------------------------------------------------------


def _afdb_check(tmp_path: Path, name: str, *args: str, **env: str) -> list[dict[str, str]]:
    report = tmp_path / f"{name}.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness.cli",
            "check",
            f"{PLANTED}:{name}",
            "--samples",
            f"{PLANTED}:samples",
            "--timeout",
            "1",
            "--json",
            str(report),
            *args,
        ],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT), **env),
        cwd=tmp_path,
        timeout=240,
    )
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    return json.loads(report.read_text())["cases"]


def _assert_at_most_one_per_sample_and_worker(cases, name: str, blocked: set[str]) -> None:
    """Two workers may each start a case on the same sample before either times out."""
    ran, not_run = _ran_and_not_run(cases)
    per_sample = Counter(c["id"].split("/")[2] for c in ran)
    assert set(per_sample) == {"s0", "s1"} and max(per_sample.values()) <= 2, per_sample
    assert all(f"`{name}` was running" in c["message"] for c in ran)
    assert set(not_run) <= blocked and sum(not_run.values()) >= 10, not_run
    for c in cases:
        if c["id"].split("/")[1] not in blocked:
            assert c["status"] == "pass", c


def test_a_backward_that_never_returns_in_two_forked_workers(tmp_path):
    cases = _afdb_check(tmp_path, "BackwardHangs", "-n", "2")
    _assert_at_most_one_per_sample_and_worker(cases, "backward", BACKWARD)


def test_a_backward_that_never_returns_in_xdist_workers(tmp_path):
    cases = _afdb_check(
        tmp_path,
        "BackwardHangs",
        "-n",
        "2",
        "--checks",
        "vjp,vjp_of_vjp,grad_of_vmap,vmap,jvp",
        AFDB_WORKER_ENGINE="xdist",
    )
    _assert_at_most_one_per_sample_and_worker(cases, "backward", BACKWARD)
