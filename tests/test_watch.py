"""``afdb check --watch``: a fix is picked up without restarting, with the fresh command's results.

One process runs the check, waits for the Function's file to change, re-imports the
user's module and runs again. The test writes a broken Function (and then one whose file
does not even import), starts ``--watch`` for a bounded number of runs, rewrites the file
fixed after each run and reads the verdicts; the last report must equal a fresh
``afdb check`` of the fixed file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from harness.cli.watch import snapshot, wait_for_change

ROOT = Path(__file__).resolve().parent.parent

FUNCTION = """import torch


class Triple(torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return x * 3

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, g):
        return g * {factor}


def samples(seed):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(4, 5, generator=g, dtype=torch.float64),)]
"""

CHECKS = "vmap,vjp"


def _command(tmp_path: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "harness.cli",
        "check",
        "triple.py:Triple",
        "--samples",
        "triple.py:samples",
        "--checks",
        CHECKS,
        *extra,  # no -q: it prints the summary line only, and the test reads the table
    ]


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1")


def _rewrite(path: Path, text: str) -> None:
    before = path.stat().st_mtime_ns
    path.write_text(text)
    os.utime(path, ns=(before + 10**9, before + 10**9))  # a clearly later mtime


def test_watch_picks_up_a_fix_and_reports_what_a_fresh_check_reports(tmp_path):
    src = tmp_path / "triple.py"
    src.write_text(FUNCTION.format(factor=2))  # BUG: the derivative of 3x is 3
    report = tmp_path / "watch.json"
    cmd = _command(tmp_path, "--watch", "--watch-iterations", "3", "--watch-interval", "0.05")
    proc = subprocess.Popen(
        [*cmd, "--json", str(report)],
        cwd=tmp_path,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    fixes = iter(["import torch\nclass Triple(:\n", FUNCTION.format(factor=3)])
    deadline = time.monotonic() + 300
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line)
        if line.startswith("afdb check --watch: watching"):
            _rewrite(src, next(fixes))
        assert time.monotonic() < deadline, "".join(lines)
    rc = proc.wait(timeout=60)
    out = "".join(lines)
    verdicts = [ln for ln in lines if ln.startswith(("PASS:", "FAIL:"))]
    assert verdicts[0].startswith("FAIL:") and "2 fail" in verdicts[0], out  # and its float32 leg
    assert "FAIL vjp" in out and "ok   vmap" in out
    assert "afdb check: error: TARGET: importing triple.py failed: SyntaxError" in out, out
    assert verdicts[-1].startswith("PASS:"), out
    assert len(verdicts) == 2 and rc == 0, out
    assert out.count("triple.py changed; running the check again") == 2

    fresh = tmp_path / "fresh.json"
    done = subprocess.run(
        [*_command(tmp_path), "--json", str(fresh)],
        cwd=tmp_path,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr

    def cases(path: Path) -> list[tuple[str, str, str, str]]:
        data = json.loads(path.read_text())
        return [(c["id"], c["status"], c["message"], c["repro"]) for c in data["cases"]]

    assert cases(report) == cases(fresh)


def test_wait_for_change_sees_a_new_mtime_and_waits_for_it_to_settle(tmp_path):
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text("x = 1\n")
    b.write_text("y = 1\n")
    paths = [str(a), str(b)]
    before = snapshot(paths)
    polls = []

    def sleep(_s: float) -> None:
        polls.append(1)
        if len(polls) == 3:
            b.write_text("y = 2\n")
            os.utime(b, ns=(1, 10**18))

    assert wait_for_change(before, paths, 0.0, sleep=sleep) == [str(b)]
    assert len(polls) == 4  # three unchanged looks, then one more to let the edit settle
