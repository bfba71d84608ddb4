"""The Function classes defined in the packages a user names (``--source mylib``), so a
recording can list those that no call reached (as coverage.py's ``--source`` does).

The packages' modules are imported (those not imported yet: a Function in a module the
program never imported was never called either); a module that fails to import is
passed over, as the program itself never reached it.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import pkgutil
import sys
from types import ModuleType

from harness.core.errors import UsageError


def check_sources(sources: tuple[str, ...]) -> None:
    """Refuse (UsageError) a name that no importable package or module has."""
    for name in sources:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        if spec is None:
            raise UsageError(
                f"--source {name}: no such package or module here; give the import name of "
                "your package (as in `import mylib`)"
            )


def _modules(name: str) -> list[ModuleType]:
    try:
        root = importlib.import_module(name)
    except Exception:
        return []
    found = {name: root}
    for info in pkgutil.walk_packages(getattr(root, "__path__", []) or [], prefix=name + "."):
        try:
            found[info.name] = importlib.import_module(info.name)
        except Exception:
            continue
    for mod_name, module in list(sys.modules.items()):
        if module is not None and (mod_name == name or mod_name.startswith(name + ".")):
            found.setdefault(mod_name, module)
    return [found[k] for k in sorted(found)]


def _classes(owner: object, module: str, prefix: str, out: dict[str, type], depth: int) -> None:
    import torch

    for value in list(vars(owner).values()):
        if not inspect.isclass(value) or value.__module__ != module:
            continue
        qual = value.__qualname__
        if not qual.startswith(prefix):
            continue
        if issubclass(value, torch.autograd.Function) and value is not torch.autograd.Function:
            out.setdefault(f"{module}:{qual}", value)
        if depth < 3:
            _classes(value, module, qual + ".", out, depth + 1)


def functions_in(sources: tuple[str, ...]) -> list[str]:
    """``module:QualName`` of every Function class defined in ``sources``, sorted."""
    out: dict[str, type] = {}
    for name in sources:
        for module in _modules(name):
            _classes(module, module.__name__, "", out, 0)
    return sorted(out)
