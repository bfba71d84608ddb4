"""Signals that cannot land between making a resource and owning it.

A Ctrl-C (or the SIGTERM the CLI turns into one) raises ``KeyboardInterrupt`` at whatever
bytecode runs next: between ``mkdtemp`` and the ``try`` that removes the folder, between a
``fork`` and the line that records the worker, or half way through a ``finally`` that
cleans up. ``deferred_signals`` holds SIGINT and SIGTERM for a short block and acts on a
signal that came meanwhile once the block is over, as it would have acted at once::

    folder = None
    try:
        with deferred_signals():
            folder = tempfile.mkdtemp()
        ...
    finally:
        with deferred_signals():
            if folder:
                shutil.rmtree(folder)

The signal's handlers are swapped, not its mask: a signal blocked in this thread alone
would still reach Python through another thread (torch's thread pool), whose delivery
runs the handler in the main thread anyway.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from typing import Any

_HELD = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def deferred_signals() -> Iterator[None]:
    """Hold SIGINT and SIGTERM during the block; act on the first that came, after it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    came: list[tuple[int, Any]] = []

    def hold(signum: int, frame: Any) -> None:
        came.append((signum, frame))

    saved: list[tuple[int, Any]] = []
    try:
        for held in _HELD:
            with contextlib.suppress(ValueError, OSError):
                saved.append((int(held), signal.signal(held, hold)))
        yield
    finally:
        for num, previous in saved:
            with contextlib.suppress(ValueError, OSError, TypeError):
                signal.signal(num, previous)
        if came:
            num, frame = came[0]
            handler = dict(saved).get(num)
            if callable(handler):
                handler(num, frame)  # the CLI's handlers, or Python's KeyboardInterrupt
            elif handler == signal.SIG_DFL:
                os.kill(os.getpid(), num)  # what it would have done: end the process


__all__ = ["deferred_signals"]
