"""Loading a user's Function and samples from ``package.module:attr`` or ``path/to/file.py:attr``.

A target spec travels between processes (workers, reproducers) as plain data:
``TargetSpec`` holds the two strings and the capabilities declared on the
command line, and rebuilds the same ``Entry`` anywhere the user's module imports.
Every loading mistake is a ``UsageError`` with one line saying what is wrong.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import os
import sys
import traceback
from types import ModuleType
from typing import Any

from harness.core.errors import UsageError
from harness.core.locations import location

_FILE_MODULES: dict[str, ModuleType] = {}


def split_spec(spec: str, what: str) -> tuple[str, str]:
    """``"pkg.mod:attr"`` -> ``("pkg.mod", "attr")``; the last ':' splits (Windows drives work)."""
    if ":" not in spec or spec.endswith(":") or spec.startswith(":"):
        raise UsageError(
            f"{what} {spec!r} must look like package.module:Name or path/to/file.py:Name"
        )
    module, _, attr = spec.rpartition(":")
    return module, attr


def is_path(module: str) -> bool:
    return module.endswith(".py") or "/" in module or os.sep in module


def _import_error_line(e: BaseException) -> str:
    frames = traceback.extract_tb(e.__traceback__)
    where = ""
    for fr in reversed(frames):
        if "importlib" not in fr.filename and "/harness/" not in fr.filename:
            where = f" (at {location(fr.filename, fr.lineno)})"
            break
    first = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}: {first}{where}" if first else f"{type(e).__name__}{where}"


def same_spec(named: str, recorded: str) -> bool:
    """Whether a spec the user named is the one a report or certificate recorded: equal,
    or for a file the same file name and attribute (the record holds the path on the
    machine that wrote it; the user's copy may live elsewhere)."""
    if named == recorded:
        return True
    n_mod, _, n_attr = named.rpartition(":")
    r_mod, _, r_attr = recorded.rpartition(":")
    if not (is_path(n_mod) and is_path(r_mod)) or n_attr != r_attr:
        return False
    return os.path.basename(n_mod.replace("\\", "/")) == os.path.basename(r_mod.replace("\\", "/"))


def close_names(word: str, known: list[str] | set[str]) -> list[str]:
    """The close matches of ``word`` among ``known`` (case-insensitive, in ``known``'s
    spelling), best first."""
    by_lower: dict[str, str] = {}
    for k in sorted(known):
        by_lower.setdefault(k.lower(), k)
    close = difflib.get_close_matches(word.lower(), list(by_lower), n=3, cutoff=0.6)
    return [by_lower[c] for c in close]


def did_you_mean(names: list[str]) -> str:
    """``"; did you mean 'x' or 'y'?"``, or ``""`` for no names."""
    return f"; did you mean {' or '.join(repr(n) for n in names)}?" if names else ""


def _close_files(module: str) -> str:
    """The "did you mean" of a file target that does not exist: the Python files beside
    where it was looked for (or, when that folder is missing too, the folders beside it),
    spelled as the user gave the path."""
    given = module.replace("\\", "/")
    folder, _, base = given.rpartition("/")
    where = os.path.abspath(folder or ".")
    try:
        if os.path.isdir(where):
            names = close_names(base, {n for n in os.listdir(where) if n.endswith(".py")})
            return did_you_mean([f"{folder}/{n}" if folder else n for n in names])
        parent, _, missing = folder.rpartition("/")
        around = os.path.abspath(parent or ".")
        dirs = {n for n in os.listdir(around) if os.path.isdir(os.path.join(around, n))}
    except OSError:
        return ""
    names = close_names(missing, dirs)
    return did_you_mean([f"{parent}/{n}/{base}" if parent else f"{n}/{base}" for n in names])


def _close_modules(missing: str) -> str:
    """The "did you mean" of a module that does not exist: the modules of its parent
    package, or the top-level ones importable from the current directory and sys.path."""
    import pkgutil

    parent, _, name = missing.rpartition(".")
    try:
        if parent:
            path = getattr(sys.modules.get(parent), "__path__", None)
            known = {m.name for m in pkgutil.iter_modules(path)} if path is not None else set()
        else:
            known = {m.name for m in pkgutil.iter_modules()}
    except Exception:  # a broken sys.path entry: no hint rather than a traceback
        return ""
    return did_you_mean([f"{parent}.{n}" if parent else n for n in close_names(name, known)])


def file_module_name(path: str) -> str:
    """The name a file target is imported under: its stem, so a reproducer can import it too."""
    return os.path.splitext(os.path.basename(path))[0]


def import_module(module: str, what: str) -> ModuleType:
    if is_path(module):
        path = os.path.abspath(module)
        if not os.path.isfile(path):
            raise UsageError(
                f"{what}: no such file {module!r}{_close_files(module)} (give path/to/file.py:Name)"
            )
        if path in _FILE_MODULES:
            return _FILE_MODULES[path]
        name = file_module_name(path)
        folder = os.path.dirname(path)
        if folder not in sys.path:
            sys.path.insert(0, folder)  # so the file can import its neighbours
        existing = sys.modules.get(name)
        if (
            existing is not None
            and os.path.abspath(getattr(existing, "__file__", "") or "") == path
        ):
            _FILE_MODULES[path] = existing
            return existing
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise UsageError(f"{what}: cannot import {module!r} as a Python file")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        try:
            spec.loader.exec_module(mod)
        except BaseException as e:
            sys.modules.pop(name, None)
            if isinstance(e, KeyboardInterrupt):
                raise
            raise UsageError(
                f"{what}: importing {module} failed: {_import_error_line(e)}; fix the module "
                "(run `python " + module + "` to see the full error)"
            ) from e
        _FILE_MODULES[path] = mod
        return mod
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())  # like `python -m`: the current directory is importable
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name and (module == e.name or module.startswith(e.name + ".")):
            raise UsageError(
                f"{what}: no module named {module!r}{_close_modules(e.name)} (looked in the "
                "current directory and sys.path); run from your project root, install it, or "
                "give path/to/file.py:Name"
            ) from e
        raise UsageError(
            f"{what}: importing {module} failed: {_import_error_line(e)}; install the missing "
            "package or fix the import"
        ) from e
    except BaseException as e:
        if isinstance(e, KeyboardInterrupt):
            raise
        raise UsageError(f"{what}: importing {module} failed: {_import_error_line(e)}") from e


def _library_dirs() -> tuple[str, ...]:
    """Where code that is not the user's lives: the Python installation (standard library and
    site-packages), this suite and its registry."""
    import sysconfig

    from harness.core.paths import PACKAGE_DIR

    dirs = {os.path.abspath(p) for p in sysconfig.get_paths().values() if p}
    dirs |= {os.path.abspath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    dirs.add(os.path.abspath(str(PACKAGE_DIR)))
    import autograd_function_db

    dirs.add(os.path.dirname(os.path.abspath(autograd_function_db.__file__ or "")))
    return tuple(sorted(dirs))


def user_modules(names: set[str]) -> list[str]:
    """Those of the modules ``names`` (in ``sys.modules``) that are the user's own code: a
    source file outside the Python installation, site-packages, this suite and its registry."""
    library = _library_dirs()
    out = []
    for name in sorted(names):
        module = sys.modules.get(name)
        path = getattr(module, "__file__", None) if module is not None else None
        if not path:
            continue
        path = os.path.abspath(path)
        if "site-packages" in path or "dist-packages" in path:
            continue
        if any(path == d or path.startswith(d + os.sep) for d in library):
            continue
        out.append(name)
    return out


def forget_modules(names: set[str] | list[str]) -> None:
    """Drop the modules ``names`` (the user's: ``user_modules``) so the next load of a target
    imports their current source (``afdb check --watch``)."""
    for name in names:
        module = sys.modules.pop(name, None)
        if module is None:
            continue
        for path, cached in list(_FILE_MODULES.items()):
            if cached is module:
                del _FILE_MODULES[path]


def load_attr(spec: str, what: str) -> Any:
    """The object named by ``spec`` (``attr`` may be dotted: ``mod:Class.attr``)."""
    module, attr = split_spec(spec, what)
    obj: Any = import_module(module, what)
    path = []
    for part in attr.split("."):
        path.append(part)
        if not hasattr(obj, part):
            public = sorted(n for n in dir(obj) if not n.startswith("_"))
            hint = ", ".join(public[:12]) + (", ..." if len(public) > 12 else "")
            names = [n for n in dir(obj) if not n.startswith("_") or part.startswith("_")]
            close = did_you_mean(close_names(part, names))
            defines = f"it defines {hint}" if hint else ""
            raise UsageError(
                f"{what}: {module} has no attribute {'.'.join(path)!r}{close}"
                + (f" ({defines})" if close and defines else f"; {defines}" if defines else "")
            )
        obj = getattr(obj, part)
    return obj


#: Command-line capability flags -> Capabilities fields.
