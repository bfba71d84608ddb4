"""Whose exception is it: the Function's (``error``) or the suite's own (``internal``)?

An exception is classified by where it was raised, read from its traceback:

* the innermost frame that is neither torch's nor the standard library's is the
  Function's code (its module, a library it calls, its samples): the Function's, ``error``;
* that frame is the suite's (``harness/``) and it is also the innermost frame of all (the
  suite raised, or a builtin it called did, such as ``bool(tensor)``): ``internal``;
* that frame is the suite's but torch raised below it (inside ``torch.func``, autograd,
  ``Function.apply``): torch refused what the Function did after it returned (a wrong
  out_dims structure, a gradient of the wrong shape), so it is the Function's, ``error``.
"""

from __future__ import annotations

import os
import sysconfig
import traceback
from dataclasses import dataclass
from types import TracebackType

import torch

from harness.core.paths import PACKAGE_DIR

_HARNESS_DIR = str(PACKAGE_DIR)
_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__))
_STDLIB_DIRS = tuple(
    os.path.abspath(p)
    for p in {sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["platstdlib"]}
)


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root + os.sep)


def is_torch(filename: str) -> bool:
    return _under(os.path.abspath(filename), _TORCH_DIR)


def is_stdlib(filename: str) -> bool:
    path = os.path.abspath(filename)
    if "site-packages" in path or "dist-packages" in path:
        return False
    return any(_under(path, d) for d in _STDLIB_DIRS) or filename.startswith("<frozen ")


def is_harness(filename: str) -> bool:
    return _under(os.path.abspath(filename), _HARNESS_DIR)


@dataclass(frozen=True)
class Blame:
    internal: bool
    #: ``harness/checks/compare.py:112`` for an internal error, else "".
    where: str = ""


def classify(exc: BaseException) -> Blame:
    """``internal`` when the suite's own code raised (see the module docstring)."""
    frames = _frames(exc.__traceback__)
    if not frames:
        return Blame(False)
    innermost = frames[-1]
    for fr in reversed(frames):
        if is_torch(fr.filename) or is_stdlib(fr.filename):
            continue
        if not is_harness(fr.filename):
            return Blame(False)
        if fr is innermost:
            rel = os.path.relpath(fr.filename, os.path.dirname(_HARNESS_DIR))
            return Blame(True, f"{rel.replace(os.sep, '/')}:{fr.lineno}")
        return Blame(False)
    return Blame(False)


def _frames(tb: TracebackType | None) -> list[traceback.FrameSummary]:
    return list(traceback.extract_tb(tb))


_INTERNAL_PREFIX = "internal error of the suite at "
_INTERNAL_MIDDLE = " (please report it): "


def internal_message(where: str, description: str) -> str:
    return f"{_INTERNAL_PREFIX}{where}{_INTERNAL_MIDDLE}{description}"


def tripped_over(leak: str, message: str) -> str:
    """The ``error`` message of a case whose Function left state changed (``leak``) and
    whose ``internal`` error (``message``) came from the suite's code running after it."""
    where, description = "", message
    if message.startswith(_INTERNAL_PREFIX) and _INTERNAL_MIDDLE in message:
        where, _, description = message[len(_INTERNAL_PREFIX) :].partition(_INTERNAL_MIDDLE)
    at = f" (at {where})" if where else ""
    return (
        f"{leak}; the suite's code that ran after it failed on that state{at}, which is "
        f"not the suite's bug: {description}"
    )


def blamed(exc: BaseException, where: str) -> tuple[str, str]:
    """(status, message) of a case whose check raised ``exc``: ``internal`` or ``error``."""
    from harness.core.errors import FunctionRaised
    from harness.core.locations import describe_exception

    blame = classify(exc)
    if isinstance(exc, FunctionRaised):  # the sub-check it raised in, then what it raised
        label = exc.label  # "jvp: all inputs (torch.func.jvp)": it names the check itself
        if label.startswith(where):
            where = label
        elif label:
            where = f"{where}, {label}"
    if blame.internal:
        return "internal", internal_message(blame.where, f"{where}: {describe_exception(exc)}")
    return "error", f"{where}: the Function raised {describe_exception(exc)}"


def blamed_reference(exc: BaseException, where: str) -> tuple[str, str]:
    """(status, message) when a reference raised: its cause may still be the suite's own bug."""
    cause = exc.__cause__
    if cause is not None:
        blame = classify(cause)
        if blame.internal:
            return "internal", internal_message(blame.where, f"{where}: {exc}")
    return "error", f"{where}: {exc}"


def apply_note(function: object, exc: BaseException) -> str:
    """Where the Function's own line is when torch's ``Function.apply`` raised after its
    ``forward`` returned (no frame of the traceback is the user's: "An input that has been
    returned as-is as output is being saved for backward"): ``; torch's apply raised it on
    what `Clip.forward` (lib.py:12) returned``, else ""."""
    from harness.core.errors import FunctionRaised
    from harness.core.locations import relative_file

    while isinstance(exc, FunctionRaised):
        exc = exc.original
    frames = _frames(exc.__traceback__)
    if not frames or frames[-1].name != "apply" or not is_torch(frames[-1].filename):
        return ""
    if any(
        not (is_torch(f.filename) or is_stdlib(f.filename) or is_harness(f.filename))
        for f in frames
    ):
        return ""
    forward = getattr(function, "forward", None)
    code = getattr(forward, "__code__", None)
    if code is None or is_torch(code.co_filename):
        return ""
    name = f"{getattr(function, '__name__', 'Function')}.forward"
    where = f"{relative_file(code.co_filename)}:{code.co_firstlineno}"
    return f"; torch's apply raised it on what `{name}` ({where}) returned"
