"""A digest of the code that decides a Function's verdict: what the verdict cache keys on.

The digest covers the class's own source and, found by name in its module and followed
transitively, what its methods reference there: module-level functions and classes (their
source), plain data (``PLANTED = frozenset(...)``, ``EPS = 1e-6``: its value, so a setting
read from the environment at import counts), and the same for names imported from other
modules of the Function's own top-level package (``from .utils import helper``,
``utils.helper``), and what the closures of its methods hold (a class a factory makes
around the function it was given). A Function whose source cannot be read (built in a string, a C
extension) has no digest: it is never cached.

What it does not see (docs/pytest-plugin.md, "the verdict cache"): other packages' code
(torch's version is part of the key; a third-party dependency is not), values that are not
plain data (an object's state, a tensor at module level: only its type counts), files the
Function reads, and code reached through attributes of objects rather than names.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import inspect
import linecache
import os
import sys
import textwrap
import types
from typing import Any

#: Plain data whose value is part of the digest (containers of it, recursively).
_PLAIN = (str, bytes, int, float, complex, bool, type(None))
#: How deep plain containers are followed, and how many items of one are read.
_DEPTH = 6
_ITEMS = 10_000


class NoSource(Exception):
    """The code of a Function (or of something it references) cannot be read."""


def _source(obj: Any) -> str:
    if isinstance(obj, type):
        found = _class_source(obj)
        if found is not None:
            return found
    try:
        return textwrap.dedent(inspect.getsource(obj))
    except (OSError, TypeError) as e:
        raise NoSource(f"{getattr(obj, '__qualname__', obj)!r}: {e}") from None


def _class_source(cls: type) -> str | None:
    """A class's source from its module's file parsed once (``inspect.getsource`` parses
    the whole file again for every class); None to let ``inspect`` try."""
    module = sys.modules.get(cls.__module__)
    path = getattr(module, "__file__", None)
    if not path or not path.endswith(".py"):
        return None
    try:
        spans = _class_spans(path, os.stat(path).st_mtime_ns)
    except (OSError, SyntaxError, ValueError):
        return None
    span = spans.get(cls.__qualname__)
    if span is None:
        return None
    lines = linecache.getlines(path)
    return textwrap.dedent("".join(lines[span[0] - 1 : span[1]])) if lines else None


@functools.lru_cache(maxsize=64)
def _class_spans(path: str, _mtime: int) -> dict[str, tuple[int, int]]:
    """Every class of a file by qualified name: (first line with decorators, last line);
    a name defined twice is left out (which one runs is not known here)."""
    with open(path, "rb") as f:
        tree = ast.parse(f.read())
    spans: dict[str, tuple[int, int]] = {}
    twice: set[str] = set()

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                name = f"{prefix}{child.name}"
                first = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                if name in spans:
                    twice.add(name)
                spans[name] = (first, child.end_lineno or child.lineno)
                walk(child, f"{name}.")
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                walk(child, f"{prefix}{child.name}.<locals>.")
            else:
                walk(child, prefix)

    walk(tree, "")
    return {k: v for k, v in spans.items() if k not in twice}


def _names(source: str) -> tuple[set[str], set[tuple[str, str]]]:
    """The bare names a piece of source reads, and its ``name.attr`` pairs."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set(), set()
    names: set[str] = set()
    attrs: set[tuple[str, str]] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            attrs.add((node.value.id, node.attr))
    return names, attrs


def _plain(value: Any, depth: int = 0) -> str | None:
    """A canonical text of plain data (sets sorted), or None when it is not plain data."""
    if isinstance(value, _PLAIN):
        return f"{type(value).__name__}:{value!r}"
    if depth >= _DEPTH:
        return None
    if isinstance(value, (list, tuple)):
        items = [_plain(v, depth + 1) for v in value[:_ITEMS]]
        if any(i is None for i in items):
            return None
        return f"{type(value).__name__}[{','.join(items)}]"  # type: ignore[arg-type]
    if isinstance(value, (set, frozenset)):
        found = [_plain(v, depth + 1) for v in list(value)[:_ITEMS]]
        if any(i is None for i in found):
            return None
        return f"{type(value).__name__}{{{','.join(sorted(found))}}}"  # type: ignore[arg-type]
    if isinstance(value, dict):
        pairs = [(_plain(k, depth + 1), _plain(v, depth + 1)) for k, v in value.items()]
        if any(k is None or v is None for k, v in pairs):
            return None
        return "dict{" + ",".join(sorted(f"{k}={v}" for k, v in pairs)) + "}"
    return None


def _package(module_name: str) -> str:
    return module_name.split(".", 1)[0]


def _functions(obj: Any) -> list[types.FunctionType]:
    """``obj`` itself when a function, else the functions of a class's namespace
    (static and class methods unwrapped)."""
    if isinstance(obj, types.FunctionType):
        return [obj]
    out = []
    for value in vars(obj).values() if isinstance(obj, type) else ():
        fn = getattr(value, "__func__", value)
        if isinstance(fn, types.FunctionType):
            out.append(fn)
    return out


class _Digest:
    """The walk over a Function's code: each object read once, parts in a fixed order."""

    def __init__(self, package: str) -> None:
        self.package = package
        self.parts: dict[str, str] = {}
        self.seen: set[int] = set()

    def own(self, module: str) -> bool:
        """Whether a module is of the Function's own package (its code followed, hashed)."""
        return bool(module) and _package(module) == self.package

    def code(self, obj: Any) -> None:
        """``obj``'s source, then what it references in its module, transitively."""
        if id(obj) in self.seen:
            return
        self.seen.add(id(obj))
        source = _source(obj)
        module = sys.modules.get(getattr(obj, "__module__", "") or "")
        where = f"{getattr(obj, '__module__', '')}:{getattr(obj, '__qualname__', '')}"
        self.parts[f"code {where}"] = source
        for fn in _functions(obj):  # a class made by a factory: what its closures hold
            for var, cell in zip(fn.__code__.co_freevars, fn.__closure__ or (), strict=False):
                try:
                    held = cell.cell_contents
                except ValueError:  # an empty cell
                    continue
                self.value(f"{where}.<closure {var}>", held)
        names, attrs = _names(source)
        if module is None:
            return
        scope = vars(module)
        for name in sorted(names):
            if name in scope:
                self.value(f"{module.__name__}.{name}", scope[name])
        for base, attr in sorted(attrs):
            target = scope.get(base)
            if not isinstance(target, types.ModuleType) or not self.own(target.__name__):
                continue
            if hasattr(target, attr):
                self.value(f"{target.__name__}.{attr}", getattr(target, attr))

    def value(self, label: str, value: Any) -> None:
        """A name a method reads: own code followed, plain data by value, the rest by type."""
        if isinstance(value, types.ModuleType):
            self.parts.setdefault(f"name {label}", f"module {value.__name__}")
            return
        if isinstance(value, (type, types.FunctionType)):
            if self.own(getattr(value, "__module__", "") or ""):
                self.code(value)
            else:  # another package's class or function: by name (its version is not seen)
                self.parts.setdefault(f"name {label}", f"{value.__module__}:{value.__qualname__}")
            return
        try:
            wrapped = getattr(value, "__wrapped__", None)  # functools.wraps, lru_cache
        except Exception:  # noqa: BLE001 - an object whose attributes raise: by its type
            wrapped = None
        if isinstance(wrapped, types.FunctionType) and self.own(wrapped.__module__ or ""):
            self.code(wrapped)
            return
        plain = _plain(value)
        kind = type(value)
        self.parts.setdefault(
            f"name {label}",
            plain if plain is not None else f"object {kind.__module__}.{kind.__qualname__}",
        )


def code_digest(*objects: Any) -> str:
    """The sha256 of ``objects``' code and of what it references in its own package (see the
    module docstring); ``NoSource`` when any of it cannot be read."""
    first = objects[0]
    digest = _Digest(_package(getattr(first, "__module__", "") or ""))
    for obj in objects:
        digest.code(obj)
    h = hashlib.sha256()
    for key in sorted(digest.parts):
        h.update(key.encode("utf-8", "replace") + b"\0")
        h.update(digest.parts[key].encode("utf-8", "replace") + b"\0")
    return h.hexdigest()


def plain_value(value: Any) -> str | None:
    """The canonical text of plain data (what the digest keeps of it), else None."""
    return _plain(value)


__all__ = ["NoSource", "code_digest", "plain_value"]
