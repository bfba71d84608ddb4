"""Rendering results: JSON and Markdown (``report``), HTML (``html``), JUnit (``junit``),
regression diffs (``diff``) and failures grouped by root cause (``grouping``).

Reports are data in, text out: they never plan, run or check cases.

May import: ``harness.core`` only (a contract in pyproject.toml enforces it).
"""
