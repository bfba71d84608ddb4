"""Wrong samples are the user's error, found before any transform (issue 30, part 3).

Each sample calls the Function once with no transform before any case runs; a call that
raises is one line naming the sample, the call and the exception (exit 2, ``UsageError``).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import torch

import harness
from harness.cli.main import main
from harness.core.errors import UsageError
from harness.core.options import Options
from harness.engine import probe
from harness.sources.entries import make_entry
from harness.sources.user_samples import SAMPLES_MAX, base_samples, samples_note
from tests import module_samples as ms
from tests import wrong_samples as ws

ROOT = Path(__file__).resolve().parent.parent
ROT = "examples/rotations.py:RotatePoints"
WS = "tests/wrong_samples.py"


@pytest.fixture(autouse=True)
def _at_root(monkeypatch):
    monkeypatch.chdir(ROOT)


def refused(capsys, *argv):
    rc = main(list(argv))
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert "Traceback" not in err[0]
    return err[0]


@pytest.mark.parametrize(
    "source, needles",
    [
        ("one_tuple", ["sample 0: RotatePoints.apply(*sample) raises TypeError", "missing a required argument: 'x'", "with no transform at all: the samples do not fit the Function", "return a list of argument tuples"]),
        ("one_too_many", ["sample 0: RotatePoints.apply(*sample) raises TypeError", "too many positional arguments", "the samples do not fit"]),
        ("shapes_that_do_not_combine", ["sample 0: RotatePoints.apply(*sample) raises ValueError", "the samples do not fit"]),
        ("a_dict", ["returned a dict", "one sample per key", "return a list of argument tuples"]),
    ],
)  # fmt: skip
def test_each_wrong_samples_shape_is_refused_with_one_line_and_exit_2(capsys, source, needles):
    line = refused(capsys, "check", ROT, "--samples", f"{WS}:{source}", "--no-isolate")
    for needle in needles:
        assert needle in line, line
    assert str(ROOT) not in line  # portable locations, never this machine's paths


def test_the_hint_is_given_only_to_a_source_shaped_like_one_sample(capsys):
    line = refused(capsys, "check", ROT, "--samples", f"{WS}:one_too_many", "--no-isolate")
    assert "list of argument tuples" not in line and "fix the samples" in line


def test_refused_in_the_isolated_default_mode_too(capsys):
    line = refused(capsys, "check", ROT, "--samples", f"{WS}:one_tuple", "--checks", "vmap")
    assert "missing a required argument: 'x'" in line


def test_right_samples_run_as_before(capsys):
    rc = main(["check", ROT, "--samples", f"{WS}:right", "--checks", "vmap", "--no-isolate"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "PASS: " in out


def test_the_api_raises_usage_error_with_the_same_line():
    with pytest.raises(UsageError) as e:
        harness.check(ms.Triple, _two_args)
    text = str(e.value)
    assert text.startswith("sample 0: Triple.apply(*sample) raises TypeError")
    assert "the samples do not fit the Function" in text and "\n" not in text


def test_no_case_runs_when_the_samples_do_not_fit(monkeypatch):
    import harness.api as api

    ran = []
    monkeypatch.setattr(api, "run_entries", lambda *a, **k: ran.append(1))
    with pytest.raises(UsageError):
        harness.check(ms.Triple, _two_args)
    assert ran == []


def _two_args(seed):
    return [(torch.randn(5), torch.randn(5))]


class _Hangs(ms.Triple):
    @staticmethod
    def forward(x):
        time.sleep(30)
        return 3 * x


class _Dies(ms.Triple):
    @staticmethod
    def forward(x):
        os._exit(7)


def test_a_hanging_plain_call_is_ended_by_the_limit_and_refuses_nothing():
    entry = make_entry(_Hangs, ms.samples)
    start = time.monotonic()
    assert probe.probe_in_process(entry, base_samples(entry, Options()), 0.5) is None
    assert time.monotonic() - start < 10


@pytest.mark.skipif(not hasattr(os, "fork"), reason="the isolated probe forks")
def test_a_crashing_plain_call_in_the_forked_probe_leaves_the_run_standing():
    entry = make_entry(_Dies, ms.samples)
    assert probe.probe_samples(entry, base_samples(entry, Options()), 5, isolate=True) is None
    bad = make_entry(ms.Triple, _two_args)
    found = probe.probe_samples(bad, base_samples(bad, Options()), 5, isolate=True)
    assert found is not None and found.index == 0 and "TypeError" in found.raised


def test_module_level_samples_beside_the_class_are_found(capsys):
    rc = main(["check", "tests/module_samples.py:Triple", "--checks", "vmap", "--no-isolate"])
    assert rc == 0, capsys.readouterr()


def test_missing_samples_say_where_the_suite_looked(capsys):
    line = refused(capsys, "check", "examples/rotations.py:RotatePoints", "--no-isolate")
    assert "looked for RotatePoints.samples and a module-level `samples` in" in line
    from harness.sources.entries import samples_attribute, samples_places

    assert samples_attribute(_NoSamples) is None
    assert samples_places(_NoSamples) == (
        "looked for _NoSamples.samples and a module-level `samples` in tests.test_samples_fit_absent"
    )


class _NoSamples(torch.autograd.Function):
    __module__ = "tests.test_samples_fit_absent"  # a module with no `samples`

    @staticmethod
    def forward(x):
        return x


def test_a_run_that_differentiated_nothing_says_so_in_its_verdict_line(capsys):
    rc = main(
        ["check", "tests/module_samples.py:Shift", "--samples",
         "tests/module_samples.py:integer_samples", "--no-isolate"]
    )  # fmt: skip
    out = capsys.readouterr().out.strip().splitlines()
    assert rc == 0
    assert out[-1].startswith("PASS: ") and "; no derivative checked (no floating-point" in out[-1]
    # its twin with float samples differentiates: no such words
    result = harness.check(ms.Triple, ms.samples, checks=["vmap", "vjp"])
    assert "no derivative" not in harness.api.verdict_line(result)


def test_an_unbounded_generator_cut_at_the_cap_says_so():
    entry = make_entry(ms.Triple, ws.forever)
    assert len(base_samples(entry, Options())) == SAMPLES_MAX
    note = samples_note(entry)
    assert note.startswith(f"took the first {SAMPLES_MAX} samples of an unbounded generator")
    short = make_entry(ms.Triple, ws.yielded)
    assert len(base_samples(short, Options())) == 2 and samples_note(short) == ""


def test_the_legacy_note_names_only_the_eager_checks_that_checked_something():
    from harness.api import summary_notes
    from tests import legacy_functions as lf

    result = harness.check(lf.LegacySTEFromOutput, lf.one_sample, gradient="custom")
    statuses = {c.check: c.status for c in result.cases if c.check.startswith("eager_")}
    assert statuses["eager_jvp"] == "unsupported" and statuses["eager_vjp"] == "pass"
    (note,) = [n for n in summary_notes(result) if "legacy forward" in n]
    assert "eager autograd was checked instead (eager_vjp)" in note
    assert "eager_jvp, eager_vjp_of_vjp checked nothing" in note
    full = harness.check(lf.LegacyScaledTanh, lf.three_samples)
    (note,) = [n for n in summary_notes(full) if "legacy forward" in n]
    assert "checked instead (eager_vjp, eager_jvp, eager_vjp_of_vjp)" in note
    assert "checked nothing" not in note


class _UsesOpenMP(ms.Triple):
    @staticmethod
    def forward(x):
        torch.linalg.matrix_exp(torch.randn(200, 64, 64))  # a parallel (OpenMP) kernel
        return 3 * x


@pytest.mark.skipif(not hasattr(os, "fork"), reason="the isolated probe forks")
def test_the_forked_probe_survives_a_parallel_kernel_after_the_parent_used_one():
    torch.linalg.matrix_exp(torch.randn(200, 64, 64))  # the parent's OpenMP team exists
    entry = make_entry(_UsesOpenMP, ms.samples)
    start = time.monotonic()
    assert probe.probe_samples(entry, base_samples(entry, Options()), 60) is None
    assert time.monotonic() - start < 20  # answered, not ended by its deadline
