"""Expectations conditional on the torch version, shipped with the package, kept by --accept."""

from __future__ import annotations

import json
import re

import pytest

from harness import expectations as ex
from harness.cli.main import main
from harness.core.results import FAIL, PASS, CaseResult
from harness.sources.database import expectations_path


def _text(items) -> str:
    return json.dumps({"schema": ex.SCHEMA, "expectations": items}, indent=1)


def _case(case_id: str, status: str) -> CaseResult:
    entry, check = case_id.split("/")[:2]
    return CaseResult(case_id, entry, check, 0, "s0", None, status, "boom")


ITEMS = [
    {"id": "A/vmap", "status": "xfail", "reason": "torch bug #1", "torch": "<2.14"},
    {"id": "A/jvp", "status": "xfail", "reason": "always"},
    {"id": "B/vmap", "status": "xfail", "reason": "new in 2.14", "torch": ">=2.14"},
]


@pytest.mark.parametrize(
    ("version", "active"),
    [
        ("2.13.0+cpu", {"A/vmap", "A/jvp"}),
        ("2.13.0", {"A/vmap", "A/jvp"}),
        ("2.14.1+cu130", {"A/jvp", "B/vmap"}),
        ("2.14.0.dev20260101", {"A/jvp", "B/vmap"}),  # a nightly counts as its release
    ],
)
def test_the_torch_field_selects_the_expectations_that_hold(version, active):
    exps = ex.Expectations(ex.parse(_text(ITEMS)).items, torch_version=version)
    assert {e.id for e in exps.active} == active
    assert (exps.lookup("A/vmap/s0/in_dims=(0,)") is not None) == ("A/vmap" in active)
    # an expectation for another torch is not "unmatched": it says nothing about this run
    assert {e.id for e in exps.unmatched([])} == active


def test_an_inactive_xfail_leaves_the_case_as_it_is():
    exps = ex.Expectations(ex.parse(_text(ITEMS)).items, torch_version="2.14.1")
    failing = ex.apply(exps, _case("A/vmap/s0", FAIL))
    assert failing.status == FAIL and failing.expectation == ""
    passing = ex.apply(exps, _case("A/vmap/s0", PASS))
    assert passing.status == PASS  # not xpass: the bug is fixed on this torch
    old = ex.Expectations(exps.items, torch_version="2.13.0")
    xfail = ex.apply(old, _case("A/vmap/s0", FAIL))
    assert xfail.status == "xfail" and xfail.expectation == "torch bug #1"
    assert ex.apply(old, _case("A/vmap/s0", PASS)).status == "xpass"


@pytest.mark.parametrize(
    ("field", "problem"),
    [
        ('"torch": "2.14"', '"torch" must be a version specifier such as "<2.14"'),
        ('"torch": "<=banana"', "got '<=banana'"),
        ('"torch": ""', "got ''"),
        ('"torch": 2.14', "got 2.14"),
        ('"torch_version": "<2.14"', "unknown key 'torch_version'"),
    ],
)
def test_a_bad_specifier_or_unknown_field_is_refused_with_its_line(field, problem):
    text = (
        '{"schema": "afdb-expectations/1",\n'
        ' "expectations": [\n'
        '  {"id": "A/jvp", "status": "xfail", "reason": "r"},\n'
        f'  {{"id": "A/vmap", "status": "xfail", "reason": "r", {field}}}\n'
        " ]}\n"
    )
    with pytest.raises(ex.ExpectationsError) as err:
        ex.parse(text, "exp.json")
    assert str(err.value).startswith("exp.json: line 4: ")
    assert problem in str(err.value)


def test_the_same_id_may_hold_different_reasons_on_different_torches():
    items = [
        {"id": "A/vmap", "status": "xfail", "reason": "old bug", "torch": "<2.14"},
        {"id": "A/vmap", "status": "xfail", "reason": "new bug", "torch": ">=2.14"},
    ]
    exps = ex.parse(_text(items))
    assert ex.Expectations(exps.items, torch_version="2.13.0").lookup("A/vmap").reason == "old bug"
    assert ex.Expectations(exps.items, torch_version="2.14.1").lookup("A/vmap").reason == "new bug"
    with pytest.raises(ex.ExpectationsError, match="listed twice for torch <2.14"):
        ex.parse(_text([items[0], items[0]]))


def test_accept_keeps_conditions_it_did_not_need_to_change(tmp_path):
    path = tmp_path / "exp.json"
    path.write_text(_text(ITEMS))
    previous = ex.Expectations(ex.load(path).items, torch_version="2.14.1")
    results = [
        _case("A/vmap/s0", FAIL),  # A/vmap does not hold on 2.14: a new failure
        _case("A/jvp/s0", PASS),  # fixed: its expectation goes
        _case("B/vmap/s0", FAIL),  # still failing: kept, with its condition
    ]
    new = ex.from_results(results, previous)
    got = [ex.as_dict(e) for e in new.items]
    assert got == [
        ITEMS[0],  # another torch's expectation, kept as it is, where it was
        ITEMS[2],
        # the new failure's cause covers A/vmap whole: its prefix, not the case id
        {"id": "A/vmap", "status": "xfail", "reason": ex.PLACEHOLDER},
    ]
    assert json.loads(new.to_json())["expectations"] == got  # the condition is written back


def test_the_committed_expectations_travel_inside_the_package():
    import harness

    for source in ("afdb", "pytorch"):
        path = expectations_path(source)
        assert path is not None and path.is_relative_to(harness.__path__[0])
        ex.load(path)  # valid
    # RowSumWithCount's torch bug (vmap's un-batching of an out_dim None output) needs no
    # expectation on this torch: the suite recognises it by its signature
    # (harness.checks.unbatching). Only 2.12, which raises differently, keeps some.
    loaded = ex.load(expectations_path("afdb"))
    assert not [e.id for e in loaded.active if e.id.startswith("RowSumWithCount/")]
    kept = [e for e in loaded.items if e.id.startswith("RowSumWithCount/")]
    assert kept and {e.torch for e in kept} == {"<2.13"}


def test_progress_lines_count_statuses_after_expectations(capsys):
    rc = main(["run", "RowSumWithCount", "--checks", "vmap"])
    out = capsys.readouterr().out
    progress = next(line for line in out.splitlines() if line.startswith("RowSumWithCount:"))
    counts = {status: int(n) for n, status in re.findall(r"(\d+) (\w+)", progress)}
    if ex.torch_admits("<2.14", ex.installed_torch()):
        assert counts.get("xfail") == 3 and "fail" not in counts, progress
    else:
        assert "xfail" not in counts and "fail" not in counts, progress
    assert rc == 0 and "PASS" in out


def test_a_missing_dependency_of_torchs_testing_internals_is_named(monkeypatch):
    import importlib

    from harness.sources import pytorch_db as sources

    real = importlib.import_module

    def no_expecttest(name, *args, **kwargs):
        if name == sources.PYTORCH_MODULE:
            raise ModuleNotFoundError("No module named 'expecttest'", name="expecttest")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(sources.importlib, "import_module", no_expecttest)
    with pytest.raises(sources.SourceError) as err:
        sources.pytorch_registry(stand_ins=False)
    assert "needs the module 'expecttest'" in str(err.value)
    assert "pip install expecttest" in str(err.value)
