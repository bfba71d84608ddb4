"""Batching plans and the data they batch.

Owns: plan types and plan generation with the hazard probe and ``unique_plans``
(``plan``), the plans of the checks that batch extra arguments (cotangents, tangents)
beside the Function's, with the slices that carry those extras (``composite``),
strength-2 covering arrays (``pairwise``), tensors inside container arguments and outputs
as pytrees (``pytrees``), per-slice data and batched arguments (``slices``), the loop
reference and the vmapped call for one plan (``batching``), non-contiguous layouts of
batched arguments (``layouts``).

May import: ``harness.core`` and ``autograd_function_db``; never ``harness.checks``
(the checks import the plans).
"""
