"""Every conformance case of the database as a pytest item with its stable id.

``pytest -n auto -k NumpyMul tests/test_database.py`` runs one entry. The
vmap-family checks run by default (seconds); the whole catalogue (autodiff
included) is the long sweep, behind ``-m sweep``.
"""

from __future__ import annotations

import pytest

from autograd_function_db import REGISTRY
from harness.checks import check_names
from harness.options import Options
from harness.runner import EntryData, enumerate_cases, run_case

FAST_FAMILIES = ("vmap",)


def _cases(families: tuple[str, ...] | None) -> list[tuple[str, str]]:
    checks = tuple(n for n in check_names() if families is None or _family(n) in families)
    options = Options(checks=checks)
    out = []
    for e in REGISTRY:
        for c in enumerate_cases(EntryData(e, options)):
            out.append((e.name, c.id))
    return out


def _family(name: str) -> str:
    from harness.checks import get_check

    return get_check(name).family


_DATA: dict[str, tuple[EntryData, dict]] = {}


def _run(entry_name: str, cid: str) -> None:
    if entry_name not in _DATA:
        data = EntryData(REGISTRY.get(entry_name), Options())
        _DATA[entry_name] = (data, {c.id: c for c in enumerate_cases(data)})
    data, cases = _DATA[entry_name]
    result = run_case(data, cases[cid])
    assert result.ok, f"{result.status}: {result.message}\nreproduce: {result.repro}"


FAST = _cases(FAST_FAMILIES)
ALL_IDS = {cid for _, cid in FAST}


@pytest.mark.parametrize("entry_name,cid", FAST, ids=[cid for _, cid in FAST])
def test_case(entry_name: str, cid: str) -> None:
    _run(entry_name, cid)


SWEEP = [(e, c) for e, c in _cases(None) if c not in ALL_IDS]


@pytest.mark.sweep
@pytest.mark.parametrize("entry_name,cid", SWEEP, ids=[cid for _, cid in SWEEP])
def test_sweep_case(entry_name: str, cid: str) -> None:
    _run(entry_name, cid)
