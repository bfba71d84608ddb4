"""Keep one case's misbehaviour inside that case: global torch state and time limits.

A Function under test may leave a functorch level on the stack, grad mode
disabled, a forward-AD level open or the default dtype changed. Every case
captures that state before it runs; afterwards whatever changed is reported
and put back, so the next case starts clean.
"""

from __future__ import annotations

import _signal  # signal's functions without the enum wrapping (handlers kept as they are)
import contextlib
import faulthandler
import io
import os
import signal
import sys
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.autograd.forward_ad as forward_ad

from harness.core.errors import CaseTimeout
from harness.engine.deadline import IMPORT_GRACE_S, Deadline, arm, disarm, importing, limit_message


@dataclass(frozen=True)
class TorchState:
    grad_enabled: bool
    default_dtype: torch.dtype
    functorch_depth: int
    forward_ad_level: int
    inference_mode: bool

    @classmethod
    def capture(cls) -> TorchState:
        return cls(
            _grad_enabled(),
            _default_dtype(),
            _functorch_depth(),
            forward_ad._current_level,
            _inference_mode(),
        )


_grad_enabled = torch.is_grad_enabled
_default_dtype = torch.get_default_dtype
_functorch_depth = torch._C._functorch.get_dynamic_layer_stack_depth
_inference_mode = torch.is_inference_mode_enabled


def restore(before: TorchState) -> list[str]:
    """Put torch's global state back to ``before``; return what had leaked, one phrase each."""
    after = TorchState.capture()
    leaked = []
    if after.functorch_depth != before.functorch_depth:
        leaked.append(
            f"left {after.functorch_depth - before.functorch_depth} torch.func transform level(s) "
            "(vmap/grad/jvp) on the stack"
        )
        torch._C._functorch.pop_dynamic_layer_stack_and_undo_to_depth(before.functorch_depth)
    if after.forward_ad_level != before.forward_ad_level:
        leaked.append("left a forward-AD dual level open")
        while forward_ad._current_level > before.forward_ad_level:
            forward_ad.exit_dual_level(level=forward_ad._current_level)
    if after.grad_enabled != before.grad_enabled:
        leaked.append(f"left grad mode {'enabled' if after.grad_enabled else 'disabled'}")
        torch.set_grad_enabled(before.grad_enabled)
    if after.default_dtype != before.default_dtype:
        leaked.append(f"left the default dtype at {after.default_dtype}")
        torch.set_default_dtype(before.default_dtype)
    if after.inference_mode != before.inference_mode:
        leaked.append("left inference mode changed")
        torch._C._set_grad_enabled(before.grad_enabled)
    return leaked


class _TimeLimit:
    """The context manager ``time_limit`` returns (a class: one is entered per case).

    In the main thread the interval timer (SIGALRM) raises ``CaseTimeout``; in every thread
    the watchdog of ``harness.engine.deadline`` ends a case the timer could not (a timer
    the Function cancelled, SIGALRM blocked, the thread blocked in torch's autograd
    engine, a case outside the main thread). ``expired`` says afterwards whether the limit
    was reached, whatever the case's code did with the ``CaseTimeout`` (a harness frame
    that wrapped it, a Function that caught it).
    """

    __slots__ = ("deadline", "deferred", "handler", "leaks", "mask", "previous", "seconds")

    def __init__(self, seconds: float | None) -> None:
        self.seconds = seconds
        self.previous: Any = None
        self.handler: Any = None
        self.deadline: Deadline | None = None
        self.deferred = 0.0
        self.mask: Any = None
        #: State of the signal machinery the case changed (put back), one phrase each.
        self.leaks: list[str] = []

    @property
    def expired(self) -> bool:
        return self.deadline is not None and self.deadline.expired

    def message(self) -> str:
        """The ``timeout`` message: the limit, and what the watchdog had to do."""
        text = limit_message(self.seconds or 0.0)
        how = self.deadline.how_ended() if self.deadline is not None else ""
        return f"{text}; {how}" if how else text

    def __enter__(self) -> _TimeLimit:
        seconds = self.seconds
        if not (seconds is not None and seconds > 0):
            return self
        if hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread():
            self.handler = handler = self._on_alarm  # one bound method: compared by identity
            self.previous = _signal.signal(signal.SIGALRM, handler)
        if _HAS_SIGMASK:
            self.mask = signal.pthread_sigmask(signal.SIG_BLOCK, ())
        self.deadline = arm(seconds, handler=self.handler)
        if self.handler is not None:
            signal.setitimer(signal.ITIMER_REAL, seconds)
        return self

    def _on_alarm(self, signum: int, frame: Any) -> None:
        deadline = self.deadline
        if deadline is None or not deadline.active:
            return  # the case ended: a late signal (one that was blocked) changes nothing
        if importing(frame) and self.deferred < IMPORT_GRACE_S:
            # A module half imported would break every later case: let the import finish.
            self.deferred += 0.05
            signal.setitimer(signal.ITIMER_REAL, 0.05)
            return
        deadline.expired = True
        deadline.keep_stacks(case_first=True)
        deadline.timer_fired = not deadline.kicked
        raise CaseTimeout(limit_message(self.seconds or 0.0))

    def __exit__(self, *exc: object) -> None:
        if self.deadline is None:
            return
        while True:
            try:
                self._close()
                return
            except CaseTimeout:  # raised by the watchdog just before it was told: done again
                continue

    def _close(self) -> None:
        """Disarm everything and put the signal state back (safe to run twice)."""
        if self.handler is not None:
            signal.setitimer(signal.ITIMER_REAL, 0)
        assert self.deadline is not None
        disarm(self.deadline)
        if self.mask is not None:
            mask = signal.pthread_sigmask(signal.SIG_BLOCK, ())
            if mask != self.mask:
                blocked = sorted(signal.Signals(s).name for s in set(mask) - set(self.mask))
                if blocked:
                    self.leaks.append(f"left signals blocked ({', '.join(blocked)})")
                # A signal blocked until now is delivered here, to a handler that ignores it.
                signal.pthread_sigmask(signal.SIG_SETMASK, self.mask)
            self.mask = None
        if self.handler is not None:
            if _signal.getsignal(signal.SIGALRM) is not self.handler:
                self.deadline.replaced = True
                self.leaks.append("replaced the SIGALRM handler")
            _signal.signal(signal.SIGALRM, self.previous)
            self.handler = None


_HAS_SIGMASK = hasattr(signal, "pthread_sigmask")


def time_limit(seconds: float | None) -> _TimeLimit:
    """Raise CaseTimeout in the calling thread after ``seconds`` (see ``_TimeLimit``).

    A hang inside native code that never returns to the interpreter is caught
    one level up, by running cases in worker processes (``-n``).
    """
    return _TimeLimit(seconds)


class UserInterrupt:
    """Whether a real interrupt (SIGINT, or SIGTERM with a handler) arrived during a case.

    A Function may raise ``KeyboardInterrupt`` itself: that is its case's ``error``. The
    user's Ctrl-C must still stop the run; the signal handler installed by
    ``watch_user_interrupt`` marks it, so the runner knows which one it caught.
    """

    def __init__(self) -> None:
        self.seen = False


class _InterruptWatch:
    """The context manager ``watch_user_interrupt`` returns (a class: one is entered per case)."""

    __slots__ = ("flag", "saved")

    def __init__(self) -> None:
        self.flag = UserInterrupt()
        self.saved: list[tuple[int, Any]] = []

    def __enter__(self) -> UserInterrupt:
        flag = self.flag
        if threading.current_thread() is not threading.main_thread():
            return flag

        def wrap(signum: int, previous: Any) -> Any:
            def handler(num: int, frame: Any) -> None:
                flag.seen = True
                if callable(previous):
                    previous(num, frame)
                elif signum == signal.SIGINT and previous != signal.SIG_IGN:
                    raise KeyboardInterrupt

            return handler

        for signum in (signal.SIGINT, signal.SIGTERM):
            previous = _signal.getsignal(signum)
            if signum == signal.SIGTERM and not callable(previous):
                continue  # default SIGTERM ends the process; nothing to tell apart
            if signum == signal.SIGINT and previous == signal.SIG_IGN:
                continue
            try:
                _signal.signal(signum, wrap(signum, previous))
            except (ValueError, OSError):
                continue
            self.saved.append((signum, previous))
        return flag

    def __exit__(self, *exc: object) -> None:
        for num, handler in self.saved:
            try:  # noqa: SIM105 (no context manager per case)
                _signal.signal(num, handler)
            except (ValueError, OSError, TypeError):
                pass


def watch_user_interrupt() -> _InterruptWatch:
    """Mark real SIGINT/SIGTERM deliveries during the block, then let the previous handler act."""
    return _InterruptWatch()


#: Seconds a case may run before it counts as ``timeout`` when nothing else is said.
DEFAULT_TIMEOUT_S = 300.0

#: Characters of a case's printed output kept in its report (half from the start, half the end).
OUTPUT_LIMIT = 4000


class _HeadTail(io.TextIOBase):
    """A text stream that keeps the first and last ``limit // 2`` characters and counts the rest."""

    def __init__(self, limit: int) -> None:
        self.half = max(limit // 2, 1)
        self.head: list[str] = []
        self.head_len = 0
        self.tail = ""
        self.total = 0

    def writable(self) -> bool:
        return True

    def write(self, s: str) -> int:
        s = str(s)
        n = len(s)
        self.total += n
        if self.head_len < self.half:
            take = s[: self.half - self.head_len]
            self.head.append(take)
            self.head_len += len(take)
            s = s[len(take) :]
        if s:
            self.tail = (self.tail + s)[-self.half :]
        return n

    def text(self) -> tuple[str, str, int]:
        return "".join(self.head), self.tail, self.total


@dataclass
class CapturedOutput:
    """What a case printed: its start, its end, and how much there was."""

    head: str = ""
    tail: str = ""
    total: int = 0

    def add(self, head: str, tail: str, total: int) -> None:
        self.head += head
        self.tail += tail
        self.total += total

    def describe(self, limit: int = OUTPUT_LIMIT) -> str:
        """The output for a report: whole when short, else its start and end with a marker."""
        if not self.total:
            return ""
        if self.total <= limit:
            return (self.head + self.tail)[:limit]
        return (
            f"{self.head}\n... [{self.total - len(self.head) - len(self.tail)} of {self.total} "
            f"characters truncated] ...\n{self.tail}"
        )


_LIBC: Any = None


def _flush_c_stdio() -> None:
    global _LIBC
    try:
        if _LIBC is None:
            import ctypes

            _LIBC = ctypes.CDLL(None)
        _LIBC.fflush(None)
    except Exception:
        pass


#: Temporary files for captured output, reused from case to case (creating one was most
#: of a capture's cost), with the process they belong to: a forked worker must not write
#: into its parent's (they would share the file offset), so it makes its own.
_SPARE_FILES: list[tuple[int, Any]] = []


def _output_file() -> Any:
    pid = os.getpid()
    while _SPARE_FILES:
        owner, f = _SPARE_FILES.pop()
        if owner == pid:
            # Emptied when given back; written since only by something that kept a copy of
            # the case's descriptors (one fstat, where seek and truncate are two calls).
            if os.fstat(f.fileno()).st_size:
                f.seek(0)
                f.truncate()
            return f
    return tempfile.TemporaryFile(mode="w+b")  # noqa: SIM115 (kept or closed by the caller)


def _give_back(f: Any, size: int = 1) -> None:
    """Keep ``f`` for the next capture, emptied (``size``: what it holds, 0 when known empty)."""
    if len(_SPARE_FILES) < 4:
        if size:
            f.seek(0)
            f.truncate()
        _SPARE_FILES.append((os.getpid(), f))
    else:
        f.close()


class _OutputCapture:
    """The context manager ``capture_output`` returns (a class: one is entered per case)."""

    __slots__ = ("captured", "fd_file", "limit", "py_out", "saved_fds", "saved_streams")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.captured = CapturedOutput()
        self.py_out = _HeadTail(limit)
        self.fd_file: Any = None
        self.saved_fds: list[tuple[int, int]] = []
        self.saved_streams: tuple[Any, Any] = (sys.stdout, sys.stderr)

    def __enter__(self) -> CapturedOutput:
        self.saved_streams = saved_streams = (sys.stdout, sys.stderr)
        saved_fds = self.saved_fds
        try:
            self.fd_file = fd_file = _output_file()
            for fd in (1, 2):
                saved_fds.append((fd, os.dup(fd)))
            for s in saved_streams:
                try:  # noqa: SIM105 (no context manager per case)
                    s.flush()
                except Exception:
                    pass
            for fd in (1, 2):
                os.dup2(fd_file.fileno(), fd)
        except (OSError, ValueError):
            for fd, copy in saved_fds:
                os.dup2(copy, fd)
                os.close(copy)
            saved_fds.clear()
        sys.stdout = sys.stderr = self.py_out  # type: ignore[assignment]
        return self.captured

    def __exit__(self, *exc: object) -> None:
        sys.stdout, sys.stderr = self.saved_streams
        _flush_c_stdio()
        for fd, copy in self.saved_fds:
            os.dup2(copy, fd)
            os.close(copy)
        fd_file = self.fd_file
        captured = self.captured
        if fd_file is not None:
            size = os.fstat(fd_file.fileno()).st_size
            half = max(self.limit // 2, 1)
            head = tail = ""
            if size:  # most cases print nothing: no seek, no read
                fd_file.seek(0)
                head = fd_file.read(half).decode("utf-8", "replace")
            if size > half:
                fd_file.seek(max(half, size - half))
                tail = fd_file.read().decode("utf-8", "replace")
            _give_back(fd_file, size)
            captured.add(head, tail, size)
        captured.add(*self.py_out.text())


def capture_output(limit: int = OUTPUT_LIMIT) -> _OutputCapture:
    """Capture what the block prints, from Python and from native code (file descriptors 1, 2).

    Only the first and last ``limit // 2`` characters are kept, so a Function that
    prints megabytes costs a temporary file, not memory, and its report stays small.
    """
    return _OutputCapture(limit)


@contextlib.contextmanager
def watchdog(seconds: float | None, file: Any = None) -> Iterator[None]:
    """Kill this process (dumping every thread's stack to ``file``) if the block outlives ``seconds``.

    The last resort for a hang in native code that the SIGALRM limit cannot
    interrupt; only for worker processes, whose death the controller turns into
    a ``timeout`` record.
    """
    if not seconds or seconds <= 0:
        yield
        return
    out: Any = file or sys.__stderr__
    faulthandler.dump_traceback_later(seconds, exit=True, file=out)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


def describe_output(printed: CapturedOutput, status: str, limit: int = OUTPUT_LIMIT) -> str:
    """What a case printed, for its report: kept for a non-passing case, else only a size note."""
    if not printed.total:
        return ""
    if status in ("pass", "unsupported"):
        if printed.total > limit:
            return f"(the case printed {printed.total} characters; not kept for a passing case)"
        return ""
    what = (
        f"printed output ({printed.total} characters, truncated to the first and last {limit // 2})"
        if printed.total > limit
        else "printed output"
    )
    return f"{what}:\n{printed.describe(limit)}"
