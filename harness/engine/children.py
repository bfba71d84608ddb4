"""Processes a case leaves behind: found, killed and named, so no fork outlives its case.

A Function that forks (``os.fork``, ``subprocess.Popen``, a multiprocessing pool)
and does not wait for its children would keep the worker's pipes open, so the
controller waits for them (or forever). At case start the descendants of this
process are noted; at case end the new ones are killed by their process ids.

Descendants are found through ``/proc`` (Linux): the ``children`` files of this
process's threads, then of theirs. A worker process makes itself a *child subreaper*, so a grandchild whose
parent exited (a daemon's double fork, a child that called ``setsid``) is re-parented
to the worker and still found; a process that runs cases among other work (a user's
pytest, ``harness.check``) is one only while a case runs (``subreaper``). Elsewhere (no
``/proc``) nothing is tracked.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

_PROC = "/proc"


def _stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/PID/stat`` after the command name (state first; the start
    time is the 20th), or None when the process is gone or the line is short."""
    try:
        with open(f"{_PROC}/{pid}/stat", "rb") as f:
            data = f.read().decode("ascii", "replace")
    except OSError:
        return None
    rest = data[data.rfind(")") + 2 :].split()
    return rest if len(rest) > 19 else None


def _start_time(pid: int) -> str | None:
    fields = _stat(pid)
    return fields[19] if fields is not None else None


def _children(pid: int) -> list[int]:
    """Direct children of ``pid``, from each of its threads' ``children`` file."""
    out: list[int] = []
    try:
        tids = os.listdir(f"{_PROC}/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:  # os.open/os.read: a file object per thread was most of a case's scan
            fd = os.open(f"{_PROC}/{pid}/task/{tid}/children", os.O_RDONLY)
            try:
                data = os.read(fd, 1 << 16)
            finally:
                os.close(fd)
            out.extend(int(p) for p in data.split())
        except (OSError, ValueError):
            continue
    return out


_SUPPORTED: bool | None = None


def supported() -> bool:
    """Whether ``/proc`` gives children (asked once: it does not change while we run)."""
    global _SUPPORTED
    if _SUPPORTED is None:
        _SUPPORTED = os.path.exists(f"{_PROC}/self/task/{os.getpid()}/children")
    return _SUPPORTED


Descendant = tuple[int, str]  # (pid, start time): a reused pid is another process


#: ``waitid`` options asking, without waiting or reaping, whether this process has any child
#: at all (``__WALL``: children created by ``clone`` with another exit signal too).
_ANY_CHILD = (
    getattr(os, "WEXITED", 0) | getattr(os, "WNOHANG", 0) | getattr(os, "WNOWAIT", 0) | 0x40000000
)


def _no_child() -> bool:
    """True when the kernel says this process has no child process (one system call, where
    a ``/proc`` scan reads a file per thread). Children of every thread count (a thread
    waits for its siblings' children by default); an orphan re-parented to a subreaper is
    a child. Any doubt (no ``waitid``, another error) says False: then ``/proc`` is read."""
    try:
        os.waitid(os.P_ALL, 0, _ANY_CHILD)
    except ChildProcessError:
        return True
    except (AttributeError, OSError):
        return False
    return False


def descendants(root: int | None = None) -> set[Descendant]:
    """Every process below ``root`` (default: this one), zombies included."""
    if not supported():
        return set()
    if root is None and _no_child():
        return set()
    root = os.getpid() if root is None else root
    found: set[Descendant] = set()
    seen = {root}
    stack = _children(root)
    while stack:
        pid = stack.pop()
        if pid in seen:
            continue
        seen.add(pid)
        start = _start_time(pid)
        if start is not None:
            found.add((pid, start))
            stack.extend(_children(pid))
    return found


_PR_SET_CHILD_SUBREAPER, _PR_GET_CHILD_SUBREAPER = 36, 37
_PRCTL: Any = None


def _prctl() -> Any:
    """libc's ``prctl`` (looked up once), or None where there is none."""
    global _PRCTL
    if _PRCTL is None:
        try:
            import ctypes

            _PRCTL = ctypes.CDLL(None, use_errno=True).prctl
        except Exception:
            _PRCTL = False
    return _PRCTL or None


def become_subreaper(on: bool = True) -> bool:
    """Make orphaned descendants re-parent to this process (Linux prctl), or stop it
    (``on=False``); True on success."""
    prctl = _prctl()
    try:
        return prctl is not None and int(prctl(_PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0)) == 0
    except Exception:
        return False


def is_subreaper() -> bool | None:
    """Whether this process is a child subreaper (None: cannot tell)."""
    prctl = _prctl()
    if prctl is None:
        return None
    try:
        import ctypes

        flag = ctypes.c_int(0)
        if int(prctl(_PR_GET_CHILD_SUBREAPER, ctypes.byref(flag), 0, 0, 0)) != 0:
            return None
        return bool(flag.value)
    except Exception:
        return None


@contextlib.contextmanager
def subreaper() -> Iterator[None]:
    """This process is a child subreaper while the block (a case) runs, so a daemon the case
    starts (a double fork, ``setsid --fork``) is orphaned to it, found and killed at the case's
    end instead of going to init and outliving the run. Afterwards as before: a process
    that was not one (a user's pytest, ``harness.check``) does not collect other tests'
    orphans; a worker that made itself one stays one."""
    if not supported() or is_subreaper() is not False or not become_subreaper(True):
        yield
        return
    try:
        yield
    finally:
        become_subreaper(False)


def _reap(pids: list[int]) -> None:
    """Collect those of ``pids`` that are our exited children (no zombies left behind)."""
    for pid in pids:
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, os.WNOHANG)


def _alive(pid: int, start: str) -> bool:
    """Still running (not a zombie) and still the same process."""
    fields = _stat(pid)
    return fields is not None and fields[0] not in ("Z", "X") and fields[19] == start


#: The descendants the last ``kill_new`` saw, with the process and thread that scanned:
#: what the next case of that thread starts with when nothing else ran (``at_case_start``).
_LAST_SEEN: tuple[int, int, frozenset[Descendant]] | None = None


def _scanner() -> tuple[int, int]:
    return os.getpid(), threading.get_ident()


def at_case_start(*, nothing_ran_since: bool) -> set[Descendant]:
    """The descendants before a case. ``nothing_ran_since``: no thread that a Function
    started is alive, so only the previous case (whose end ``kill_new`` scanned) could have
    started a process, and that scan stands in for a second one."""
    if nothing_ran_since and _LAST_SEEN is not None and _LAST_SEEN[:2] == _scanner():
        return set(_LAST_SEEN[2])
    return descendants()


def kill_new(before: set[Descendant], grace_s: float = 1.0) -> list[int]:
    """Kill the running descendants that were not there ``before``; return their pids (sorted).

    A child that already exited (a zombie its parent did not wait for) is not counted.
    """
    global _LAST_SEEN
    now = descendants()
    _LAST_SEEN = (*_scanner(), frozenset(now))
    new = [(pid, start) for pid, start in now - before if _alive(pid, start)]
    if not new:
        return []
    for pid, _ in new:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    pids = sorted(pid for pid, _ in new)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        _reap(pids)
        if not any(_alive(pid, start) for pid, start in new):
            break
        time.sleep(0.01)
    return pids


def describe(pids: list[int]) -> str:
    shown = ", ".join(map(str, pids[:8])) + (", ..." if len(pids) > 8 else "")
    return (
        f"left {len(pids)} child process(es) running after the case (pid {shown}); they were killed"
    )
