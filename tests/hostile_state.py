"""Hostile Functions for the hardening tests: exceptions that fight back, global state, forks.

Each is the 2x Function of ``hostile_functions.Double`` with a vmap rule that
misbehaves one way; a case reaching the rule is the only one that does not pass.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from tests.hostile_functions import Double, samples

__all__ = ["samples"]


def _ok(x, in_dims):
    return x * 2, in_dims[0]


class Correct(Double):
    """2x with a correct vmap rule: every case passes."""

    @staticmethod
    def vmap(info, in_dims, x):
        return _ok(x, in_dims)


# --- exceptions --------------------------------------------------------------------------


class StrRaises(Exception):
    def __str__(self):
        raise RuntimeError("no text for you")


class StrHangs(Exception):
    def __str__(self):
        while True:
            time.sleep(0.01)


class RaisesStrRaises(Double):
    @staticmethod
    def vmap(info, in_dims, x):
        raise StrRaises()


class RaisesStrHangs(Double):
    @staticmethod
    def vmap(info, in_dims, x):
        raise StrHangs()


class RaisesKeyboardInterrupt(Double):
    @staticmethod
    def vmap(info, in_dims, x):
        raise KeyboardInterrupt


class RaisesCancelled(Double):
    @staticmethod
    def vmap(info, in_dims, x):
        raise asyncio.CancelledError("task cancelled")


class MixedBaseExceptions(Double):
    """KeyboardInterrupt at in_dims (0,), CancelledError at (1,), an unprintable error at (-1,)."""

    @staticmethod
    def vmap(info, in_dims, x):
        if in_dims == (0,):
            raise KeyboardInterrupt
        if in_dims == (1,):
            raise asyncio.CancelledError("task cancelled")
        raise StrRaises()


class ExitsHuge(Double):
    @staticmethod
    def vmap(info, in_dims, x):
        raise SystemExit("E" * 5_000_000)


class RaisesControl(Double):
    """A message with an ANSI escape, a BEL, a NUL, a lone surrogate and Markdown markup."""

    @staticmethod
    def vmap(info, in_dims, x):
        raise ValueError("\x1b[31mred\x1b[0m\x07\x00 bad \udc80 ![img](http://x.invalid/i.png) *b*")


# --- global state ------------------------------------------------------------------------


class _Mode(TorchFunctionMode):
    """Passes every call through (the base class raises NotImplementedError), so a case it
    is left on still computes right answers."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


class _DMode(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def leaves(action):
    """A Function whose vmap rule does ``action()`` once (first call), then returns 2x."""
    done = []

    class Leaves(Double):
        @staticmethod
        def vmap(info, in_dims, x):
            if not done:
                done.append(True)
                action()
            return _ok(x, in_dims)

    Leaves.__name__ = Leaves.__qualname__ = f"Leaves_{action.__name__}"
    return Leaves


def autocast_on():
    torch.autocast("cpu", dtype=torch.bfloat16).__enter__()


def default_device_meta():
    torch.set_default_device("meta")


def function_mode_on():
    _Mode().__enter__()


def dispatch_mode_on():
    _DMode().__enter__()


def anomaly_on():
    torch.autograd.set_detect_anomaly(True)


def deterministic_on():
    torch.use_deterministic_algorithms(True)


def threads_one():
    torch.set_num_threads(1 if torch.get_num_threads() != 1 else 2)


def chdir_tmp():
    import tempfile

    os.chdir(tempfile.gettempdir())


#: State that changes what the caller's next line computes: the case fails (issue 42).
RESULT_STATE_ACTIONS = (
    (autocast_on, "left autocast on for cpu"),
    (default_device_meta, "left the default device at meta"),
    (function_mode_on, "left TorchFunctionMode _Mode on"),
    (dispatch_mode_on, "left TorchDispatchMode _DMode on"),
    (anomaly_on, "left anomaly detection on"),
    (deterministic_on, "left torch.use_deterministic_algorithms on"),
)
#: State that changes nothing computed: put back, a note.
NOTE_STATE_ACTIONS = (
    (threads_one, "left the number of threads at"),
    (chdir_tmp, "left the working directory at"),
)
STATE_ACTIONS = RESULT_STATE_ACTIONS + NOTE_STATE_ACTIONS


class LateThread(Double):
    """Starts a thread (first call) that changes the default dtype once a third call began.

    Every call takes 0.05 s, so the change lands in a later case or between two, never
    in the case that started the thread.
    """

    started: list[threading.Thread] = []
    calls: list[int] = []

    @staticmethod
    def vmap(info, in_dims, x):
        LateThread.calls.append(1)
        if not LateThread.started:

            def later():
                while len(LateThread.calls) < 3:
                    time.sleep(0.001)
                torch.set_default_dtype(torch.float64)

            t = threading.Thread(target=later, name="late-dtype", daemon=True)
            LateThread.started.append(t)
            t.start()
        time.sleep(0.05)
        return _ok(x, in_dims)


class SlowDouble(Double):
    """2x, but each rule call waits long enough for a background thread to act."""

    @staticmethod
    def vmap(info, in_dims, x):
        time.sleep(0.2)
        return _ok(x, in_dims)


# --- forks -------------------------------------------------------------------------------


class Forks(Double):
    """Forks a child that sleeps 60 s (first call only) and returns at once."""

    forked: list[int] = []

    @staticmethod
    def vmap(info, in_dims, x):
        if not Forks.forked:
            pid = os.fork()
            if pid == 0:
                time.sleep(60)
                os._exit(0)
            Forks.forked.append(pid)
        return _ok(x, in_dims)


class DaemonFork(Double):
    """Double-forks a grandchild that escapes into its own session and sleeps 60 s."""

    @staticmethod
    def vmap(info, in_dims, x):
        if info.batch_size == 3 and in_dims == (0,):
            pid = os.fork()
            if pid == 0:
                os.setsid()
                if os.fork() == 0:
                    time.sleep(60)
                os._exit(0)
            os.waitpid(pid, 0)
        return _ok(x, in_dims)


#: Changes the working directory on its first rule call (for the --no-isolate report test).
LeavesCwd = leaves(chdir_tmp)


class LingeringThread(Double):
    """Starts a non-daemon thread (first call) that sleeps 120 s: at interpreter shutdown
    Python would wait for it, so the finished command would hang for two minutes."""

    started: list[threading.Thread] = []

    @staticmethod
    def vmap(info, in_dims, x):
        if not LingeringThread.started:
            t = threading.Thread(target=time.sleep, args=(120,), name="lingering", daemon=False)
            LingeringThread.started.append(t)
            t.start()
        return _ok(x, in_dims)
