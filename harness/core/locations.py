"""Source locations in messages, written so that a report means the same on every machine.

A location is ``file:line in function``. The file is never an absolute path of the machine
that ran the case: it is written relative to where it lives, so two runs of the same code
in two virtual environments at different paths give the same text (``afdb diff`` of their
reports says "no change"):

* torch's files from torch's parent folder: ``torch/_functorch/vmap.py``;
* the suite's own (``harness`` and its registry ``autograd_function_db``) from their parent,
  installed or in a checkout alike: ``harness/checks/vmap.py``;
* other installed packages from their ``site-packages`` folder:
  ``site-packages/roma/mappings.py``;
* the standard library from its folder: ``stdlib/contextlib.py``;
* anything under the working directory relative to it: ``examples/rotations.py``;
* anything else as its last two parts: ``.../project/model.py``.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import sys
import sysconfig
import traceback
from types import TracebackType

from harness.core.paths import PACKAGE_DIR
from harness.core.shape_origin import built_at

_STDLIB = os.path.abspath(sysconfig.get_paths()["stdlib"])
#: The suite's packages: where they live differs between a checkout and an installation.
_SUITE_PACKAGES = (str(PACKAGE_DIR), str(PACKAGE_DIR.parent / "autograd_function_db"))


@functools.lru_cache(maxsize=1)
def _torch_root() -> str:
    import torch

    return os.path.dirname(os.path.dirname(os.path.abspath(torch.__file__)))


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root + os.sep)


def relative_file(filename: str) -> str:
    """``filename`` as it reads on every machine (see the module docstring)."""
    if not filename or filename.startswith("<"):
        return filename  # <string>, <frozen importlib._bootstrap>: already portable
    path = os.path.abspath(filename)
    parts = path.split(os.sep)
    torch_root = _torch_root()
    if _under(path, os.path.join(torch_root, "torch")):
        return os.path.relpath(path, torch_root).replace(os.sep, "/")
    for package in _SUITE_PACKAGES:
        if _under(path, package):
            return os.path.relpath(path, os.path.dirname(package)).replace(os.sep, "/")
    for marker in ("site-packages", "dist-packages"):
        if marker in parts:
            i = len(parts) - 1 - parts[::-1].index(marker)
            return "/".join(["site-packages", *parts[i + 1 :]])
    if _under(path, _STDLIB):
        return "stdlib/" + os.path.relpath(path, _STDLIB).replace(os.sep, "/")
    try:
        cwd = os.getcwd()
    except OSError:
        cwd = ""
    if cwd and _under(path, cwd):
        return os.path.relpath(path, cwd).replace(os.sep, "/")
    return ".../" + "/".join(parts[-2:])


def location(filename: str, lineno: int | str | None, name: str = "") -> str:
    where = f"{relative_file(filename)}:{lineno}"
    return f"{where} in {name}" if name else where


_INTERNAL = ("/torch/", "/harness/", "/contextlib.py", "/functools.py", "\\torch\\", "\\harness\\")

#: The staticmethods through which torch enters a Function's own code.
STATICMETHODS = ("vmap", "backward", "jvp", "forward", "setup_context")


def _internal(filename: str) -> bool:
    return any(part in filename for part in _INTERNAL)


def user_frame(tb: TracebackType | None) -> str:
    """The innermost frame outside torch and the harness: where the user's code raised."""
    frames = traceback.extract_tb(tb)
    for fr in reversed(frames):
        if not _internal(fr.filename):
            return location(fr.filename, fr.lineno, fr.name)
    if frames:
        fr = frames[-1]
        return location(fr.filename, fr.lineno, fr.name)
    return ""


def entered_frame(tb: TracebackType | None) -> tuple[str, str] | None:
    """Where the failure entered the user's code: the outermost frame outside torch and the
    harness that is one of a Function's staticmethods (``vmap``, ``backward``, ``jvp``,
    ``forward``, ``setup_context``), else the outermost such frame at all, as
    ``(qualified name, file:line)``; None when no frame is the user's."""
    first: tuple[str, str] | None = None
    while tb is not None:
        code = tb.tb_frame.f_code
        if not _internal(code.co_filename):
            found = (
                str(getattr(code, "co_qualname", code.co_name)),
                location(code.co_filename, tb.tb_lineno),
            )
            if code.co_name in STATICMETHODS:
                return found
            first = first or found
        tb = tb.tb_next
    return first


def where_raised(tb: TracebackType | None) -> str:
    """``at file:line in fn`` (the innermost user frame), preceded by the frame where the
    failure entered the user's code when that is another one:
    ``in Rule.vmap at rules.py:15; raised at site-packages/numpy/...:1610 in einsum``."""
    innermost = user_frame(tb)
    if not innermost:
        return ""
    entered = entered_frame(tb)
    if entered is None:
        return f"at {innermost}"
    name, where = entered
    if innermost.startswith(where + " in "):
        return f"at {innermost}"
    return f"in {name} at {where}; raised at {innermost}"


def describe_exception(exc: BaseException, limit: int = 2000) -> str:
    """``Type: message (at file:line in fn)``; an exception whose ``__str__`` raises still gets one.

    The location names the frame where the failure entered the user's code (their
    ``vmap`` rule, ``backward``...) when the innermost frame is another one (see
    ``where_raised``). A ``FunctionRaised`` is described by the exception it carries.
    A ``__str__`` that hangs is ended by the case's time limit around the caller.
    """
    from harness.core.errors import FunctionRaised
    from harness.core.textsafe import safe_str

    while isinstance(exc, FunctionRaised):
        exc = exc.original
    raw = safe_str(exc)  # its __str__ is the Function's: read once, never unguarded
    text = portable_text(raw).strip().splitlines()
    first = " ".join(line.strip() for line in text[:3]) if text else ""
    message = f"{type(exc).__name__}: {first}" if first else type(exc).__name__
    if len(message) > limit:
        message = message[:limit] + f"... [{len(message) - limit} characters truncated]"
    where = where_raised(exc.__traceback__)
    built = built_at(exc, raw, _internal, location)
    if built:
        where = f"{where}; {built}" if where else built
    return f"{message} ({where})" if where else message


#: Where torch's C++ errors append their native backtrace (``c10::Error``): "Exception raised
#: from f at file:line (most recent call first): frame #0: ... (0x7f.. in /abs/libc10.so)".
_NATIVE_TRAILER = re.compile(r"\s*Exception raised from \S+ at .*", re.DOTALL)
#: An absolute POSIX path in a message (``/home/ci/.venv/lib/python3.11/site-packages/...``).
_ABSOLUTE_PATH = re.compile(r"(?<![\w.~-])/(?:[\w.+~-]+/)+[\w.+~-]+")


def _local_roots() -> tuple[str, ...]:
    """The folders whose absolute paths differ between machines: the interpreter's prefixes
    (a virtual environment), the home and working directories, torch's and the suite's."""
    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.expanduser("~"), _torch_root()}
    roots.update(_SUITE_PACKAGES)
    with contextlib.suppress(OSError):
        roots.add(os.getcwd())
    return tuple(r for r in roots if r and r != os.sep)


def portable_text(text: str) -> str:
    """An exception's text as a report keeps it: without torch's native backtrace (machine
    addresses and absolute library paths: the Python-side location says where it was
    raised) and with each absolute path under a folder of this machine (the virtual
    environment, home, working directory) written as ``relative_file`` writes it."""
    text = _NATIVE_TRAILER.sub("", text)
    roots = _local_roots()

    def local(m: re.Match[str]) -> str:
        path = m.group(0)
        return relative_file(path) if any(_under(path, r) for r in roots) else path

    return _ABSOLUTE_PATH.sub(local, text)


_DUMP_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<name>\S+)')


def user_frame_from_dump(dump: str) -> str:
    """The innermost user frame in a faulthandler dump (most recent call first), else ''."""
    for m in _DUMP_FRAME.finditer(dump):
        if _under(os.path.abspath(m["file"]), _STDLIB) and "site-packages" not in m["file"]:
            continue
        if not any(part in m["file"] for part in _INTERNAL) and not any(
            p in m["file"] for p in ("/_pytest/", "/pluggy/", "/xdist/", "/execnet/")
        ):
            return location(m["file"], m["line"], m["name"])
    return ""


# --- paths a user gave, and locations in messages compared across machines ------------------


def portable_path(path: str) -> str:
    """A path the user gave (a target file, an expectations file, a report) as a report
    records it: relative to the working directory when it lies under it, the suite's own
    files from their package (``harness/known_failures/afdb.json``), anything else as given.

    A relative path stays exactly as typed: it already means the same in every checkout.
    """
    if not path or not os.path.isabs(path):
        return path
    norm = os.path.normpath(path)
    if _under(norm, str(PACKAGE_DIR)):
        return os.path.relpath(norm, PACKAGE_DIR.parent).replace(os.sep, "/")
    try:
        cwd = os.getcwd()
    except OSError:
        return path
    if _under(norm, cwd):
        return os.path.relpath(norm, cwd).replace(os.sep, "/")
    return path


def portable_spec(spec: str | None) -> str | None:
    """``path/to/file.py:Name`` with its file part made portable (module specs unchanged)."""
    if not spec or ":" not in spec:
        return spec
    module, _, attr = spec.rpartition(":")
    if module.endswith(".py") or "/" in module or os.sep in module:
        return f"{portable_path(module)}:{attr}"
    return spec


def portable_argv(argv: list[str]) -> list[str]:
    """A command line as a report records it: each absolute path under the working directory
    (alone, as ``file.py:Name`` or as ``--flag=PATH``) relative to it, the rest as typed."""
    out = []
    for arg in argv:
        flag, eq, value = (
            arg.partition("=") if arg.startswith("--") and "=" in arg else ("", "", arg)
        )
        value = (portable_spec(value) or value) if ":" in value else portable_path(value)
        out.append(f"{flag}{eq}{value}" if eq else value)
    return out


#: A source location in a message: a file name with a code extension, then ``:LINE``
#: (``torch/_functorch/vmap.py:406``, ``/home/ci/.venv/.../vmap.py:406``, ``Interpreter.cpp":12``).
_LOCATION = re.compile(
    r"(?:[A-Za-z]:)?(?:[^\s:()'\"\[\]{},]*[/\\])?"
    r"(?P<file>[\w.\-<>]+\.(?:py|pyx|pyi|c|cc|cpp|cxx|cu|cuh|h|hpp))(?P<quote>\"?):\d+"
)


def normalise_locations(text: str) -> str:
    """``text`` with every source location reduced to its file name (``vmap.py:#``): two
    messages that differ only in where a file lives, or in a line number, read the same."""
    return _LOCATION.sub(lambda m: f"{m['file']}{m['quote']}:#", text)
