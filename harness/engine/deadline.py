"""The per-case time limit's backstop: one watchdog thread that ends a case the timer cannot.

``isolation.time_limit`` arms the interval timer (SIGALRM) for a case run in the main
thread; its handler raises ``CaseTimeout``. That fails in four ways, each seen in
real code or a planted Function:

* the Function cancels the timer (``signal.alarm(0)``, ``signal.setitimer(.., 0)``, as any
  code that uses ``signal.alarm`` for itself does) or replaces the SIGALRM handler;
* the Function blocks SIGALRM (``signal.pthread_sigmask``);
* the main thread never returns to the interpreter: it waits inside torch's autograd
  engine while the engine's own threads run the Function's backward (a backward that
  re-enters ``torch.autograd.grad`` without end hands each 60 levels of it to a new
  engine thread; the Python handler, which only the main thread runs, never runs);
* the case runs in a thread other than the main one (``harness.check`` called from a
  thread), where there is no timer at all.

The watchdog (a daemon thread, started on first use in each process, asleep until the
earliest deadline) acts ``grace`` after a deadline that the timer did not enforce:

1. if the timer's handler is still in place, it sends the case's thread SIGALRM
   (``pthread_kill``: the handler runs, and a blocking call is ended);
2. one ``grace`` later (at once when there is no handler to run), and every ``grace``
   after that as long as the case still runs, it raises ``CaseTimeout`` in every thread
   that runs Python called from torch's C++ (the autograd engine's threads), so the
   backward unwinds, its error reaches the waiting main thread and the case ends as
   ``timeout``; when there is none, in the case's thread itself, as its asynchronous
   exception (``PyThreadState_SetAsyncExc``: raised at its next bytecode, whatever the
   timer and the handler are).

One exception at a time: a second raised while the first unwinds would land in torch's
cleanup code (a transform popping its level) and break its state.

When the limit is first reached (the timer's handler or the watchdog), the code objects on
the stacks of the case's thread and of the threads torch's C++ runs Python in are kept
(``Deadline.stacks``, innermost first): ``harness.engine.hangs`` reads from them which of
the Function's staticmethods was running, so the cases that would call it again are not run.

A hang that never runs Python again (a deadlock in native code) cannot be ended inside
the process: worker processes (``afdb check``'s default, ``-n``) end it by killing the
worker. Nothing is raised while the interrupted thread is importing a module (a module
half imported would break every later case), unless the import itself outlives
``IMPORT_GRACE_S``.
"""

from __future__ import annotations

import contextlib
import ctypes
import math
import os
import signal
import sys
import threading
import time
from typing import Any

from harness.core.errors import CaseTimeout

#: Seconds a pending timeout waits for an import in progress in the case's thread.
IMPORT_GRACE_S = 10.0

_IMPORT_FILES = ("<frozen importlib._bootstrap>", "<frozen importlib._bootstrap_external>")
_TORCH_DIR: str | None = None


def grace(seconds: float) -> float:
    """How long past a deadline the watchdog lets the timer act before it steps in."""
    return min(1.0, max(0.1, seconds / 4))


def importing(frame: Any) -> bool:
    """Whether a stack (innermost ``frame``) is inside an import."""
    while frame is not None:
        if frame.f_code.co_filename in _IMPORT_FILES:
            return True
        frame = frame.f_back
    return False


def _torch_dir() -> str:
    global _TORCH_DIR
    if _TORCH_DIR is None:
        import torch

        _TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__))
    return _TORCH_DIR


def _called_from_torch(frame: Any) -> bool:
    """Whether the outermost Python frame of a stack is torch's: a thread that torch's C++
    started runs Python (the autograd engine calling a backward)."""
    root = frame
    while root.f_back is not None:
        root = root.f_back
    return root.f_code.co_filename.startswith(_torch_dir())


def _codes(frame: Any) -> tuple[Any, ...]:
    """The code objects of a stack, innermost first."""
    out = []
    while frame is not None:
        out.append(frame.f_code)
        frame = frame.f_back
    return tuple(out)


def _raise_in(ident: int, raising: bool = True) -> bool:
    """Raise ``CaseTimeout`` in thread ``ident`` at its next bytecode (``raising=False``:
    cancel one set and not yet raised). The class is raised, not an instance (CPython
    takes only a class here): the runner words the message from the limit."""
    value = ctypes.py_object(CaseTimeout) if raising else None
    return bool(ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident), value))


class Deadline:
    """One case's limit, as the watchdog sees it."""

    __slots__ = (
        "active",
        "at",
        "case_thread",
        "engine_threads",
        "expired",
        "handler",
        "ident",
        "injected",
        "kicked",
        "next_action",
        "replaced",
        "seconds",
        "stacks",
        "stage",
        "timer_fired",
        "waited_for_import",
    )

    def __init__(self, seconds: float, *, handler: Any = None) -> None:
        self.seconds = seconds
        self.ident = threading.get_ident()
        self.case_thread = threading.current_thread()
        self.at = time.monotonic() + seconds
        #: The SIGALRM handler of the timer (None: no timer, the watchdog acts at once).
        self.handler = handler
        self.next_action = self.at + (grace(seconds) if handler is not None else 0.0)
        self.active = True
        #: The limit was reached (set by the timer's handler or by the watchdog).
        self.expired = False
        self.injected = False  # an asynchronous exception was set in the case's thread
        self.engine_threads: set[int] = set()  # torch threads it was raised in
        self.stage = 0  # how far the watchdog went: 0 nothing, 1 the case thread, 2 torch's
        self.waited_for_import = 0.0
        #: Set when the case ends: the Function had replaced the timer's SIGALRM handler.
        self.replaced = False
        self.timer_fired = False  # the timer's handler raised the timeout
        self.kicked = False  # the watchdog sent SIGALRM itself
        #: The code objects of the stacks running when the limit was first reached, innermost
        #: first: the case's thread's, then those of threads torch's C++ runs Python in.
        self.stacks: list[tuple[Any, ...]] = []

    def keep_stacks(self, frames: dict[int, Any] | None = None, *, case_first: bool) -> None:
        """Keep the running stacks' code objects (once: the first time the limit is reached).

        ``case_first``: the case's thread's stack first (the timer's handler runs in it, so
        that thread was running Python); else torch's threads' first (the watchdog acts
        while the case's thread may wait in C++ for them)."""
        if self.stacks:
            return
        frames = sys._current_frames() if frames is None else frames
        me = threading.get_ident()
        case = frames.get(self.ident)
        torch_threads = [
            _codes(top)
            for ident, top in frames.items()
            if ident not in (me, self.ident) and _called_from_torch(top)
        ]
        mine = [_codes(case)] if case is not None else []
        self.stacks = mine + torch_threads if case_first else torch_threads + mine

    def how_ended(self) -> str:
        """What the watchdog had to do, for the case's message ("" when the timer did it)."""
        if self.stage == 0:
            return ""
        if self.engine_threads:
            return (
                "the case's thread was blocked in torch's autograd engine while the engine's "
                "threads ran the Function's backward (a backward that re-enters "
                "torch.autograd.grad without end?), so the suite's watchdog raised the timeout "
                "in those threads"
            )
        if self.handler is None:
            return "the case ran outside the main thread, where the suite's watchdog ends it"
        if self.timer_fired:
            return (
                "the case went on after the timer raised the timeout (the Function caught "
                "it?), so the suite's watchdog raised it again"
            )
        if self.replaced:
            return (
                "the Function replaced the SIGALRM handler the limit uses, so the suite's "
                "watchdog ended the case"
            )
        return (
            "the interval timer did not fire: the Function cancelled it (signal.alarm(0), "
            "signal.setitimer(signal.ITIMER_REAL, 0)) or blocked SIGALRM, so the suite's "
            "watchdog ended the case"
        )


class _Watchdog:
    """The process's watchdog thread and the deadlines it watches."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.wake = threading.Condition(self.lock)
        self.deadlines: dict[int, Deadline] = {}
        self.thread: threading.Thread | None = None
        self.pid = 0
        self.sleep_until = math.inf

    def reset_after_fork(self) -> None:
        """In a forked child: the parent's thread did not come along, nor its lock's state."""
        self.lock = threading.Lock()
        self.wake = threading.Condition(self.lock)
        self.deadlines = {}
        self.thread = None
        self.pid = 0
        self.sleep_until = math.inf

    def arm(self, deadline: Deadline) -> None:
        with self.lock:
            self.deadlines[id(deadline)] = deadline
            if self.thread is None or self.pid != os.getpid():
                self.pid = os.getpid()
                self.thread = threading.Thread(
                    target=self._loop, name="afdb-case-watchdog", daemon=True
                )
                self.thread.start()
            elif deadline.next_action < self.sleep_until:
                self.wake.notify()

    def disarm(self, deadline: Deadline) -> None:
        with self.lock:
            deadline.active = False
            self.deadlines.pop(id(deadline), None)
        # Nothing is raised past this point: cancel what was set and not yet raised.
        if deadline.injected:
            _raise_in(deadline.ident, False)
        for ident in deadline.engine_threads:
            _raise_in(ident, False)

    def _loop(self) -> None:
        # Signals go to the main thread (interrupting its blocking calls), never here.
        with contextlib.suppress(AttributeError, OSError, ValueError):
            signal.pthread_sigmask(
                signal.SIG_BLOCK, {signal.SIGALRM, signal.SIGINT, signal.SIGTERM}
            )
        with self.lock:
            while True:
                now = time.monotonic()
                soonest = math.inf
                for d in list(self.deadlines.values()):
                    if now >= d.next_action:
                        self._act(d, now)
                    soonest = min(soonest, d.next_action)
                self.sleep_until = soonest
                self.wake.wait(None if soonest == math.inf else max(soonest - now, 0.001))

    def _act(self, d: Deadline, now: float) -> None:
        """The deadline passed and the case still runs (called with the lock held)."""
        step = grace(d.seconds)
        d.next_action = now + step
        frames = sys._current_frames()
        frame = frames.get(d.ident)
        if frame is not None and importing(frame) and d.waited_for_import < IMPORT_GRACE_S:
            d.waited_for_import += step
            return
        d.expired = True
        d.keep_stacks(frames, case_first=False)
        # One exception at a time: a second one raised while the first unwinds lands in
        # torch's cleanup (a transform's level pop) and breaks its state. So each step
        # waits a grace for the previous one, and the case's thread, while torch's engine
        # threads run Python for it, gets nothing (their error reaches it).
        if d.stage == 0:
            d.stage = 1
            if (
                d.handler is not None
                and not d.timer_fired
                and hasattr(signal, "pthread_kill")
                and signal.getsignal(signal.SIGALRM) is d.handler
            ):
                # The handler is in place: a SIGALRM runs it, and ends a blocking call.
                d.kicked = True
                with contextlib.suppress(OSError, ValueError):
                    signal.pthread_kill(d.ident, signal.SIGALRM)
                return
        d.stage = 2
        me = threading.get_ident()
        engine = [
            ident
            for ident, top in frames.items()
            if ident not in (d.ident, me) and _called_from_torch(top) and not importing(top)
        ]
        for ident in engine:
            if _raise_in(ident):
                d.engine_threads.add(ident)
        if not engine:
            d.injected = _raise_in(d.ident) or d.injected


def limit_message(seconds: float) -> str:
    return (
        f"the case ran longer than its {seconds:g} s limit (raise it with --timeout, or "
        "timeout_s= in the Python API, if the Function is just slow)"
    )


_WATCHDOG = _Watchdog()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_WATCHDOG.reset_after_fork)


def arm(seconds: float, *, handler: Any = None) -> Deadline:
    """Watch the calling thread's case for ``seconds``; ``handler``: the timer's SIGALRM
    handler when the interval timer is armed too (the watchdog then acts only if it fails)."""
    deadline = Deadline(seconds, handler=handler)
    _WATCHDOG.arm(deadline)
    return deadline


def disarm(deadline: Deadline) -> None:
    """The case ended: nothing more is raised for it, and nothing set for it stays pending."""
    _WATCHDOG.disarm(deadline)


__all__ = ["Deadline", "arm", "disarm", "grace", "importing", "limit_message"]
