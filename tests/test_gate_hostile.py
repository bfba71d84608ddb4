"""The harness survives hostile Functions: raising, hanging, leaking state, printing, crashing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import torch

from harness import check
from tests import hostile_functions as h

ROOT = Path(__file__).resolve().parent.parent
HOSTILE = Path(__file__).resolve().parent / "hostile_functions.py"


def _clean_state() -> None:
    assert torch.is_grad_enabled()
    assert torch.get_default_dtype() == torch.float32
    assert torch._C._functorch.get_dynamic_layer_stack_depth() == 0


def test_raising_function_is_error_with_type_message_and_user_frame():
    r = check(h.Raising, h.samples, checks=["vmap"])
    assert {c.status for c in r.cases} == {"error"}
    msg = r.cases[0].message
    assert "the Function raised ValueError: the rule is not implemented for this layout" in msg
    assert "hostile_functions.py:" in msg and "in vmap" in msg
    assert r.cases[0].repro.startswith("afdb repro ")


def test_hanging_function_is_timeout_and_the_run_goes_on():
    r = check(h.Hanging, h.samples, checks=["vmap"], timeout_s=0.2)
    assert {c.status for c in r.cases} == {"timeout"}
    assert "0.2 s limit" in r.cases[0].message
    _clean_state()


def test_leaked_transform_level_is_reported_and_restored():
    h.LeavesTransformLevel.leaked = False
    r = check(h.LeavesTransformLevel, h.samples, checks=["vmap"])
    first, rest = r.cases[0], r.cases[1:]
    assert first.status == "fail"  # it changes what the caller computes next (issue 42)
    assert "the Function left 1 torch.func transform level" in first.message
    assert "restored before the next case" in first.message
    assert rest and all(c.status == "pass" for c in rest)
    _clean_state()


def test_leaked_grad_mode_and_default_dtype_are_reported_and_restored():
    r = check(h.LeavesGradDisabled, h.samples, checks=["vmap"])
    assert r.cases[0].status == "fail"  # it changes what the caller computes next (issue 42)
    assert "the Function left grad mode disabled" in r.cases[0].message
    _clean_state()
    r = check(h.LeavesDefaultDtype, h.samples, checks=["vmap"])
    assert "left the default dtype at torch.float64" in r.cases[0].message
    _clean_state()


def test_megabytes_of_output_are_truncated_in_the_report():
    r = check(h.Chatty, h.samples, checks=["vmap"])
    c = r.cases[0]
    assert c.status == "fail"
    assert "3000001 characters, truncated" in c.message
    assert len(c.message) < 10_000
    assert len(r.to_json()) < 20_000 * len(r.cases)


def test_sys_exit_is_an_error_not_the_end_of_the_run():
    r = check(h.Exiting, h.samples, checks=["vmap"])
    assert {c.status for c in r.cases} == {"error"}
    assert "called sys.exit(3)" in r.cases[0].message


def test_crash_and_native_hang_in_worker_processes(tmp_path):
    """os._exit and a segfault give `crash`, a hang with SIGALRM blocked gives `timeout`."""
    report = tmp_path / "r.json"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness.cli",
            "check",
            f"{HOSTILE}:Killer",
            "--samples",
            f"{HOSTILE}:samples",
            "--checks",
            "vmap,vmap_chunked",
            "--batch-size",
            "6",
            "--timeout",
            "1",
            "--json",
            str(report),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=240,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    cases = {c["id"]: c for c in json.loads(report.read_text())["cases"]}
    assert cases["Killer/vmap/s0/in_dims=(1,),B=6"]["status"] == "crash"
    segv = cases["Killer/vmap/s0/in_dims=(-1,),B=6"]
    assert segv["status"] == "crash"
    assert "Segmentation fault" in segv["message"]
    assert "hostile_functions.py" in segv["message"]
    hang = cases["Killer/vmap_chunked/s0/in_dims=(0,),B=3,chunk=2"]
    assert hang["status"] == "timeout", hang
    assert "killed" in hang["message"]
    others = [c for k, c in cases.items() if c["status"] not in ("crash", "timeout")]
    assert others and all(c["status"] == "pass" for c in others)
    for c in cases.values():
        if c["status"] != "pass":
            assert c["repro"].startswith("afdb repro ")
    assert "CRASH Killer/vmap/s0/in_dims=(1,),B=6" in proc.stdout
