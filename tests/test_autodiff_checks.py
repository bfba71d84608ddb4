"""The autodiff checks catch each planted bug, pass its correct twin, and pass the registry."""

from __future__ import annotations

import pytest
import torch

from autograd_function_db import REGISTRY
from autograd_function_db._sampling import Maker
from autograd_function_db.entry import Sample, entry
from harness.checks import finite_diff, first_order
from harness.checks.catalogue import LEGACY_FIX, check_names, get_check
from harness.core.options import Options
from harness.engine.runner import run_entries

from . import planted_autodiff as planted

AUTODIFF = tuple(check_names("autodiff"))


def run(e, *checks, **options):
    return run_entries([e], Options(checks=checks, **options))


def statuses(results):
    return {r.status for r in results}


def test_catalogue_registers_the_autodiff_family():
    assert AUTODIFF == (
        "jvp",
        "vjp",
        "grad_of_vmap",
        "jvp_of_vmap",
        "vmap_of_vjp",
        "vmap_of_jvp",
        "jvp_of_vjp",
        "vjp_of_vjp",
        "vmap_of_vjp_of_vjp",
        "vmap_of_jvp_of_vjp",
        "vmap_of_autograd_grad",
        "jacrev",
        "jacfwd",
    )  # the design's catalogue, in its order
    for name in AUTODIFF:
        assert get_check(name).family == "autodiff"


# --- planted bugs and their twins ------------------------------------------------------------


@pytest.mark.parametrize("name", list(planted.PAIRS))
def test_planted_bug_is_flagged(name):
    pair = planted.PAIRS[name]
    results = run(pair.bug, pair.check)
    bad = [r for r in results if r.status != "pass"]
    assert bad, f"{name}: {pair.check} passed the planted bug"
    assert {r.status for r in bad} <= set(pair.statuses), [(r.id, r.status, r.message) for r in bad]
    messages = " | ".join(r.message for r in bad)
    for word in pair.words:
        assert word in messages, f"{word!r} not in {messages[:2000]}"
    assert all(r.repro for r in bad)


@pytest.mark.parametrize("name", list(planted.PAIRS))
def test_correct_twin_passes(name):
    pair = planted.PAIRS[name]
    results = run(pair.twin, pair.check)
    assert results
    assert statuses(results) == {"pass"}, [(r.id, r.status, r.message) for r in results]


#: torch 2.13 bugs a twin runs into (case id prefix -> the plain-torch repro).
TORCH_BUGS = {
    # jvp of vmap of a generate_vmap_rule=True Function whose jvp returns None for a
    # mark_non_differentiable float output: INTERNAL ASSERT "Expected both tensor and its
    # forward grad to be floating point or complex" (autograd_meta.cpp:159); vmap of jvp of
    # the same Function works. Repro: SinAndFloor below, then
    # torch.func.jvp(torch.func.vmap(lambda a: SinAndFloor.apply(a)[0]), (x,), (t,)).
    "SinAndFloor/jvp_of_vmap/": "torch internal assert under jvp of a generated rule",
}


def test_twins_pass_every_autodiff_check_they_claim():
    twins = {p.twin.name: p.twin for p in planted.PAIRS.values() if p.twin.gradient != "custom"}
    results = run_entries(list(twins.values()), Options(checks=AUTODIFF))
    bad = [
        (r.id, r.status, r.message)
        for r in results
        if r.status not in ("pass", "unsupported")
        and not (r.status == "error" and any(r.id.startswith(k) for k in TORCH_BUGS))
    ]
    assert not bad, bad


def test_once_differentiable_hint_names_the_silent_zeros():
    pair = planted.PAIRS["once_differentiable with double backward claimed"]
    (first, *_) = [r for r in run(pair.bug, "vjp_of_vjp") if r.status == "fail"]
    assert "torch.func silently returns zeros" in first.message


def test_backward_through_numpy_is_fine_for_plain_vjp():
    bug = planted.PAIRS["backward through numpy under vmap"].bug
    assert statuses(run(bug, "vjp")) == {"pass"}


def test_save_for_forward_forgotten_passes_reverse_mode():
    bug = planted.PAIRS["save_for_forward forgotten"].bug
    assert statuses(run(bug, "vjp", "vjp_of_vjp")) == {"pass"}


def test_contiguous_only_backward_also_fails_under_vmap_of_vjp():
    bug = planted.PAIRS["backward correct only for contiguous grads"].bug
    results = run(bug, "vmap_of_vjp")
    assert statuses(results) & {"fail", "error"}


def test_identity_path_for_large_jacobians(monkeypatch):
    monkeypatch.setattr(first_order, "FULL_JACOBIAN_MAX", 0)
    pair = planted.PAIRS["backward scaled by a constant"]
    bad = [r for r in run(pair.bug, "vjp") if r.status != "pass"]
    assert bad and all(r.status == "fail" for r in bad)
    assert "identity check" in bad[0].message and "<J t, c>" in bad[0].message
    assert statuses(run(pair.twin, "vjp")) == {"pass"}


# --- gradients by design ---------------------------------------------------------------------


def test_custom_gradient_is_held_to_its_eager_backward():
    ste = entry(
        "StraightThroughRound",
        planted.StraightThroughRound,
        planted.unary,
        gradient="custom",
    )
    results = run(ste, *AUTODIFF)
    assert statuses(results) == {"pass"}, [(r.id, r.message) for r in results if r.status != "pass"]
    refs = {r.check: r.reference for r in results}
    for check in ("jvp", "vjp", "jacrev", "jacfwd"):
        assert refs[check] == "eager backward (gradient=custom)"
    assert refs["vmap_of_vjp"].startswith("loop of per-slice eager vjp")


def test_straight_through_without_custom_gradient_fails_against_fd():
    ste = entry("StraightThroughRound", planted.StraightThroughRound, planted.unary)
    results = run(ste, "vjp")
    assert statuses(results) == {"fail"}
    assert all("finite differences (float64)" in r.message for r in results)


def test_fd_reference_is_reported():
    results = run(planted.PAIRS["backward scaled by a constant"].twin, "vjp", "jvp_of_vjp")
    refs = {r.check: r.reference for r in results}
    assert refs["vjp"] == "finite differences (float64)"
    assert refs["jvp_of_vjp"] == "finite differences (float64) of the eager first-order vjp"


# --- capabilities and their absence -----------------------------------------------------------


def test_no_jvp_is_unsupported_for_forward_mode():
    e = entry("SinNoJvp", planted.SinNoJvp, planted.unary)
    results = {r.check: r for r in run(e, *AUTODIFF)}
    for check in ("jvp", "jacfwd", "vmap_of_jvp", "jvp_of_vjp"):
        assert results[check].status == "unsupported"
        assert "no jvp staticmethod" in results[check].message
    for check in ("vjp", "jacrev", "vmap_of_vjp", "grad_of_vmap", "vjp_of_vjp"):
        assert results[check].status == "pass"


def test_once_differentiable_is_unsupported_for_second_order():
    e = entry("OnceDifferentiableCube", planted.OnceDifferentiableCube, planted.unary)
    results = {r.check: r for r in run(e, "vjp", "vjp_of_vjp", "jvp_of_vjp")}
    assert results["vjp"].status == "pass"
    for check in ("vjp_of_vjp", "jvp_of_vjp"):
        assert results[check].status == "unsupported"
        assert "silently returns zeros" in results[check].message


def test_legacy_forward_is_unsupported_everywhere():
    e = entry("LegacySin", planted.LegacySin, planted.unary)
    transforms = tuple(c for c in AUTODIFF if c != "vmap_of_autograd_grad")
    results = run(e, *transforms)
    assert len(results) == len(transforms)
    for r in results:
        assert r.status == "unsupported" and r.message == LEGACY_FIX
    # eager autograd inside vmap never runs the forward under torch.func: it is checked
    batched = run(e, "vmap_of_autograd_grad")
    assert batched and {r.status for r in batched} == {"pass"}


def test_no_vmap_support_is_unsupported_for_composites():
    e = entry("SinNoVmap", planted.SinNoVmap, planted.unary)
    results = {r.check: r for r in run(e, *AUTODIFF)}
    for check in ("grad_of_vmap", "vmap_of_vjp", "vmap_of_jvp", "jacfwd"):
        assert results[check].status == "unsupported"
        assert "no vmap support" in results[check].message
    for check in ("jvp", "vjp", "jacrev", "vjp_of_vjp", "jvp_of_vjp"):
        assert results[check].status == "pass", results[check].message


class MaskedScale(torch.autograd.Function):
    """where(mask, x * scale, y): a bool tensor and a Python float are never differentiated."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x, mask, scale, y):
        return torch.where(mask, x * scale, y)

    @staticmethod
    def setup_context(ctx, inputs, output):
        _, mask, scale, _ = inputs
        ctx.save_for_backward(mask)
        ctx.save_for_forward(mask)
        ctx.scale = scale

    @staticmethod
    def backward(ctx, grad):
        (mask,) = ctx.saved_tensors
        zero = torch.zeros_like(grad)
        return torch.where(mask, grad * ctx.scale, zero), None, None, torch.where(mask, zero, grad)

    @staticmethod
    def jvp(ctx, x_t, _mask_t, _scale_t, y_t):
        (mask,) = ctx.saved_tensors
        return torch.where(mask, x_t * ctx.scale, y_t)


def masked_samples(seed, dtype, device):
    m = Maker(seed, dtype, device)
    return [
        Sample((m.randn(5), m.integers(0, 2, 5).bool(), 1.5, m.randn(5)), "1d"),
        Sample((m.randn(4, 5), m.integers(0, 2, 4, 5).bool(), -0.5, m.randn(4, 5)), "2d"),
    ]


def test_bool_and_python_arguments_are_held_fixed():
    e = entry("MaskedScale", MaskedScale, masked_samples)
    results = run(e, *AUTODIFF)
    assert statuses(results) == {"pass"}, [(r.id, r.message) for r in results if r.status != "pass"]


# --- plans, ids and determinism ---------------------------------------------------------------


def test_composite_plans_batch_primal_and_extras_together_and_alone():
    twin = planted.PAIRS["backward scaled by a constant"].twin
    ids = {r.id for r in run(twin, "vmap_of_vjp", "vmap_of_jvp")}
    assert "Sin/vmap_of_vjp/s0/in_dims=(0,),cotangents=0" in ids
    assert "Sin/vmap_of_vjp/s0/in_dims=(None,),cotangents=0" in ids
    assert "Sin/vmap_of_vjp/s0/in_dims=(0,),cotangents=None" in ids
    assert "Sin/vmap_of_jvp/s1/in_dims=(0,),tangents=-1" in ids
    assert any("|" in i for i in ids)  # one nested plan


def test_messages_are_deterministic_and_follow_the_seed():
    bug = planted.PAIRS["backward scaled by a constant"].bug
    a = [r.message for r in run(bug, "vjp", seed=1)]
    b = [r.message for r in run(bug, "vjp", seed=1)]
    c = [r.message for r in run(bug, "vjp", seed=2)]
    assert a == b and a != c


# --- finite differences ---------------------------------------------------------------------


def test_fd_directional_matches_the_analytic_jvp():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 5, generator=g, dtype=torch.float64) * 100
    y = torch.randn(5, generator=g, dtype=torch.float64)
    t = [torch.randn(4, 5, generator=g, dtype=torch.float64), None]

    def f(x, y):
        return (torch.sin(x / 50) * y, (x * y).sum())

    got = finite_diff.directional(f, [x, y], t)
    want = torch.func.jvp(lambda x: f(x, y), (x,), (t[0],))[1]
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9)


def test_fd_jacobian_and_products():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(4, generator=g, dtype=torch.float64)
    y = torch.randn(4, 5, generator=g, dtype=torch.float64)

    def f(x, y):
        return (torch.exp(x)[:, None] * y, x.pow(3))

    jac = finite_diff.jacobian(f, [x, y])
    want = torch.func.jacrev(f, argnums=(0, 1))(x, y)
    for j in range(2):
        for i in range(2):
            torch.testing.assert_close(jac[j][i], want[j][i], rtol=1e-9, atol=1e-9)
    c = [
        torch.randn(4, 5, generator=g, dtype=torch.float64),
        torch.randn(4, generator=g, dtype=torch.float64),
    ]
    vjp = finite_diff.vjp_from_jacobian(jac, c, [x.shape, y.shape])
    want_vjp = torch.func.vjp(f, x, y)[1](tuple(c))
    for a, b in zip(vjp, want_vjp):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9)
    t = [torch.ones(4, dtype=torch.float64), None]
    jt = finite_diff.jvp_from_jacobian(jac, t, [x.shape, y.shape])
    torch.testing.assert_close(jt[1], 3 * x**2, rtol=1e-9, atol=1e-9)


def test_fd_step_follows_the_forward_dtype():
    x = torch.linspace(0.5, 1.5, 5, dtype=torch.float64)
    assert finite_diff.base_step([x]) == finite_diff.BASE_STEP[torch.float64]
    assert finite_diff.base_step([x.float()]) == finite_diff.BASE_STEP[torch.float32]
    assert finite_diff.base_step([x], override=1e-2) == 1e-2
    # a forward that computes in float32 whatever it is given still gets a usable reference
    got = finite_diff.directional(lambda x: (torch.sin(x.float()),), [x], [torch.ones_like(x)])
    torch.testing.assert_close(got[0], torch.cos(x), rtol=1e-4, atol=1e-4)


# --- the registry ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("name", [e.name for e in REGISTRY])
def test_registry_passes_every_autodiff_check_it_claims(name, dtype, monkeypatch):
    """Every entry passes what it claims, except the cases the committed expectations
    file lists with a reason (torch limitations); an expectation that passes is xpass.

    At float32 this is also the test of the dtype rule (``harness.checks.tolerances``): every
    entry passes at a tenth of its derived tolerances, a margin of 10x."""
    from harness import expectations as ex
    from harness.checks import tolerances as dtype_tolerance
    from harness.sources.database import expectations_path

    if dtype == torch.float32:
        monkeypatch.setattr(dtype_tolerance, "MARGIN", 0.1)

    expected = ex.load(expectations_path("afdb"))
    e = next(e for e in REGISTRY if e.name == name)
    results = [ex.apply(expected, r) for r in run(e, *AUTODIFF, dtype=dtype)]
    bad = [
        (r.id, r.status, r.message)
        for r in results
        if r.status not in ("pass", "unsupported", "xfail", "skip")
    ]
    assert not bad, bad
    unsupported = [r for r in results if r.status == "unsupported"]
    assert all(r.message for r in unsupported)  # every unsupported case says why


# --- the per-sample view the composite checks share -------------------------------------------

#: Not jvp_of_vmap: torch's jvp of vmap of SinAndFloor (generated rule, a tangent of None
#: for the output marked non-differentiable) fails an INTERNAL ASSERT in torch 2.13
#: (``torch.func.jvp(torch.func.vmap(SinAndFloor.apply), (x,), (t,))``).
COMPOSITES = ("grad_of_vmap", "vmap_of_vjp", "vmap_of_jvp")


def test_a_protocol_violation_fails_every_composite_case_of_the_sample():
    """The eager protocol runs once per sample for the composite checks, and its verdict
    is every case's: each fails with the same message; the correct twin passes them all."""
    bug = planted._e("FloorNotMarked", planted.FloorNotMarked, nondiff_outputs=(1,))
    twin = planted._e("SinAndFloor", planted.SinAndFloor, nondiff_outputs=(1,))
    results = run(bug, *COMPOSITES)
    assert len({r.check for r in results}) == len(COMPOSITES)
    assert results and all(r.status == "fail" for r in results), [
        (r.id, r.status) for r in results if r.status != "fail"
    ]
    assert all("output 1 is declared non-differentiable" in r.message for r in results)
    assert statuses(run(twin, *COMPOSITES)) == {"pass"}


def test_the_sample_view_is_worked_out_once_per_sample_and_call(monkeypatch):
    from harness.checks import autodiff_refs

    calls: list[str] = []
    real = autodiff_refs.diff_view

    def counted(ctx):
        calls.append(ctx.case_id)
        return real(ctx)

    monkeypatch.setattr(autodiff_refs, "diff_view", counted)
    e = planted._e("SinAndFloor", planted.SinAndFloor, nondiff_outputs=(1,))
    results = run(e, "vmap_of_vjp", "grad_of_vmap")
    samples = {r.id.split("/")[2] for r in results}
    assert len(results) > 2 * len(samples)  # several cases per sample
    assert statuses(results) == {"pass"}
    assert len(calls) == len(samples), calls
