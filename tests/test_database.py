"""Every conformance case of the database as a pytest item with its stable id.

``pytest -n auto -k NumpyMul tests/test_database.py`` runs one entry. The
vmap-family checks run by default (seconds); the rest of the catalogue
(autodiff) is the long sweep, behind ``-m sweep``. Cases the committed
expectations file lists (torch bugs, documented limitations) are xfail/skip.
"""

from __future__ import annotations

import pytest

from harness.checks.catalogue import check_names, get_check
from harness.pytest_plugin import database_tests
from harness.sources.database import expectations_path

EXPECTATIONS = str(expectations_path("afdb"))
VMAP_CHECKS = tuple(n for n in check_names() if get_check(n).family == "vmap")
OTHER_CHECKS = tuple(n for n in check_names() if n not in VMAP_CHECKS)

test_case = database_tests(checks=VMAP_CHECKS, expectations=EXPECTATIONS, name="test_case")
test_sweep_case = pytest.mark.sweep(
    database_tests(checks=OTHER_CHECKS, expectations=EXPECTATIONS, name="test_sweep_case")
)
