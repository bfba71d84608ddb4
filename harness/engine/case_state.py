"""Process-wide state a Function can leave changed, beyond what ``isolation.TorchState`` holds.

Autocast, the default device, TorchFunctionMode / TorchDispatchMode stacks, anomaly
detection, the deterministic-algorithms flag, the number of threads and the working
directory: each is captured before a case and put back after it, and the case that
changed it is told so (``restore_global_split``: state that changes what the caller's next
line computes fails the case; the number of threads and the working directory are a note). A thread the Function started may change the same state after
its case ended; ``between_cases`` notices that at the start of the next case, puts
it back and says so without blaming the case about to run.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
import threading
import weakref
from dataclasses import dataclass
from typing import Any

import torch
import torch.utils._device as _device_mod
from torch.overrides import _get_current_function_mode_stack as _function_mode_stack
from torch.utils._python_dispatch import _get_current_dispatch_mode_stack as _dispatch_mode_stack

from harness.core.paths import PACKAGE_DIR

#: Device types whose autocast state is tracked (the ones torch knows on every build).
AUTOCAST_DEVICES = ("cpu", "cuda")


_increment_nesting = torch.autocast_increment_nesting
_decrement_nesting = torch.autocast_decrement_nesting


def _name(mode: Any) -> str:
    return type(mode).__name__


@dataclass(frozen=True)
class GlobalState:
    """One snapshot of the state below; compared by value (modes by identity)."""

    autocast: tuple[tuple[str, bool, torch.dtype], ...]
    autocast_cache: bool
    autocast_nesting: int
    function_modes: tuple[Any, ...]
    dispatch_modes: tuple[Any, ...]
    device_context: Any
    current_device: Any
    anomaly: tuple[bool, bool]
    deterministic: tuple[bool, bool]
    num_threads: int
    cwd: str | None

    @classmethod
    def capture(cls) -> GlobalState:
        # The whole snapshot in one function (it is taken twice per case), with the torch
        # calls bound once at import.
        try:
            cwd: str | None = _getcwd()
        except OSError:  # the directory was removed
            cwd = None
        level = _increment_nesting()
        _decrement_nesting()
        return cls(
            tuple((d, _autocast_enabled(d), _autocast_dtype(d)) for d in AUTOCAST_DEVICES),
            _autocast_cache_enabled(),
            int(level) - 1,
            tuple(_function_mode_stack()),
            tuple(_dispatch_mode_stack()),
            getattr(torch._GLOBAL_DEVICE_CONTEXT, "device_context", None),
            _device_mod.CURRENT_DEVICE,
            (_anomaly_enabled(), _anomaly_nan_enabled()),
            (_deterministic(), _deterministic_warn_only()),
            _get_num_threads(),
            cwd,
        )


_getcwd = os.getcwd
_autocast_enabled = torch.is_autocast_enabled
_autocast_dtype = torch.get_autocast_dtype
_autocast_cache_enabled = torch.is_autocast_cache_enabled
_anomaly_enabled = torch.is_anomaly_enabled
_anomaly_nan_enabled = torch.is_anomaly_check_nan_enabled
_deterministic = torch.are_deterministic_algorithms_enabled
_deterministic_warn_only = torch.is_deterministic_algorithms_warn_only_enabled
_get_num_threads = torch.get_num_threads


def _same_modes(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b))


def _describe_modes(before: tuple[Any, ...], after: tuple[Any, ...], kind: str) -> str:
    from torch.utils._device import DeviceContext

    added = [m for m in after if not any(m is b for b in before)]
    added = [m for m in added if not isinstance(m, DeviceContext)]
    removed = [m for m in before if not any(m is a for a in after)]
    removed = [m for m in removed if not isinstance(m, DeviceContext)]
    parts = []
    if added:
        parts.append(f"left {kind} {', '.join(map(_name, added))} on (entered, never exited)")
    if removed:
        parts.append(f"exited the caller's {kind} {', '.join(map(_name, removed))}")
    return "; ".join(parts)


def differences(before: GlobalState, after: GlobalState) -> list[str]:
    """What changed from ``before`` to ``after``, one phrase each ('left autocast on for cpu')."""
    if (
        before.autocast == after.autocast
        and before.autocast_nesting == after.autocast_nesting
        and before.autocast_cache == after.autocast_cache
        and before.current_device == after.current_device
        and before.device_context is after.device_context
        and (
            not (before.function_modes or after.function_modes)
            or _same_modes(before.function_modes, after.function_modes)
        )
        and (
            not (before.dispatch_modes or after.dispatch_modes)
            or _same_modes(before.dispatch_modes, after.dispatch_modes)
        )
        and before.anomaly == after.anomaly
        and before.deterministic == after.deterministic
        and before.num_threads == after.num_threads
        and before.cwd == after.cwd
    ):
        return []  # the common case, in one frame: nothing changed
    out: list[str] = []
    for (dev, on0, dt0), (_, on1, dt1) in zip(before.autocast, after.autocast):
        if on0 != on1:
            out.append(f"left autocast {'on' if on1 else 'off'} for {dev}")
        elif dt0 != dt1:
            out.append(f"left the autocast dtype for {dev} at {dt1}")
    if before.autocast_nesting != after.autocast_nesting and not any("autocast" in p for p in out):
        out.append("left an autocast region entered")
    if before.autocast_cache != after.autocast_cache:
        out.append(f"left the autocast cache {'enabled' if after.autocast_cache else 'disabled'}")
    if before.current_device != after.current_device or before.device_context is not (
        after.device_context
    ):
        device = getattr(after.device_context, "device", None) or after.current_device or "cpu"
        out.append(f"left the default device at {device}")
    if not _same_modes(before.function_modes, after.function_modes):
        text = _describe_modes(before.function_modes, after.function_modes, "TorchFunctionMode")
        if text:
            out.append(text)
    if not _same_modes(before.dispatch_modes, after.dispatch_modes):
        text = _describe_modes(before.dispatch_modes, after.dispatch_modes, "TorchDispatchMode")
        out.append(text or "changed the TorchDispatchMode stack")
    if before.anomaly != after.anomaly:
        out.append(f"left anomaly detection {'on' if after.anomaly[0] else 'off'}")
    if before.deterministic != after.deterministic:
        on, warn = after.deterministic
        state = ("on (warn only)" if warn else "on") if on else "off"
        out.append(f"left torch.use_deterministic_algorithms {state}")
    if before.num_threads != after.num_threads:
        out.append(f"left the number of threads at {after.num_threads} (was {before.num_threads})")
    if before.cwd != after.cwd:
        out.append(f"left the working directory at {_moved(before.cwd, after.cwd)}")
    return out


def _moved(before: str | None, after: str | None) -> str:
    """Where the working directory went, relative to where it was (no machine's path)."""
    if after is None:
        return "(a removed directory)"
    if before is None:
        return "a new directory (the previous one was removed)"
    try:
        return f"{os.path.relpath(after, before)} (relative to the previous one)"
    except ValueError:  # another drive
        return "another drive"


def put_back(before: GlobalState) -> None:
    """Restore every part of ``before`` that differs now (each part on its own)."""
    after = GlobalState.capture()
    for (dev, on0, dt0), (_, on1, dt1) in zip(before.autocast, after.autocast):
        if on0 != on1:
            torch.set_autocast_enabled(dev, on0)
        if dt0 != dt1:
            torch.set_autocast_dtype(dev, dt0)
    level = after.autocast_nesting
    while level > before.autocast_nesting:
        level = int(torch.autocast_decrement_nesting())
        if level == 0:
            torch.clear_autocast_cache()
    while level < before.autocast_nesting:
        level = int(torch.autocast_increment_nesting())
    if before.autocast_cache != after.autocast_cache:
        torch.set_autocast_cache_enabled(before.autocast_cache)
    if not _same_modes(before.function_modes, after.function_modes) or (
        before.device_context is not after.device_context
        or before.current_device != after.current_device
    ):
        import torch.utils._device as device_mod

        while torch._C._len_torch_function_stack() > 0:
            torch._C._pop_torch_function_stack()
        for mode in before.function_modes:
            torch._C._push_on_torch_function_stack(mode)
        torch._GLOBAL_DEVICE_CONTEXT.device_context = before.device_context
        device_mod.CURRENT_DEVICE = before.current_device
    if not _same_modes(before.dispatch_modes, after.dispatch_modes):
        from torch.utils._python_dispatch import _pop_mode, _push_mode

        while torch._C._len_torch_dispatch_stack() > 0:
            _pop_mode()
        for mode in before.dispatch_modes:
            _push_mode(mode)
    if before.anomaly != after.anomaly:
        torch.set_anomaly_enabled(*before.anomaly)
    if before.deterministic != after.deterministic:
        torch.use_deterministic_algorithms(
            before.deterministic[0], warn_only=before.deterministic[1]
        )
    if before.num_threads != after.num_threads:
        torch.set_num_threads(before.num_threads)
    if before.cwd is not None and before.cwd != after.cwd:
        with contextlib.suppress(OSError):
            os.chdir(before.cwd)


def restore_global(before: GlobalState) -> list[str]:
    """Put the state back to ``before``; return what had changed (empty when nothing did)."""
    changed = differences(before, GlobalState.capture())
    if changed:
        put_back(before)
    return changed


def restore_global_split(before: GlobalState) -> tuple[list[str], list[str]]:
    """Put the state back to ``before``; return what had changed, split into what changes
    the results of the caller's next line (autocast, the default device, torch function and
    dispatch modes, anomaly mode, deterministic algorithms) and what does not (the number of
    threads, the working directory): the case fails for the first, is noted for the second."""
    after = GlobalState.capture()
    changed = differences(before, after)
    if not changed:
        return [], []
    # the same comparison with the harmless parts as they were: what is left changes results
    results_only = dataclasses.replace(after, num_threads=before.num_threads, cwd=before.cwd)
    changing = differences(before, results_only)
    put_back(before)
    return changing, [p for p in changed if p not in changing]


#: The state the last case of this thread ended with (after its restore): torch state, global.
_LAST_END: dict[int, tuple[Any, GlobalState]] = {}

if hasattr(os, "register_at_fork"):
    # A forked child's previous case is none: restoring the parent's last state there would,
    # among other things, set torch back to the parent's thread count, and torch's OpenMP
    # pool used with several threads after a fork waits forever for threads the child lacks.
    os.register_at_fork(after_in_child=_LAST_END.clear)

#: Threads a case left running -> the id of that case.
_THREAD_OWNERS: dict[Any, str] = {}


def between_cases() -> list[str]:
    """Changes since the previous case of this thread ended (a background thread's doing).

    Restores them and returns phrases for a note; the case about to run is not blamed.
    """
    from harness.engine.isolation import restore

    last = _LAST_END.get(threading.get_ident())
    if last is None:
        return []
    return restore(last[0]) + restore_global(last[1])


def last_end() -> tuple[Any, GlobalState] | None:
    """The state the previous case of this thread ended with (None: none ran yet)."""
    return _LAST_END.get(threading.get_ident())


def case_ended(torch_state: Any, state: GlobalState) -> None:
    _LAST_END[threading.get_ident()] = (torch_state, state)


def forget_last_case() -> None:
    """Start a new run: what changed before it is not a background thread's doing."""
    _LAST_END.pop(threading.get_ident(), None)


#: Who started each thread while a case ran (``watch_thread_starts``): "torch" or
#: "harness" when their own code did (torch.compile's inductor starts a pool of compile
#: threads on its first compile), "other" when a thread outside the case started it,
#: else "function".
_STARTED_BY: weakref.WeakKeyDictionary[threading.Thread, str] = weakref.WeakKeyDictionary()
_STDLIB = os.path.dirname(threading.__file__)
_TORCH = os.path.dirname(torch.__file__)
_HARNESS = str(PACKAGE_DIR)


def _starter(frame: Any) -> str:
    """Whose code started a thread: the innermost caller outside the standard library
    (``concurrent.futures`` starts a pool's threads on behalf of its caller)."""
    while frame is not None:
        name = frame.f_code.co_filename
        stdlib = name.startswith(_STDLIB) and not any(
            part in name for part in ("site-packages", "dist-packages")
        )
        if not stdlib:
            if name.startswith(_TORCH):
                return "torch"
            if name.startswith(_HARNESS):
                return "harness"
            return "function"
        frame = frame.f_back
    return "function"


def _started_by(case_thread: threading.Thread, frame: Any) -> str:
    """Who starts a thread during a case: the Function only from the case's own thread or
    from a thread the Function started. A thread some other thread of the process starts
    meanwhile (a test runner's, a logging library's) is "other": never the case's."""
    starter = threading.current_thread()
    if starter is not case_thread and _STARTED_BY.get(starter) != "function":
        return "other"
    return _starter(frame)


class _ThreadStartWatch:
    """The context manager ``watch_thread_starts`` returns."""

    def __enter__(self) -> _ThreadStartWatch:
        original = self.original = threading.Thread.start
        case_thread = threading.current_thread()

        def start(thread: threading.Thread, *args: Any, **kwargs: Any) -> Any:
            with contextlib.suppress(Exception):  # noting never stops a thread starting
                _STARTED_BY[thread] = _started_by(case_thread, sys._getframe(1))
            return original(thread, *args, **kwargs)

        self.wrapper = start
        threading.Thread.start = start  # type: ignore[method-assign,assignment]
        return self

    def __exit__(self, *exc: object) -> None:
        if threading.Thread.start is self.wrapper:
            threading.Thread.start = self.original  # type: ignore[method-assign]


def watch_thread_starts() -> _ThreadStartWatch:
    """During a case, ``threading.Thread.start`` notes whose code starts each thread, so a
    thread torch starts for itself is never taken for one the Function left running."""
    return _ThreadStartWatch()


def note_threads(case_id: str, before: set[Any]) -> list[str]:
    """Record the threads this case's Function started that are still alive; return their
    names. Threads torch or the harness started (``watch_thread_starts``) are not its."""
    new = [
        t
        for t in threading.enumerate()
        if t not in before and t.is_alive() and _STARTED_BY.get(t, "function") == "function"
    ]
    for t in new:
        _THREAD_OWNERS[t] = case_id
    return [t.name for t in new]


def foreign_threads(case_id: str) -> list[str]:
    """Ids of earlier cases whose threads are still running (they may change state any time)."""
    for t in [t for t in _THREAD_OWNERS if not t.is_alive()]:
        del _THREAD_OWNERS[t]
    return sorted({owner for owner in _THREAD_OWNERS.values() if owner != case_id})
