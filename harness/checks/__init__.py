"""The checks and their references.

Owns: the catalogue (``catalogue``: what a check is, the registry, the order, the case
guards), the vmap checks (``vmap``, with ``contract`` for the rule contract, ``unbatching``
for torch's un-batching bug), no silent per-example fallback (``fallback``), the autodiff
family (``autodiff`` registers it; ``first_order``, ``second_order``, ``composites`` for
autodiff composed with vmap, three transforms in ``three_level``, vmap over
``torch.autograd.grad`` in ``batched_grad``), the eager checks of Functions torch.func
cannot differentiate (``eager``, ``eager_second_order``), opcheck's tests for custom ops
(``opcheck``), outputs nested in containers (``containers``), the float32 leg
(``dtype_leg``), comparison with messages (``compare``), low-precision tolerances
(``tolerances``) and loop-reference noise (``noise``).

The shared reference code has one home each: the differentiable view, findings and
contract helpers (``autodiff_refs``); eager autograd and FD Jacobian references, the
sub-case subsets and the identity check (``references``); the jvp comparison and the
gradient hints (``first_order``); the second-order references, eager forward-over-reverse
included (``second_order``); the composite references and their reuse per sample
(``composites``); float64 finite differences with their error estimates (``finite_diff``,
``fd_error``, ``fd_precision``). No module imports another's ``_private`` name.

May import: ``harness.plans``, ``harness.core`` and ``autograd_function_db``. A check never
runs cases or writes reports: it answers for one case, given a ``CaseContext``. The
catalogue imports no check module (they register themselves into it).
"""
