"""Where a migrate target's source lives, and its original and rewritten code as modules.

A file inside a package (a folder with ``__init__.py``) is imported under its dotted name,
so its relative imports work; the rewritten source is loaded from a temporary file as a
sibling module of the same package (``pkg._afdb_migrated_mod``), never from the user's file.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import stat
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import ModuleType

from harness.core.errors import UsageError
from harness.core.locations import describe_exception, relative_file


@dataclass(frozen=True)
class SourceFile:
    """One Python file to migrate: its path, and the module name it is imported under."""

    path: str  # absolute
    module: str  # dotted name (package-aware), or the file's stem
    root: str  # the folder on sys.path that makes ``module`` importable

    @property
    def label(self) -> str:
        """The path as every machine reads it (relative to the working directory,
        ``site-packages/...``), never an absolute path."""
        return relative_file(self.path)


def _module_of_file(path: str) -> SourceFile:
    path = os.path.abspath(path)
    folder = os.path.dirname(path)
    parts = [os.path.splitext(os.path.basename(path))[0]]
    if parts[0] == "__init__":
        parts = []
    while os.path.isfile(os.path.join(folder, "__init__.py")):
        parts.insert(0, os.path.basename(folder))
        folder = os.path.dirname(folder)
    if not parts:
        raise UsageError(f"{relative_file(path)}: a package's __init__ outside any package")
    return SourceFile(path, ".".join(parts), folder)


def _files_under(folder: str) -> list[str]:
    out = []
    for here, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith((".", "__pycache__")))
        out += [os.path.join(here, f) for f in sorted(files) if f.endswith(".py")]
    return out


def resolve(target: str) -> tuple[list[SourceFile], str | None]:
    """The files a target names and the class it names (None: every legacy Function in them).

    ``path/file.py[:Class]``, ``path/to/package_dir``, ``package.module[:Class]``, ``package``.
    """
    spec, _, cls = target.rpartition(":") if ":" in target else (target, "", "")
    if ":" in target and (not spec or not cls):
        raise UsageError(
            f"TARGET {target!r}: give path/file.py:Class, package.module:Class, a file or a package"
        )
    name = cls or None
    if name is not None and not name.isidentifier():
        raise UsageError(f"TARGET {target!r}: {name!r} is not a class name")
    if spec.endswith(".py") or os.sep in spec or "/" in spec or os.path.isdir(spec):
        if os.path.isdir(spec):
            if name:
                raise UsageError(f"TARGET {target!r}: name a file with :Class, not a folder")
            files = _files_under(spec)
            if not files:
                raise UsageError(f"TARGET {target!r}: no Python file under that folder")
            return [_module_of_file(f) for f in files], None
        try:
            mode = os.stat(spec).st_mode
        except OSError:
            raise UsageError(
                f"TARGET {target!r}: no such file; give path/file.py[:Class]"
            ) from None
        if not stat.S_ISREG(mode):
            raise UsageError(f"TARGET {target!r}: not a regular file")
        return [_module_of_file(spec)], name
    return _dotted(spec, target), name


def _dotted(spec: str, target: str) -> list[SourceFile]:
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())  # like `python -m`
    try:
        found = importlib.util.find_spec(spec)
    except (ImportError, ValueError) as e:
        raise UsageError(
            f"TARGET {target!r}: cannot find {spec}: {describe_exception(e)}"
        ) from None
    if found is None or not found.origin or not found.origin.endswith(".py"):
        raise UsageError(
            f"TARGET {target!r}: no Python source for module {spec!r} (looked in the current "
            "directory and sys.path); install it, run from your project root, or give a path"
        )
    root = os.path.abspath(found.origin)
    for _ in spec.split("."):
        root = os.path.dirname(root)
    if found.submodule_search_locations:  # a package: every file in it
        folder = os.path.dirname(os.path.abspath(found.origin))
        root = folder
        for _ in spec.split("."):
            root = os.path.dirname(root)
        out = []
        for f in _files_under(folder):
            rel = os.path.relpath(f, folder)[:-3].replace(os.sep, ".")
            rel = rel.removesuffix(".__init__")
            mod = spec if rel == "__init__" else f"{spec}.{rel}"
            out.append(SourceFile(f, mod, root))
        return out
    return [SourceFile(os.path.abspath(found.origin), spec, root)]


def import_original(src: SourceFile) -> ModuleType:
    """The user's module as the rest of their code imports it; UsageError if it fails."""
    if "." not in src.module:  # a plain file: loaded as afdb check loads it (same module)
        from harness.sources.imports import import_module

        return import_module(src.path, src.label)
    if src.root not in sys.path:
        sys.path.insert(0, src.root)
    existing = sys.modules.get(src.module)
    if (
        existing is not None
        and os.path.abspath(getattr(existing, "__file__", "") or "") == src.path
    ):
        return existing
    try:
        module = importlib.import_module(src.module)
    except KeyboardInterrupt:
        raise
    except BaseException as e:
        raise UsageError(
            f"{src.label}: importing it as {src.module} failed: {describe_exception(e)}; fix the "
            "import (run the module to see the whole error)"
        ) from None
    if os.path.abspath(getattr(module, "__file__", "") or "") != src.path:
        raise UsageError(
            f"{src.label}: `import {src.module}` finds another file "
            f"({relative_file(getattr(module, '__file__', '') or '?')}); run from the folder "
            "that holds it, or give its dotted name"
        )
    return module


_COUNTER = [0]


@contextmanager
def rewritten_module(src: SourceFile, code: bytes) -> Iterator[ModuleType]:
    """The rewritten source imported from a temporary file, as a sibling of the original
    module (so relative imports resolve); removed from ``sys.modules`` afterwards."""
    _COUNTER[0] += 1
    package, _, stem = src.module.rpartition(".")
    name = f"_afdb_migrated_{stem}_{_COUNTER[0]}"
    if package:
        name = f"{package}.{name}"
    with tempfile.TemporaryDirectory(prefix="afdb-migrate-") as tmp:
        path = os.path.join(tmp, f"{stem}.py")
        with open(path, "wb") as f:
            f.write(code)
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise UsageError(f"{src.label}: cannot load the rewritten source")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            try:
                spec.loader.exec_module(module)
            except KeyboardInterrupt:
                raise
            except BaseException as e:
                raise UsageError(
                    f"{src.label}: the rewritten source does not import: {describe_exception(e)}"
                ) from None
            yield module
        finally:
            sys.modules.pop(name, None)
