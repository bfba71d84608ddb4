"""The performance paths keep every verdict: the lazy registry, the per-sample composite
references (never for random entries), the warm-up before forking, the memoised
expectation lookups.

Nothing here is timed: each test shows the work is not repeated (or not done) and that
the results are those of the path that repeats it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from harness.checks import composites
from harness.core.options import Options
from harness.engine.runner import run_entries
from harness.sources.entries import make_entry

ROOT = Path(__file__).resolve().parent.parent


def _fresh(code: str) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


# --- the registry is built on first use --------------------------------------------------


def test_the_checks_import_no_theme_module_and_the_registry_validates_on_first_use():
    out = _fresh(
        "import json, sys\n"
        "import harness.checks.composites, harness.engine.runner\n"
        "themes = [m for m in sys.modules if m.startswith('autograd_function_db.') and\n"
        "          m.split('.')[1] in __import__('autograd_function_db').THEME_NAMES]\n"
        "import autograd_function_db as db\n"
        "n = len(db.REGISTRY)\n"
        "print(json.dumps({'themes_before': themes, 'entries': n,\n"
        "                  'linalg': 'autograd_function_db.linalg' in sys.modules}))\n"
    )
    assert out["themes_before"] == []
    assert out["entries"] > 50 and out["linalg"]


def test_a_bad_theme_entry_still_fails_when_the_registry_is_built(monkeypatch):
    import autograd_function_db as db
    from autograd_function_db import numpy_ops
    from autograd_function_db.registry import RegistryError

    good = numpy_ops.entries

    def with_a_seedless_entry():
        entries = list(good())
        e = entries[0]
        fixed = e.make_samples(0)
        return [*entries, dataclasses.replace(e, name="Seedless", samples=lambda *a: fixed)]

    monkeypatch.setattr(numpy_ops, "entries", with_a_seedless_entry)
    with pytest.raises(RegistryError, match="Seedless"):
        db._build()


# --- composite references kept per sample ------------------------------------------------


class Scale(torch.autograd.Function):
    """x * w (w a tensor): two arguments, so plans differ in which ones they batch."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x, w):
        return x * w

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)
        ctx.save_for_forward(*inputs)

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        return g * w, g * x

    @staticmethod
    def jvp(ctx, tx, tw):
        x, w = ctx.saved_tensors
        return tx * w + x * tw


def _front(t, d, size):
    return t.expand(size, *t.shape) if d is None else t.movedim(d, 0)


class DetachingRule(Scale):
    """Planted: the vmap rule computes the product with x detached, so through the rule
    nothing flows back to x or forward from its tangent (its twin, Scale, passes)."""

    generate_vmap_rule = False

    @staticmethod
    def vmap(info, in_dims, x, w):
        x, w = _front(x, in_dims[0], info.batch_size), _front(w, in_dims[1], info.batch_size)
        return DetachingRule.apply(x, w).detach() + x.detach() * w - (x * w).detach(), 0


class Cube(torch.autograd.Function):
    """x ** 3, with a backward that multiplies by Python numbers (as NumpyCube's does):
    differentiated again under a transform, torch runs those products through its Python
    references, whose first call imports torch._dynamo."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x, w):
        return x * x * x + w

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])
        ctx.save_for_forward(inputs[0])

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * 3 * x * x, g

    @staticmethod
    def jvp(ctx, tx, tw):
        (x,) = ctx.saved_tensors
        return tx * 3 * x * x + tw


def _samples(seed):
    g = torch.Generator().manual_seed(seed)
    return [
        (torch.randn(4, 5, generator=g), torch.randn(4, 5, generator=g)),
        (torch.randn(5, generator=g), torch.randn(5, generator=g)),
    ]


COMPOSITES = ("grad_of_vmap", "jvp_of_vmap", "vmap_of_vjp", "vmap_of_jvp")


def _counted_run(monkeypatch, function, *, reuse: bool, randomness: bool = False):
    calls = {"eager_vjp": 0, "eager_jvp": 0}
    for name in calls:
        real = getattr(composites, name)

        def counting(*a, _real=real, _name=name, **k):
            calls[_name] += 1
            return _real(*a, **k)

        monkeypatch.setattr(composites, name, counting)
    if not reuse:
        monkeypatch.setattr(composites, "reusing", lambda ctx: False)
    entry = make_entry(function, _samples, randomness=randomness, name=function.__name__)
    results = run_entries([entry], Options(checks=COMPOSITES, dtype=torch.float64))
    monkeypatch.undo()
    return [(r.id, r.status, r.message) for r in results], calls


def test_each_slice_reference_is_computed_once_per_sample_with_the_same_results(monkeypatch):
    kept, kept_calls = _counted_run(monkeypatch, Scale, reuse=True)
    fresh, fresh_calls = _counted_run(monkeypatch, Scale, reuse=False)
    assert kept == fresh and {s for _, s, _ in kept} == {"pass"}
    assert kept_calls["eager_vjp"] < fresh_calls["eager_vjp"] / 2
    assert kept_calls["eager_jvp"] < fresh_calls["eager_jvp"] / 2


def test_a_planted_rule_bug_is_still_caught_with_the_kept_references(monkeypatch):
    results, _ = _counted_run(monkeypatch, DetachingRule, reuse=True)
    bad = {cid.split("/")[1] for cid, s, _ in results if s in ("fail", "error")}
    assert {"grad_of_vmap", "jvp_of_vmap"} <= bad
    fresh, _ = _counted_run(monkeypatch, DetachingRule, reuse=False)
    assert results == fresh


def test_a_random_entry_keeps_no_reference_across_cases(monkeypatch):
    random_kept, random_calls = _counted_run(monkeypatch, Scale, reuse=True, randomness=True)
    _, fresh_calls = _counted_run(monkeypatch, Scale, reuse=False, randomness=True)
    assert random_calls == fresh_calls
    assert {s for _, s, _ in random_kept} == {"pass"}


# --- forked workers import nothing the parent could have -----------------------------------

FORKED = r"""
import json, sys
import torch
import harness.engine.runner as runner
from harness.core.options import Options
from harness.engine.parallel import run_parallel
from harness.sources.entries import make_entry
sys.path.insert(0, sys.argv[1])
import tests.test_perf_paths as defs
function, workers = getattr(defs, sys.argv[2]), int(sys.argv[3])
real = runner.run_case
first = []
def recording(data, case, **kw):
    if not first:
        first.append(set(sys.modules))
    r = real(data, case, **kw)
    new = sorted(set(sys.modules) - first[0])
    r.message = json.dumps({"n": len(new), "some": new[:5]})  # messages are capped
    return r
runner.run_case = recording
entry = make_entry(function, defs._samples, name=function.__name__)
checks = ("vmap", "vjp", "jvp", "grad_of_vmap", "vmap_of_jvp", "jvp_of_vjp", "vjp_of_vjp")
results = run_parallel([entry], Options(checks=checks, dtype=torch.float64), workers)
seen = [json.loads(r.message) for r in results]
new = sorted({m for x in seen for m in x["some"]})
print(json.dumps({"statuses": sorted({r.status for r in results}), "new": new,
                  "n": max(x["n"] for x in seen)}))
"""


@pytest.mark.parametrize("function,workers", [("Scale", 1), ("Cube", 2)])
def test_a_forked_worker_imports_nothing_its_cases_need(tmp_path, function, workers):
    """Cube at two workers: the import of torch._dynamo its second-order cases take (torch's
    Python references) is taken once, in the parent, not once per worker."""
    script = tmp_path / "forked.py"
    script.write_text(FORKED)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        [sys.executable, str(script), str(ROOT), function, str(workers)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["statuses"] == ["pass"]
    assert out["new"] == [] and out["n"] == 0  # sympy, jvp decompositions...: before the fork


def test_warm_up_needs_follow_the_checks():
    from harness.engine.warmup import needs

    assert needs(["vmap", "vmap_nested", "contract"]) == []
    assert needs(["vjp"]) == ["backward"]
    assert needs(["vmap_of_jvp"]) == ["backward", "forward"]
    assert needs(["compiled_vjp", "vjp_of_compiled"]) == ["backward", "compile"]
    assert needs(["compiled_jvp"]) == ["backward", "forward", "compile"]
    assert needs(["vjp_of_vjp"]) == ["backward"]  # one worker: it takes the refs' import itself
    assert needs(["vjp_of_vjp", "vmap"], workers=2) == ["backward", "refs"]


# --- expectations ------------------------------------------------------------------------


def test_status_after_is_the_status_apply_gives():
    from harness.core.results import CaseResult
    from harness.expectations import Expectation, Expectations, apply, status_after

    exps = Expectations(
        (
            Expectation("E/vmap", "xfail", "torch bug"),
            Expectation("E/vjp/s0", "skip", "slow"),
            Expectation("E/vmap/s1", "xfail", "longer wins"),
        )
    )
    for cid in ("E/vmap/s0", "E/vmap/s1/p", "E/vjp/s0", "E/jvp/s0", "F/vmap/s0"):
        for status in ("pass", "fail", "error", "unsupported", "internal"):
            entry, check = cid.split("/")[:2]
            r = CaseResult(cid, entry, check, 0, "", None, status, message="m")
            predicted = status_after(exps, r)
            assert predicted == apply(exps, dataclasses.replace(r)).status, (cid, status)
            assert r.status == status  # status_after changes nothing
        assert exps.lookup(cid) is exps.lookup(cid)
