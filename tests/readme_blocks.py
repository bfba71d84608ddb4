"""The README's ``console`` blocks, run: each ``$ command`` and the output shown under it.

A block's output lines are patterns: ``...`` alone on a line stands for any number of
lines, ``...`` inside a line for any text; every other character must match. ``$ echo $?``
shows the previous command's exit status. The commands run in a scratch directory laid
out as the repository root (``examples/`` copied in), with this venv's ``afdb`` and
``python`` first on PATH, so files they write land there.

When counts drift (a new check, a new entry), regenerate the blocks' summary and
per-check lines from real runs::

    .venv/bin/python -m tests.readme_blocks --update    # rewrites README.md in place
    .venv/bin/python -m tests.readme_blocks             # shows what differs, changes nothing
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
UPDATE = ".venv/bin/python -m tests.readme_blocks --update"

_SUMMARY = re.compile(r"^(PASS|FAIL|INTERRUPTED): ")
_CHECK_LINE = re.compile(r"^  (ok  |FAIL|----) (\S+)\s")


@dataclass(frozen=True)
class Step:
    command: str
    expected: tuple[str, ...]  # output lines (patterns)


@dataclass(frozen=True)
class Block:
    start: int  # index of the first line inside the fence, in README lines
    lines: tuple[str, ...]

    @property
    def steps(self) -> list[Step]:
        steps: list[Step] = []
        command: str | None = None
        out: list[str] = []
        for line in self.lines:
            if line.startswith("$ "):
                if command is not None:
                    steps.append(Step(command, tuple(out)))
                command, out = line[2:], []
            elif command is not None:
                out.append(line)
        if command is not None:
            steps.append(Step(command, tuple(out)))
        return steps

    @property
    def title(self) -> str:
        return self.steps[0].command if self.steps else f"block at line {self.start}"


def blocks(text: str) -> list[Block]:
    """Every ```console block that shows a command."""
    lines = text.splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        if lines[i].strip() == "```console":
            j = i + 1
            while j < len(lines) and lines[j].strip() != "```":
                j += 1
            block = Block(i + 1, tuple(lines[i + 1 : j]))
            if block.steps:
                found.append(block)
            i = j
        i += 1
    return found


def pattern(expected: tuple[str, ...]) -> re.Pattern[str]:
    parts = []
    for line in expected:
        if line.strip() == "...":
            parts.append(r"(?:[^\n]*\n)*?")
        else:
            parts.append(".*?".join(map(re.escape, line.split("..."))) + r"\n")
    return re.compile("".join(parts))


def matches(expected: tuple[str, ...], actual: str) -> bool:
    text = actual if actual.endswith("\n") or not actual else actual + "\n"
    return pattern(expected).fullmatch(text) is not None


def scratch_root() -> Path:
    """A directory laid out as the repository root for the commands (examples/ in it)."""
    path = Path(tempfile.mkdtemp(prefix="afdb-readme-"))
    shutil.copytree(ROOT / "examples", path / "examples")
    return path


def run_block(block: Block, cwd: Path) -> list[tuple[Step, str, int]]:
    """Run each step; ``echo $?`` is answered from the previous step's status."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env.pop("PYTHONPATH", None)
    results: list[tuple[Step, str, int]] = []
    last = 0
    for step in block.steps:
        if step.command.strip() == "echo $?":
            results.append((step, f"{last}\n", 0))
            continue
        proc = subprocess.run(
            step.command,
            shell=True,
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=600,
        )
        last = proc.returncode
        results.append((step, proc.stdout, proc.returncode))
    return results


def summary_line(output: str) -> str | None:
    return next((ln for ln in reversed(output.splitlines()) if _SUMMARY.match(ln)), None)


def refreshed(expected: tuple[str, ...], actual: str) -> tuple[str, ...]:
    """``expected`` with its summary and per-check lines taken from ``actual``."""
    checks = {}
    for ln in actual.splitlines():
        m = _CHECK_LINE.match(ln)
        if m:
            checks[m.group(2)] = ln
    new = []
    for line in expected:
        m = _CHECK_LINE.match(line)
        if _SUMMARY.match(line) and summary_line(actual):
            new.append(summary_line(actual))
        elif m and m.group(2) in checks:
            new.append(checks[m.group(2)])
        else:
            new.append(line)
    return tuple(new)


def problem(step: Step, output: str) -> str:
    """What a reader of the failing test needs: the command, the actual summary, the output."""
    want = next((ln for ln in reversed(step.expected) if _SUMMARY.match(ln)), None)
    got = summary_line(output)
    head = f"README block `$ {step.command}`: the output does not match the block"
    if want and got != want:
        head += f"\n  README shows: {want}\n  actual:       {got}"
    return f"{head}\n(regenerate with: {UPDATE})\n--- actual output ---\n{output}"


def main(argv: list[str]) -> int:
    update = "--update" in argv
    text = README.read_text()
    lines = text.splitlines()
    bad = 0
    for block in blocks(text):
        cwd = scratch_root()
        try:
            runs = run_block(block, cwd)
        finally:
            shutil.rmtree(cwd, ignore_errors=True)
        offset = block.start
        for step, output, _ in runs:
            index = lines.index(f"$ {step.command}", offset)
            offset = index + 1 + len(step.expected)
            if matches(step.expected, output):
                continue
            new = refreshed(step.expected, output)
            if update and matches(new, output):
                lines[index + 1 : index + 1 + len(step.expected)] = new
                print(f"updated: $ {step.command}")
            else:
                bad += 1
                print(problem(step, output))
                if update:
                    print("  (could not update this one by itself: edit the block by hand)")
    if update:
        README.write_text("\n".join(lines) + "\n")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
