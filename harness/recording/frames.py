"""What a stack frame is to the observer, by its code's file: the suite's own checking, torch
or the recording wing (neither counts), the user's program, or the bottom of a re-run of the
tests (``harness.plugin.replay``: the suite's frames below it are not a check).

Looked up once per code object; locations once per (file, line).
"""

from __future__ import annotations

import functools
import os
from types import CodeType

import torch

from harness.core.locations import location

HARNESS = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
EXEMPT = (HARNESS + "cli" + os.sep, HARNESS + "recording" + os.sep)
#: Where a stack's program begins for the observer: the worker that re-runs tests under
#: recording (``harness.plugin.replay``); the suite's frames below it are not a check.
BOTTOM = HARNESS + os.path.join("plugin", "replay.py")
TORCH = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep

SUITE, TORCH_OR_US, USER, BOTTOM_KIND = 0, 1, 2, 3
#: What each code object on a stack is, by its file (looked up once per code object).
KINDS: dict[CodeType, int] = {}


def frame_kind(filename: str) -> int:
    """SUITE, TORCH_OR_US, USER or BOTTOM_KIND for a code object's file."""
    if filename == BOTTOM:
        return BOTTOM_KIND
    if filename.startswith(HARNESS):
        return TORCH_OR_US if filename.startswith(EXEMPT) else SUITE
    return TORCH_OR_US if filename.startswith(TORCH) else USER


@functools.lru_cache(maxsize=4096)
def frame_location(filename: str, lineno: int) -> str:
    """The portable ``file:line`` of a frame (cached: stacks repeat)."""
    return location(filename, lineno)
