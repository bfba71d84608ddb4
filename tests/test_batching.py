"""Plans, distinct slices, nested sizes and the registry's hazard proof."""

from __future__ import annotations

import pytest
import torch

import autograd_function_db as afdb
from autograd_function_db.entry import Sample, entry
from autograd_function_db.hazards import HazardousSampleError
from autograd_function_db.numpy_ops import NumpyCube, NumpyMul, unary_samples
from autograd_function_db.registry import Registry, RegistryError
from harness.plans.batching import loop_reference
from harness.plans.plan import (
    ArgLayout,
    LevelPlan,
    Plan,
    chunked_plans,
    nested_plans,
    single_level_plans,
)
from harness.plans.slices import SliceSource, build_batched_args


def layout(*ranks, linked=()):
    return ArgLayout(tuple(ranks), linked)


def test_single_level_plans_are_exhaustive_when_small():
    plans = single_level_plans(layout(2, 1))
    in_dims = [p.levels[0].in_dims for p in plans if p.levels[0].out_dims == 0]
    # rank 2: None, 0, 1, -1; rank 1: None, 0, -1; minus all-None
    assert len(in_dims) == 4 * 3 - 1
    assert (1, None) in in_dims and (None, -1) in in_dims and (-1, 0) in in_dims
    assert (None, None) not in in_dims
    assert all(p.strategy == "exhaustive" for p in plans)
    outs = {p.levels[0].out_dims for p in plans}
    assert outs == {0, -1, "mid"}


def test_single_level_plans_cover_every_pair_above_the_cap():
    plans = single_level_plans(layout(3, 3, 3, 3, 3), cap=16, seed=1)
    in_dims = [p.levels[0].in_dims for p in plans if p.levels[0].out_dims == 0]
    assert len(set(in_dims)) == len(in_dims) < 4**5 - 1
    assert all(p.strategy == "pairwise" for p in plans)
    assert in_dims[0] == (0, 0, 0, 0, 0)
    positions = (None, 0, 2, -1)
    for a in range(5):  # every pair of (argument a at p, argument b at q) occurs
        for b in range(a + 1, 5):
            for p in positions:
                for q in positions:
                    assert any(d[a] == p and d[b] == q for d in in_dims), (a, p, b, q)
    again = single_level_plans(layout(3, 3, 3, 3, 3), cap=16, seed=1)
    assert [p.id for p in again] == [p.id for p in plans]  # deterministic from the seed
    other = single_level_plans(layout(3, 3, 3, 3, 3), cap=16, seed=2)
    assert [p.id for p in other] != [p.id for p in plans]


def test_pairwise_plans_grow_slowly_with_the_argument_count():
    counts = [len(single_level_plans(layout(*[2] * n))) for n in (3, 8)]
    assert counts[1] < 2 * counts[0]  # 4**8 combinations, yet well under 2x the plans of 3


def test_linked_arguments_are_batched_together():
    plans = single_level_plans(layout(2, 2, 2, None, linked=((1, 2),)))
    for p in plans:
        d = p.levels[0].in_dims
        assert (d[1] is None) == (d[2] is None)
        assert d[3] is None  # a Python value is never batched


def test_nested_plans_use_different_sizes_and_batch_every_level():
    plans = nested_plans(layout(1, 2), (2, 3))
    assert plans
    for p in plans:
        assert [lv.batch_size for lv in p.levels] == [2, 3]
        assert all(any(d is not None for d in lv.in_dims) for lv in p.levels)
    assert any(p.levels[0].in_dims == (0, None) and p.levels[1].in_dims == (None, 0) for p in plans)
    assert "B=2" in plans[0].id and "|" in plans[0].id


def test_chunked_plans_see_smaller_batches():
    plans = chunked_plans(layout(1), 3, 2)
    assert plans and all(p.levels[0].chunk_size == 2 and p.levels[0].batch_size == 3 for p in plans)


def test_plan_ids_are_readable():
    p = Plan((LevelPlan(2, (0, None)),))
    assert p.id == "in_dims=(0,None)"
    assert Plan((LevelPlan(2, (1,), -1),)).id == "in_dims=(1,),out_dims=-1"


def draw_from(entry_):
    return lambda seed: entry_.make_samples(seed, torch.float64)


def test_batched_slices_are_distinct_and_unbatched_args_are_shared():
    e = entry("NumpyMul", NumpyMul, afdb.numpy_ops.binary_samples)
    slices = SliceSource(draw_from(e), 2, (0, "NumpyMul"))
    plan = Plan((LevelPlan(2, (1, None)),))
    x, y = build_batched_args(plan, slices)
    assert x.shape == (4, 2, 5) and y.shape == (5,)
    assert not torch.equal(x[:, 0], x[:, 1])
    # the loop sees the same slices
    outs, tup = loop_reference(NumpyMul.apply, plan, slices)
    assert not tup
    torch.testing.assert_close(outs[0], torch.stack([x[:, i] * y for i in range(2)]))


def test_nested_build_matches_double_loop():
    e = entry("NumpyCube", NumpyCube, unary_samples)
    slices = SliceSource(draw_from(e), 1, (0, "NumpyCube"))
    plan = Plan((LevelPlan(2, (-1,)), LevelPlan(3, (0,))))
    (x,) = build_batched_args(plan, slices)
    assert x.shape == (3, 5, 2)
    for o in range(2):
        for i in range(3):
            torch.testing.assert_close(x[i, :, o], slices.args((o, i))[0])
    assert len({tuple(x[i, :, o].tolist()) for o in range(2) for i in range(3)}) == 6


def test_slice_source_returns_fresh_copies():
    e = entry("NumpyCube", NumpyCube, unary_samples)
    slices = SliceSource(draw_from(e), 1, (0, "x"))
    a = slices.args((1,))[0]
    a.add_(100)
    assert not torch.equal(a, slices.args((1,))[0])


def test_registry_entries_are_hazard_free_and_seeded():
    for e in afdb.REGISTRY:
        afdb.validate_entry(e)  # raises on a hazard


def _hazardous(seed, dtype, device):
    g = torch.Generator().manual_seed(seed)
    return [Sample((torch.randn(4, 3, generator=g, dtype=dtype),), "has-a-3")]


def test_registry_rejects_a_hazardous_sample_naming_it():
    e = entry("Hazard", NumpyCube, _hazardous)
    with pytest.raises(HazardousSampleError) as info:
        Registry([e])
    msg = str(info.value)
    assert "entry Hazard" in msg and "sample 0 (has-a-3)" in msg
    assert "argument 0 has size 3 at dim 1" in msg


def test_registry_rejects_a_generator_that_ignores_its_seed():
    def unseeded(seed, dtype, device):
        return [Sample((torch.ones(4, dtype=dtype),))]

    with pytest.raises(RegistryError, match="identical data"):
        Registry([entry("Unseeded", NumpyCube, unseeded)])


def test_registry_lookup_by_name_and_tag():
    assert afdb.REGISTRY.get("NumpyMul").function is NumpyMul
    assert any(e.name == "NumpyMul" for e in afdb.REGISTRY.by_tag("backend:numpy"))
    with pytest.raises(KeyError, match="no entry named"):
        afdb.REGISTRY.get("Nope")
    with pytest.raises(RegistryError, match="registered twice"):
        Registry([afdb.REGISTRY.get("NumpyMul"), afdb.REGISTRY.get("NumpyMul")])


# --- pytree arguments ---------------------------------------------------------------------


def test_tensor_leaves_of_containers_are_batched_each_on_its_own():
    x, a, b = torch.randn(4, 5), torch.randn(5), torch.randn(4, 1)
    lay = ArgLayout.of(Sample((x, (a, b), {"k": a, "v": 3})))
    assert lay.addresses() == [(0,), (1, 0), (1, 1), (2, "k")]
    plans = single_level_plans(lay, cap=1000)
    dims = [p.levels[0].in_dims for p in plans if p.levels[0].out_dims == 0]
    assert (0, (None, 1), None) in dims and (None, None, {"k": -1, "v": None}) in dims
    assert all(d[1] is None or isinstance(d[1], tuple) for d in dims)
    p = Plan((LevelPlan(2, (0, (None, 1), None)),))
    assert p.id == "in_dims=(0,(None,1),None)"
    assert p.to_dict()["levels"][0]["in_dims"] == [0, [None, 1], None]


def test_linked_arguments_link_every_leaf_of_a_container():
    t = torch.randn(4, 5)
    lay = ArgLayout.of(Sample((t, (t, t))), linked=((0, 1),))
    assert lay.units() == [((0,), (1, 0), (1, 1))]
    for p in single_level_plans(lay):
        d = p.levels[0].in_dims
        assert (d[0] is None) == (d[1] is None)


def test_container_leaves_take_their_own_slices():
    def draw(seed):
        g = torch.Generator().manual_seed(seed)
        return [Sample((torch.randn(4, generator=g), (torch.randn(5, generator=g), 7)))]

    slices = SliceSource(draw, 0, (0, "pair"))
    plan = Plan((LevelPlan(2, (None, (-1, None))),))
    x, (a, seven) = build_batched_args(plan, slices)
    assert x.shape == (4,) and a.shape == (5, 2) and seven == 7
    assert not torch.equal(a[:, 0], a[:, 1])
    torch.testing.assert_close(a[:, 1], slices.args((1,))[1][0])
    torch.testing.assert_close(x, slices.args()[0])  # unbatched: the base slice


def test_contract_flags_in_dims_that_do_not_mirror_the_arguments():
    from harness.checks.contract import in_dims_problems

    args = (torch.randn(2, 4), (torch.randn(4), torch.randn(4)))
    assert in_dims_problems("rule", (0, (None, None)), args) == []
    (wrong_tree,) = in_dims_problems("rule", (0, None), args)
    assert "tree structure" in wrong_tree and "(*,(*,*))" in wrong_tree
    (out_of_range,) = in_dims_problems("rule", (0, (None, 3)), args)
    assert "argument 1[1]" in out_of_range and "outside [0, 1)" in out_of_range


# --- what a sample's SliceSource keeps between plans and cases -------------------------------


def _pair_source():
    def draw(seed):
        g = torch.Generator().manual_seed(seed)
        return [Sample((torch.randn(3, generator=g), (torch.randn(4, generator=g), 7)))]

    return SliceSource(draw, 0, (0, "pair"))


def test_kept_stacks_and_slices_survive_a_function_that_modifies_its_inputs():
    slices = _pair_source()
    plan = Plan((LevelPlan(2, (0, (-1, None))),))
    pristine = [t.clone() for t in (slices.args()[0], slices.args((1,))[1][0])]
    first = build_batched_args(plan, slices)
    expected = [first[0].clone(), first[1][0].clone()]

    def clobber(x, pair):  # an in-place Function: modifies every input it gets
        x.mul_(0).add_(99)
        pair[0].fill_(-1)
        return x + pair[0].sum()

    clobber(*first)  # on the batched arguments handed out
    loop_reference(clobber, plan, slices)  # and on every per-slice copy
    again = build_batched_args(plan, slices)  # the kept stacks: a copy, not the same tensors
    torch.testing.assert_close(again[0], expected[0])
    torch.testing.assert_close(again[1][0], expected[1])
    assert again[0] is not first[0] and again[0].data_ptr() != first[0].data_ptr()
    torch.testing.assert_close(slices.args()[0], pristine[0])
    torch.testing.assert_close(slices.args((1,))[1][0], pristine[1])
    # the loop reference still sees the pristine slices
    outs, _ = loop_reference(lambda x, pair: x * 2 + pair[0].sum(), plan, slices)
    torch.testing.assert_close(
        outs[0],
        torch.stack([expected[0][i] * 2 + expected[1][:, i].sum() for i in range(2)]),
    )


def test_repeated_slices_and_per_case_extras_are_never_kept_stacks():
    from harness.plans.composite import WithExtras
    from harness.plans.slices import RepeatedSlices

    slices = _pair_source()
    plan = Plan((LevelPlan(2, (0, None)),))
    distinct = build_batched_args(plan, slices)[0]
    repeated = build_batched_args(plan, RepeatedSlices(slices))[0]
    assert torch.equal(repeated[0], repeated[1]) and not torch.equal(distinct[0], distinct[1])
    assert not torch.equal(build_batched_args(plan, slices)[0][0], distinct[1])

    with_extra = Plan((LevelPlan(2, (0, None, 0)),))

    def extras(fill):
        return WithExtras(slices, lambda key: [torch.full((2,), fill + len(key))])

    one = build_batched_args(with_extra, extras(1.0))
    two = build_batched_args(with_extra, extras(5.0))
    torch.testing.assert_close(one[0], two[0])  # the sample's argument: the same stack
    assert one[2].tolist() == [[1.0, 1.0], [2.0, 2.0]]
    assert two[2].tolist() == [[5.0, 5.0], [6.0, 6.0]]  # its own extras, not the first's


def test_a_plan_id_is_worked_out_once_and_never_shared_with_another_plan():
    import dataclasses

    plan = Plan((LevelPlan(2, (0, None)),))
    assert plan.id == plan.id == "in_dims=(0,None)"
    other = dataclasses.replace(plan, levels=(LevelPlan(3, (None, -1)),))
    assert other.id == "in_dims=(None,-1),B=3"
    assert plan == Plan((LevelPlan(2, (0, None)),))  # the kept id is no field


def test_plans_are_generated_once_per_layout_and_options():
    from harness.checks.catalogue import get_check
    from harness.core.options import Options
    from harness.engine import cases as runner

    spec = get_check("vmap")
    lay = ArgLayout.of(Sample((torch.zeros(2, 3), torch.zeros(3))))
    same = ArgLayout.of(Sample((torch.ones(2, 3), torch.ones(3))))  # other values, same layout
    options = Options()
    first = runner._plans(spec, lay, options)
    assert runner._plans(spec, same, options) is first
    assert [p.id for p in first] == [p.id for p in spec.plans(lay, options)]
    capped = runner._plans(spec, lay, Options(plan_cap=3))
    assert [p.id for p in capped] == [p.id for p in spec.plans(lay, Options(plan_cap=3))]
    assert [p.id for p in capped] != [p.id for p in first]
    other = ArgLayout.of(Sample((torch.zeros(2, 3), (torch.zeros(3), torch.zeros(3)))))
    assert [p.id for p in runner._plans(spec, other, options)] == [
        p.id for p in spec.plans(other, options)
    ]
