"""Keep one case's misbehaviour inside that case: global torch state and time limits.

A Function under test may leave a functorch level on the stack, grad mode
disabled, a forward-AD level open or the default dtype changed. Every case
captures that state before it runs; afterwards whatever changed is reported
and put back, so the next case starts clean.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from types import TracebackType

import torch
import torch.autograd.forward_ad as forward_ad


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
            grad_enabled=torch.is_grad_enabled(),
            default_dtype=torch.get_default_dtype(),
            functorch_depth=torch._C._functorch.get_dynamic_layer_stack_depth(),
            forward_ad_level=forward_ad._current_level,
            inference_mode=torch.is_inference_mode_enabled(),
        )


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


class CaseTimeout(Exception):
    """The case ran past its time limit."""


@contextlib.contextmanager
def time_limit(seconds: float | None) -> Iterator[None]:
    """Raise CaseTimeout in the main thread after ``seconds`` (a Python-level hang only).

    A hang inside native code that never returns to the interpreter is caught
    one level up, by running cases in worker processes (``-n``).
    """
    usable = (
        seconds is not None
        and seconds > 0
        and hasattr(signal, "setitimer")
        and threading.current_thread() is threading.main_thread()
    )
    if not usable:
        yield
        return
    assert seconds is not None

    def on_alarm(signum: int, frame: object) -> None:
        raise CaseTimeout(f"the case ran longer than {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


_INTERNAL = ("/torch/", "/harness/", "/contextlib.py", "/functools.py", "\\torch\\", "\\harness\\")


def user_frame(tb: TracebackType | None) -> str:
    """The innermost frame outside torch and the harness: where the user's code raised."""
    frames = traceback.extract_tb(tb)
    for fr in reversed(frames):
        if not any(part in fr.filename for part in _INTERNAL):
            return f"{fr.filename}:{fr.lineno} in {fr.name}"
    if frames:
        fr = frames[-1]
        return f"{fr.filename}:{fr.lineno} in {fr.name}"
    return ""


def describe_exception(exc: BaseException, limit: int = 2000) -> str:
    text = str(exc).strip().splitlines()
    first = " ".join(line.strip() for line in text[:3]) if text else ""
    message = f"{type(exc).__name__}: {first}" if first else type(exc).__name__
    if len(message) > limit:
        message = message[:limit] + f"... [{len(message) - limit} characters truncated]"
    where = user_frame(exc.__traceback__)
    return f"{message} (at {where})" if where else message
