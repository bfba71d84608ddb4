"""Whether this process may still fork workers that work: the threads a fork leaves behind.

A forked child has one thread, the caller's. A thread pool the parent started is gone in
the child, but its state (locks held, a team that "exists", a queue a worker serves) came
along, so the child's first use of it waits forever or aborts:

* numba's parallel threading layer, once launched (GNU OpenMP: the child is terminated
  with "fork() called from a process already using GNU OpenMP"; TBB and workqueue: hangs);
* TorchScript's interpreter threads, torch's inter-op pool (``torch.jit.fork``,
  ``torch.jit._fork``, ``at::launch``; the threads are named ``PTThreadPool``): the child's
  next ``torch.jit.fork`` deadlocks in the interpreter;
* a non-main Python thread, which may hold any lock the child then needs (a logger's,
  a stream's, a library's);
* native threads that none of the above explains, beyond what torch's and NumPy's own pools
  hold (``torch_allowance``).

torch's own intra-op pool is not a hazard: a fresh torch process holds one extra thread
after ``import torch`` and ``2 * k`` threads in all once ops ran with ``k`` intra-op
threads (measured on torch 2.13: k = 1, 2, 3, 4, 8 give 2, 4, 6, 8, 16), and the workers
use one intra-op thread, so they never wake the team. NumPy's OpenBLAS starts ``cpus - 1``
threads at import and has fork handlers. The suite's own watchdog thread (``afdb-*``) is
reset in a child (``engine/deadline.py``).

Where a hazard is present the suite does not fork (``process_model``, used by
``harness.engine.parallel``; ``harness.engine.probe``): the cases run in fresh worker
interpreters (pytest-xdist), or in this process for a recorded check whose live classes a
fresh interpreter cannot import; a ``crash`` or ``timeout`` then means the Function crashed
or hung, never the suite's process model. ``AFDB_WORKER_ENGINE=fork`` forks regardless (to
show what a fork would do).
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Sequence
from typing import Any

#: OS thread names (``/proc/self/task/*/comm``) that no forked child can do without.
UNSAFE_THREAD_NAMES = {
    "PTThreadPool": "torch's inter-op thread pool is running (torch.jit.fork, TorchScript)",
}
#: Threads the suite itself starts (and resets in a forked child).
SUITE_THREAD_PREFIX = "afdb-"


def task_names() -> list[str] | None:
    """The names of this process's OS threads, or None where /proc does not say."""
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return None
    names = []
    for tid in tasks:
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                names.append(f.read().strip())
        except OSError:  # the thread ended meanwhile
            continue
    return names


def python_threads() -> tuple[list[threading.Thread], int]:
    """The non-main Python threads that are not the suite's own, and how many Python
    threads of any kind besides the main one run (each is an OS thread too)."""
    main = threading.main_thread()
    others = [t for t in threading.enumerate() if t is not main and t.is_alive()]
    foreign = [
        t
        for t in others
        if not t.name.startswith(SUITE_THREAD_PREFIX)
        and not isinstance(t, threading._DummyThread)  # a native thread that ran Python
    ]
    return foreign, len(others)


def numba_pool() -> bool:
    """numba's parallel threading layer has been launched in this process."""
    parallel = sys.modules.get("numba.np.ufunc.parallel")
    return bool(getattr(parallel, "_is_initialized", False))


def torch_allowance() -> int:
    """OS threads besides the main one that torch's and NumPy's own pools may hold here
    and still fork safely (see the module docstring)."""
    cpus = os.cpu_count() or 1
    threads = cpus
    torch = sys.modules.get("torch")
    if torch is not None:
        with contextlib.suppress(Exception):
            threads = max(threads, int(torch.get_num_threads()))
    allowance = 2 * threads - 1
    if "numpy" in sys.modules:
        allowance += cpus - 1
    return allowance


def hazards() -> list[str]:
    """What makes a fork of this process unsafe, one phrase each (empty: safe to fork)."""
    found: list[str] = []
    if numba_pool():
        found.append("numba's parallel thread pool is running")
    names = task_names()
    named = 0
    if names is not None:
        for name, why in UNSAFE_THREAD_NAMES.items():
            count = names.count(name)
            if count:
                named += count
                found.append(why)
    foreign, python_count = python_threads()
    if foreign:
        shown = ", ".join(repr(t.name) for t in foreign[:3])
        more = f" and {len(foreign) - 3} more" if len(foreign) > 3 else ""
        s = "s" if len(foreign) != 1 else ""
        found.append(f"{len(foreign)} Python thread{s} besides the main one run ({shown}{more})")
    if names is not None and not found:
        unexplained = len(names) - 1 - python_count - named - torch_allowance()
        if unexplained > 0:
            found.append(
                f"{len(names) - 1 - python_count} native threads run, more than torch's own "
                f"pools hold ({torch_allowance()}): a library started a thread pool"
            )
    return found


def unsafe_reason() -> str:
    """One phrase saying why this process must not fork workers ('' when it may)."""
    if os.environ.get("AFDB_WORKER_ENGINE", "") == "fork":
        return ""
    return "; ".join(hazards())


def importable(cls: Any) -> bool:
    """A fresh interpreter with this process's ``sys.path`` imports ``cls`` by its module
    and qualified name (not a class of ``__main__``, of a function, or of a module that
    came from no file)."""
    module = getattr(cls, "__module__", None)
    qualname = getattr(cls, "__qualname__", "")
    loaded = sys.modules.get(module or "")
    if not module or module == "__main__" or "<locals>" in qualname or loaded is None:
        return False
    spec = getattr(loaded, "__spec__", None)
    if spec is None or not getattr(spec, "origin", None) or spec.name != module:
        return False
    found: Any = loaded
    for part in qualname.split("."):
        found = getattr(found, part, None)
    if found is not cls:
        return False
    # its top-level package is found on this sys.path (what the workers are given), not
    # only in sys.modules (pytest's importlib import mode leaves no path to it)
    from importlib.machinery import PathFinder

    top = module.partition(".")[0]
    if top in sys.builtin_module_names:
        return True
    paths = [os.path.abspath(p) for p in sys.path if p and os.path.isdir(p)]
    try:
        return PathFinder.find_spec(top, paths) is not None
    except (ImportError, ValueError):
        return False


def cannot_rebuild(entries: Sequence[Any], target: Any = None) -> list[str]:
    """The entries of a recorded check that no fresh interpreter can make again: by the
    target's word (``RecordedTarget.rebuilds``: from the recording files, by re-running
    the tests that called them, or not at all), else by whether their class imports there."""
    rebuilds = getattr(target, "rebuilds", None)
    if rebuilds is not None:
        return [e.name for e in entries if not rebuilds(e.name)]
    return [e.name for e in entries if not importable(getattr(e, "function", None))]


def process_model(
    source: str = "", entries: Sequence[Any] = (), target: Any = None
) -> tuple[str, str]:
    """``fork``, ``xdist`` (fresh interpreters), ``mixed`` (fresh interpreters, and this
    process for the recorded Functions none can make again) or ``in-process`` (all of them),
    and where forking is unsafe the one line that says which and why (no paths)."""
    from harness.engine import forkpool

    wanted = os.environ.get("AFDB_WORKER_ENGINE", "")
    if wanted == "xdist" or not forkpool.available():
        return "xdist", ""
    reason = unsafe_reason()
    if not reason:
        return "fork", ""
    why = f"forking this process is not safe: {reason}"
    fresh = f"process model: cases run in fresh worker interpreters, not forked ({why})"
    if source != "recorded":
        return "xdist", fresh
    stuck = cannot_rebuild(entries, target) if entries else ["?"]
    if stuck and len(stuck) == len(entries or stuck):
        return "in-process", (
            f"process model: cases run in this process, not in forked workers ({why}); "
            "a Function that kills its process ends the run"
        )
    if stuck:
        return "mixed", (
            f"{fresh}; {len(stuck)} Function{'s' if len(stuck) != 1 else ''} in this process "
            "(a fresh interpreter cannot make them again), each named before it starts"
        )
    rebuilds = getattr(target, "rebuilds", None)
    replayed = [e.name for e in entries if rebuilds is not None and rebuilds(e.name) == "replay"]
    if replayed:
        n = len(replayed)
        fresh += (
            f"; {n} Function{'s' if n != 1 else ''} with live values or classes of the tests "
            "made there again by re-running the tests that called them"
        )
    return "xdist", fresh


__all__ = [
    "cannot_rebuild",
    "hazards",
    "importable",
    "numba_pool",
    "process_model",
    "task_names",
    "torch_allowance",
    "unsafe_reason",
]
