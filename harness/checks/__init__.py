"""The checks and their references.

Owns: the catalogue (``catalogue``: what a check is, the registry, the order), the vmap
checks (``vmap``), no silent per-example fallback (``fallback``), the rule contract
(``contract``), the autodiff family (``autodiff``, ``first_order``, ``second_order``,
``composites``, three transforms in ``three_level``, vmap over ``torch.autograd.grad`` in
``batched_grad``) with their shared pieces (``autodiff_refs``), opcheck's tests for custom
ops (``opcheck``), float64 finite differences (``finite_diff``), comparison with
messages (``compare``) and low-precision tolerances (``tolerances``).

May import: ``harness.plans``, ``harness.core`` and ``autograd_function_db``. A check never
runs cases or writes reports: it answers for one case, given a ``CaseContext``.
"""
