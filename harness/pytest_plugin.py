"""``from harness.pytest_plugin import conformance_tests``: the documented import of the
functions that make a Function's conformance cases pytest items (``harness.plugin.conformance``).

A user adds one small module to their own test suite::

    # tests/test_conformance.py
    from harness.pytest_plugin import conformance_tests
    from mylib.rotations import Rotate, rotate_samples

    test_rotate = conformance_tests(Rotate, rotate_samples)

This module only names them; the pytest wing (``harness.plugin``) owns the code.
"""

from __future__ import annotations

from harness.plugin.conformance import conformance_tests, database_tests

__all__ = ["conformance_tests", "database_tests"]
