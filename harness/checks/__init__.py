"""The checks and their references.

Owns: the catalogue (``catalogue``: what a check is, the registry, the order), the vmap
checks (``vmap``), the rule contract (``contract``), the autodiff family (``autodiff``,
``first_order``, ``second_order``, ``composites``) with their shared pieces
(``autodiff_refs``), float64 finite differences (``finite_diff``), comparison with
messages (``compare``) and low-precision tolerances (``tolerances``).

May import: ``harness.plans``, ``harness.core`` and ``autograd_function_db``. A check never
runs cases or writes reports: it answers for one case, given a ``CaseContext``.
"""
