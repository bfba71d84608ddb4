"""Which of the Function's staticmethods was running when a case ran out of time.

A Function that hangs hangs in one staticmethod (a ``backward`` that never returns, a vmap
rule that waits forever), and then in every case that calls it on that sample. When the
limit is reached the watchdog keeps the code objects of the running stacks
(``harness.engine.deadline``); here they are matched against the code of the entry's
Function(s): the innermost frame that is one of their staticmethods names the one that
hung. Nothing is wrapped or patched: a case that does not time out pays nothing.

Which checks call which staticmethod is the catalogue's (``harness.checks.catalogue.
staticmethods_called``); the ledger of ``harness.engine.timeouts`` remembers the hang.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from types import CodeType
from typing import Any

import torch

from autograd_function_db.entry import Entry
from harness.checks.catalogue import STATICMETHODS

_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__))


def _codes_of(fn: Any) -> list[CodeType]:
    """The code of ``fn`` and of what it wraps (``once_differentiable``, functools.wraps)."""
    out: list[CodeType] = []
    seen: set[int] = set()
    while fn is not None and id(fn) not in seen:
        seen.add(id(fn))
        if isinstance(fn, staticmethod):
            fn = fn.__func__
        code = getattr(fn, "__code__", None)
        if isinstance(code, CodeType) and not os.path.abspath(code.co_filename).startswith(
            _TORCH_DIR
        ):
            out.append(code)
        fn = getattr(fn, "__wrapped__", None)
    return out


def _classes(entry: Entry) -> list[type]:
    """The entry's autograd.Function classes: its own and the helpers its rule calls."""
    out = []
    for cls in (entry.function, *entry.helper_functions):
        if isinstance(cls, type) and issubclass(cls, torch.autograd.Function):
            out.append(cls)
    return out


def staticmethod_codes(entry: Entry) -> dict[CodeType, str]:
    """The code objects of the entry's Functions' staticmethods (their own and inherited
    from the user's base classes, never torch's defaults), each with its name."""
    codes: dict[CodeType, str] = {}
    for cls in _classes(entry):
        for base in cls.__mro__:
            if base.__module__.startswith("torch.") or base is object:
                continue
            for name in STATICMETHODS:
                if name in base.__dict__:
                    for code in _codes_of(base.__dict__[name]):
                        codes.setdefault(code, name)
    custom_op = entry.custom_op
    if custom_op is not None:  # register_autograd / register_vmap functions, the op itself
        for attr, name in (
            ("_init_fn", "forward"),
            ("_setup_context_fn", "setup_context"),
            ("_backward_fn", "backward"),
            ("_vmap_fn", "vmap"),
        ):
            for code in _codes_of(getattr(custom_op, attr, None)):
                codes.setdefault(code, name)
    return codes


#: Called by the other staticmethods (a rule or a backward that applies the Function).
_CALLED_BY_OTHERS = frozenset({"forward", "setup_context"})


def running_staticmethod(
    stacks: Sequence[Iterable[CodeType]], codes: dict[CodeType, str]
) -> str | None:
    """The staticmethod running in ``stacks`` (each innermost first; the first stack with
    one wins), or None when none of them was in one of the Function's staticmethods.

    The innermost one, except that a ``forward`` (or ``setup_context``) called from within
    ``backward``, ``jvp`` or ``vmap`` (a backward that applies the Function again, a rule
    that calls ``apply``) names the one that called it: a backward recursing without end
    is caught in its forward half the time, and blaming ``forward`` would stop every check.
    """
    if not codes:
        return None
    return _first(_pick(codes.get(code) for code in stack) for stack in stacks)


def _pick(names: Iterable[str | None]) -> str | None:
    """One stack's staticmethod from its frames' names (innermost first; None: not one)."""
    inner = None
    for name in names:
        if name is None:
            continue
        if name not in _CALLED_BY_OTHERS:
            return name
        inner = inner or name
    return inner


def _first(picks: Iterable[str | None]) -> str | None:
    return next((p for p in picks if p is not None), None)


_DUMP_FRAME = re.compile(r'^\s*File "(.*)", line (\d+) in (\S+)')


def staticmethod_in_dump(faults: str, codes: dict[CodeType, str]) -> str | None:
    """The staticmethod running in a fault handler's dump (a worker its native-hang watchdog
    killed: each thread's frames innermost first, the threads in the dump's order; a frame
    is a staticmethod's when its file, function and line are those of its code), chosen as
    ``running_staticmethod`` chooses, or None."""
    if not codes:
        return None
    by_place: dict[tuple[str, str], list[tuple[CodeType, str]]] = {}
    for code, name in codes.items():
        by_place.setdefault((code.co_filename, code.co_name), []).append((code, name))

    def name_of(m: re.Match[str]) -> str | None:
        for code, name in by_place.get((m.group(1), m.group(3)), []):
            if int(m.group(2)) in {n for _, _, n in code.co_lines() if n is not None}:
                return name
        return None

    threads: list[list[str | None]] = [[]]
    for line in faults.splitlines():
        if "hread 0x" in line:  # "Thread 0x..." / "Current thread 0x...": a new stack
            threads.append([])
            continue
        m = _DUMP_FRAME.match(line)
        if m is not None:
            threads[-1].append(name_of(m))
    return _first(_pick(names) for names in threads)


__all__ = ["running_staticmethod", "staticmethod_codes", "staticmethod_in_dump"]
