"""Rendering results: JSON and Markdown (``report``), HTML (``html``), JUnit (``junit``),
regression diffs between two reports (``diff``), many reports side by side (``matrix``)
and failures grouped by root cause (``grouping``).

Reports are data in, text out: they never plan, run or check cases.

May import: ``harness.core`` only (a contract in pyproject.toml enforces it); inside the
wing, ``report`` is the base the others build on and ``matrix`` reuses ``diff``'s
comparison (``describe_run``, ``comparability_warnings``).
"""
