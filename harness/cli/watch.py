"""``afdb check TARGET --watch``: one process, the check run again whenever the user's files change.

torch, the harness and what torch loads on first use stay imported; before each run the
user's modules (those the target and the samples imported from outside the Python
installation and the suite) are forgotten, so the run imports the current code, exactly
as a fresh ``afdb check`` would. The global random generators are put back to their
state when watching began, so a Function that draws without a seed sees what it would
see in a fresh process. The files watched are the target's, the samples' and every user
module's; their modification times are polled (no new dependency). A run that cannot
load the target (a syntax error half way through an edit) prints its one-line error and
waits for the next change.
"""

from __future__ import annotations

import argparse
import copy
import os
import random
import sys
import time
from collections.abc import Callable
from typing import Any

from harness.core.errors import CliError, UsageError
from harness.core.textsafe import visible

#: Seconds between two looks at the watched files.
POLL_S = 0.3

Snapshot = dict[str, tuple[int, int] | None]


def _spec_file(spec: str | None, base_dir: str) -> str | None:
    """The file a ``module:attr`` or ``path.py:attr`` names, found without running it."""
    if not spec or ":" not in spec:
        return None
    from harness.sources.imports import is_path

    module = spec.rpartition(":")[0]
    if is_path(module):
        path = module if os.path.isabs(module) else os.path.join(base_dir, module)
        return os.path.abspath(path)
    import importlib.util

    try:
        found = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    origin = getattr(found, "origin", None)
    return os.path.abspath(origin) if origin and os.path.exists(origin) else None


def snapshot(paths: list[str]) -> Snapshot:
    out: Snapshot = {}
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            out[path] = None
            continue
        out[path] = (st.st_mtime_ns, st.st_size)
    return out


def wait_for_change(
    before: Snapshot, paths: list[str], poll_s: float, sleep: Callable[[float], None] = time.sleep
) -> list[str]:
    """Poll until one of ``paths`` differs from ``before``; the changed ones (settled: an
    editor that writes in steps is given one more poll to finish)."""
    while True:
        sleep(poll_s)
        now = snapshot(paths)
        if now != before:
            sleep(poll_s)
            settled = snapshot(paths)
            return [p for p in paths if settled.get(p) != before.get(p)]


class _Randomness:
    """The global generators' state when watching began, put back before every run."""

    def __init__(self) -> None:
        import torch

        self.torch = torch.random.get_rng_state()
        self.python = random.getstate()
        numpy = sys.modules.get("numpy")
        self.numpy = numpy.random.get_state() if numpy is not None else None

    def restore(self) -> None:
        import torch

        torch.random.set_rng_state(self.torch)
        random.setstate(self.python)
        numpy = sys.modules.get("numpy")
        if numpy is not None and self.numpy is not None:
            numpy.random.set_state(self.numpy)


def _display(path: str) -> str:
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return rel if not rel.startswith("..") else path


def run_watch(args: argparse.Namespace, check_once: Callable[[argparse.Namespace], int]) -> int:
    """Run ``check_once`` now and again after each change of the user's files; the exit
    status of the last run (``--watch-iterations N`` stops after N runs; Ctrl-C: 130)."""
    from harness.sources.imports import forget_modules, user_modules

    if getattr(args, "accept", False):
        raise CliError("--watch cannot go with --accept (which rewrites a file once)")
    limit = getattr(args, "watch_iterations", None)
    poll_s = getattr(args, "watch_interval", None) or POLL_S
    base_dir = os.getcwd()
    randomness = _Randomness()
    before_first = set(sys.modules)
    mine: set[str] = set()
    status = 0
    runs = 0
    try:
        while True:
            forget_modules(mine)
            randomness.restore()
            try:
                status = check_once(copy.copy(args))
            except UsageError as e:
                print(f"afdb check: error: {visible(str(e), keep_newlines=False)}", flush=True)
                status = 2
            mine |= set(user_modules(set(sys.modules) - before_first))
            runs += 1
            if limit is not None and runs >= limit:
                return status
            paths = _watched(args, base_dir, mine)
            state = snapshot(paths)
            shown = ", ".join(_display(p) for p in paths) or "nothing (the target names no file)"
            print(f"\nafdb check --watch: watching {shown} (Ctrl-C to stop)", flush=True)
            changed = wait_for_change(state, paths, poll_s)
            print(
                f"afdb check --watch: {', '.join(_display(p) for p in changed)} changed; "
                "running the check again\n",
                flush=True,
            )
    except KeyboardInterrupt:
        print("afdb check --watch: stopped", flush=True)
        return 130


def _watched(args: argparse.Namespace, base_dir: str, modules: set[str]) -> list[str]:
    paths: list[str] = []
    for spec in (args.target, getattr(args, "samples", None)):
        path = _spec_file(spec, base_dir)
        if path and path not in paths:
            paths.append(path)
    for name in sorted(modules):
        module: Any = sys.modules.get(name)
        path = getattr(module, "__file__", None) if module is not None else None
        if path and os.path.abspath(path) not in paths:
            paths.append(os.path.abspath(path))
    return paths


__all__ = ["POLL_S", "run_watch", "snapshot", "wait_for_change"]
