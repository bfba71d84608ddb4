"""Reading the files a user names, and choosing where a report write really goes.

Inputs (reports, expectations files) are opened without blocking, so a FIFO or a
device is refused instead of hanging; bytes that are not UTF-8, JSON nested
deeper than any report and JSON objects that repeat a key (``"target"`` twice: a reader
takes the last, a person sees the first) are refused with one line. Outputs are written beside the
file they replace and renamed over it: through a symlink that means beside its
target (the link stays a link), and a path that exists but is not a regular file
(``/dev/null``, a FIFO, a directory) is refused, never replaced.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from harness.core.errors import UsageError

#: Levels of arrays/objects a report or an expectations file may nest (a report uses ~8).
MAX_DEPTH = 64


class InputError(UsageError):
    """A file given as input that cannot be read as what it should be."""


class DuplicateKey(ValueError):
    """A JSON object that names one key twice; the message is the key."""


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``object_pairs_hook`` for every JSON the suite reads: a repeated key is refused, so
    what a reader takes is what a person reads (``json`` would keep the last silently)."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise DuplicateKey(key)
        out[key] = value
    return out


def loads(text: str | bytes) -> Any:
    """``json.loads`` refusing repeated keys (DuplicateKey) as every input's reader must."""
    return json.loads(text, object_pairs_hook=unique_keys)


def repeated_key(label: str, key: str) -> str:
    """How a refusal of a repeated key reads."""
    shown = key if len(key) <= 80 else key[:77] + "..."
    return (
        f"{label}: an object names the key {shown!r} twice (a reader would take the last, a "
        "person reads the first); not a file this suite writes"
    )


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def read_text(path: str | Path, what: str = "") -> str:
    """The UTF-8 text of a regular file; InputError (one line) for anything else."""
    label = f"{what} {path}" if what else str(path)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as e:
        raise InputError(f"{label}: cannot read ({e.strerror or e})") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise InputError(f"{label}: is {_kind(mode)}, not a file; give the path of a file")
        chunks = []
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
    except OSError as e:
        raise InputError(f"{label}: cannot read ({e.strerror or e})") from None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise InputError(
            f"{label}: not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start}, line "
            f"{line}); give the JSON file itself"
        ) from None


def _too_deep_at(text: str) -> str:
    """'line L, column C' where the nesting first passes MAX_DEPTH (strings skipped)."""
    depth = 0
    in_string = escaped = False
    line, col = 1, 0
    for ch in text:
        col += 1
        if ch == "\n":
            line, col = line + 1, 0
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                return f"line {line}, column {col}"
        elif ch in "]}":
            depth -= 1
    return "somewhere"


def _deep_path(data: Any) -> str | None:
    """The path of the first value nested deeper than MAX_DEPTH, or None (iterative)."""
    stack: list[tuple[Any, str, int]] = [(data, "", 0)]
    while stack:
        value, path, depth = stack.pop()
        if depth > MAX_DEPTH:
            return path if len(path) <= 120 else path[:60] + "..." + path[-57:]
        if isinstance(value, dict):
            stack.extend(
                (v, f"{path}.{k}" if path else str(k), depth + 1) for k, v in value.items()
            )
        elif isinstance(value, list):
            stack.extend((v, f"{path}[{i}]", depth + 1) for i, v in enumerate(value))
    return None


def parse_json(text: str, label: str) -> Any:
    """Parsed JSON, refusing (InputError) syntax errors, repeated keys and nesting deeper
    than MAX_DEPTH."""
    try:
        data = loads(text)
    except json.JSONDecodeError as e:
        raise InputError(
            f"{label}: not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})"
        ) from None
    except DuplicateKey as e:
        raise InputError(repeated_key(label, str(e))) from None
    except RecursionError:
        raise InputError(
            f"{label}: {_too_deep_at(text)}: arrays/objects nested more than {MAX_DEPTH} levels "
            "deep; not a file this suite writes"
        ) from None
    deep = _deep_path(data)
    if deep is not None:
        raise InputError(
            f"{label}: {deep or '(top level)'}: nested more than {MAX_DEPTH} levels deep; not a "
            "file this suite writes"
        )
    return data


def output_target(path: str | Path) -> Path:
    """The file a write to ``path`` replaces: a symlink's final target; refuse non-regular files."""
    real = Path(os.path.realpath(path))
    try:
        mode = os.stat(real).st_mode
    except FileNotFoundError:
        return real
    except OSError as e:
        raise UsageError(f"{path}: cannot write there ({e.strerror or e})") from None
    if not stat.S_ISREG(mode):
        shown = f"{path} (a link to {real})" if str(real) != os.path.abspath(path) else str(path)
        raise UsageError(
            f"{shown}: is {_kind(mode)}; a report replaces only a regular file, give a file path"
        )
    return real
