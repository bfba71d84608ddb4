"""Nothing vacuous, nothing unbounded (issue 19 section 2, issue 21 section 4).

Samples without elements are an ``error`` (every comparison would pass); the hazard
probe never batches beyond its memory budget; a samples callable is read at most
``SAMPLES_MAX`` samples far, and the report says so.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

from harness import check
from harness.plans.plan import HAZARD_BYTES_MAX
from harness.reports.report import to_markdown
from harness.sources.user_samples import SAMPLES_MAX
from tests import blame_functions as bf
from tests.hostile_state import Correct

ROOT = Path(__file__).resolve().parent.parent
PLANTED = Path(__file__).resolve().parent / "blame_functions.py"

EMPTY = "the sample has no elements: every comparison would pass"


# --- samples without elements ------------------------------------------------------------


def test_a_sample_without_elements_is_an_error_never_a_pass():
    r = check(Correct, bf.empty_samples, checks=["vmap", "vjp", "jvp"])
    assert r.cases and {c.status for c in r.cases} == {"error"}, Counter(c.status for c in r.cases)
    assert all(EMPTY in c.message for c in r.cases)
    assert not r.ok


def test_only_the_empty_sample_is_an_error_the_other_passes():
    r = check(Correct, bf.mixed_empty_samples, checks=["vmap", "vjp"])
    by_sample = {s: {c.status for c in r.cases if c.sample == s} for s in (0, 1)}
    assert by_sample == {0: {"pass"}, 1: {"error"}}, by_sample
    assert all(EMPTY in c.message for c in r.cases if c.sample == 1)


def test_outputs_without_elements_are_an_error_too():
    r = check(bf.EmptyOutput, bf.samples, checks=["vmap", "vjp"])
    assert r.cases and {c.status for c in r.cases} == {"error"}
    assert all("outputs on this sample have no elements" in c.message for c in r.cases)


# --- the hazard probe's memory budget ----------------------------------------------------


def test_the_hazard_probe_skips_a_batch_beyond_its_memory_budget_with_a_note():
    """A sample dim of 12,000 would batch the sample 12,000 times (549 MiB in float32):
    that size is not run, and its case says why; the other checks still run."""
    r = check(Correct, bf.long_samples, hazard_probe=True, checks=["vmap", "vmap_hazard"])
    hazard = [c for c in r.cases if c.check == "vmap_hazard"]
    assert len(hazard) == 1
    (c,) = hazard
    assert c.status == "unsupported", c.message
    assert "hazard=12000" in c.id
    assert "not run: the hazard probe at batch size 12000" in c.message
    assert f"{HAZARD_BYTES_MAX // 2**20} MiB budget" in c.message
    assert {x.status for x in r.cases if x.check == "vmap"} == {"pass"}


def test_the_hazard_probe_still_runs_sizes_within_its_budget():
    r = check(Correct, bf.samples, hazard_probe=True, checks=["vmap_hazard"])
    assert r.cases and {c.status for c in r.cases} == {"pass"}
    assert {int(c.plan["hazard"]) for c in r.cases} == {4, 5}


# --- at most SAMPLES_MAX samples ---------------------------------------------------------


def test_a_samples_generator_that_never_ends_is_capped_and_the_report_says_so():
    r = check(Correct, bf.endless_samples, checks=["vmap"])
    assert {c.sample for c in r.cases} == set(range(SAMPLES_MAX))
    note = r.metadata["samples_note"]
    assert note.startswith(f"took the first {SAMPLES_MAX} samples of an unbounded generator")
    assert "endless_samples" in note
    assert note in to_markdown(r)


def test_a_samples_callable_within_the_cap_gets_no_note():
    r = check(Correct, bf.samples, checks=["vmap"])
    assert r.metadata["samples_note"] == ""
    assert "took the first" not in to_markdown(r)


def test_the_cli_caps_a_samples_callable_and_prints_the_note(tmp_path):
    report = tmp_path / "r.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness.cli",
            "check",
            f"{PLANTED}:Correct",
            "--samples",
            f"{PLANTED}:many_samples",
            "--checks",
            "vmap",
            "--batch-size",
            "7",
            "--json",
            str(report),
        ],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        cwd=tmp_path,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"took the first {SAMPLES_MAX} samples of the samples callable" in proc.stdout
    assert "many_samples, which gives more" in proc.stdout, proc.stdout
    data = json.loads(report.read_text())
    assert len({c["sample"] for c in data["cases"]}) == SAMPLES_MAX
    assert "took the first" in data["metadata"]["samples_note"]
