"""A Function class made inside a function, rebuilt the way the program made it.

A class whose qualified name is ``factory.<locals>.Name`` cannot be imported again, but its
factory can: where the factory is a module-level function whose every parameter the
class's staticmethods hold in their closures as plain data (numbers, strings, lists,
tuples, dicts of them), calling ``factory(**those)`` makes the same class again. That is
what a reproducer of a case of such a class does (``afdb repro --rebuild``), and only after
the generating process checked, on the live class, that the factory rebuilds a class of the
same name whose closures hold the same values. Anything else (``__main__``, nested
factories, ``*args``, a parameter the closures do not show, a value that is not plain
data) is no way to rebuild: the repro then names the test that reached the class.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import sys
from collections.abc import Mapping
from typing import Any

import torch

from harness.core.errors import UsageError

_STATICMETHODS = ("forward", "setup_context", "backward", "jvp", "vmap")


def _plain(v: Any) -> bool:
    if v is None or type(v) in (bool, int, float, str):
        try:
            ast.literal_eval(repr(v))
        except (ValueError, SyntaxError):
            return False
        return True
    if type(v) in (list, tuple):
        return all(_plain(x) for x in v)
    if type(v) is dict:
        return all(type(k) is str and _plain(x) for k, x in v.items())
    return False


def closure_values(cls: type) -> dict[str, Any]:
    """The free variables the class's staticmethods close over, by name."""
    out: dict[str, Any] = {}
    for name in _STATICMETHODS:
        fn = inspect.getattr_static(cls, name, None)
        fn = getattr(fn, "__func__", fn)
        code, cells = getattr(fn, "__code__", None), getattr(fn, "__closure__", None)
        if code is None or not cells:
            continue
        for var, cell in zip(code.co_freevars, cells):
            try:
                out.setdefault(var, cell.cell_contents)
            except ValueError:  # an empty cell
                continue
    return out


def _resolve(module: str, path: str) -> Any:
    obj: Any = importlib.import_module(module)
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


def factory_of(cls: type) -> tuple[str, dict[str, Any]] | None:
    """``("pkg.mod:make_fn", {"alpha": 2.0})`` for a class made by a module-level factory
    whose parameters its closures show as plain data (checked by rebuilding), else None."""
    outer, sep, inner = cls.__qualname__.partition(".<locals>.")
    module = getattr(cls, "__module__", "")
    if (
        not sep
        or "<locals>" in outer
        or "." in inner
        or module in ("__main__", "")
        or (module not in sys.modules)
    ):
        return None
    try:
        factory = _resolve(module, outer)
        params = inspect.signature(factory).parameters.values()
    except (AttributeError, ImportError, TypeError, ValueError):
        return None
    closed = closure_values(cls)
    kwargs: dict[str, Any] = {}
    for p in params:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD, p.POSITIONAL_ONLY):
            return None
        if p.name not in closed or not _plain(closed[p.name]):
            return None
        kwargs[p.name] = closed[p.name]
    spec = f"{module}:{outer}"
    try:
        again = rebuild(spec, kwargs, cls.__qualname__)
    except UsageError:
        return None
    if closure_values(again) != closed:
        return None
    return spec, kwargs


def _classes_in(made: Any) -> list[Any]:
    """The classes a factory's return value holds: itself, the items of a tuple/list/dict,
    the closures of a returned function."""
    found = [made]
    if isinstance(made, (tuple, list)):
        found += list(made)
    elif isinstance(made, dict):
        found += list(made.values())
    for cell in getattr(made, "__closure__", None) or ():
        try:
            found.append(cell.cell_contents)
        except ValueError:
            continue
    return found


def rebuild(spec: str, kwargs: Mapping[str, Any], qualname: str) -> type:
    """Call the factory ``spec`` (``pkg.mod:make_fn``) with ``kwargs`` (plain data only) and
    return the Function class named ``qualname`` it makes; UsageError if it makes none."""
    module, _, path = spec.partition(":")
    if not _plain(dict(kwargs)):
        raise UsageError(f"--rebuild-args for {spec}: only plain data (numbers, strings, lists)")
    from harness.sources.imports import load_attr

    factory = load_attr(spec, "--rebuild")  # imported as afdb check imports recorded targets
    try:
        made = factory(**kwargs)
    except Exception as e:  # noqa: BLE001 - the user's factory: one line, its exception
        raise UsageError(f"--rebuild {spec}: calling it raised {type(e).__name__}: {e}") from None
    from harness.recording.live import class_suffix

    for c in _classes_in(made):
        if (
            isinstance(c, type)
            and issubclass(c, torch.autograd.Function)
            # a class made per call is recorded under its name and what its closures hold
            and qualname in (c.__qualname__, c.__qualname__ + class_suffix(c))
        ):
            return c
    raise UsageError(f"--rebuild {spec}: it returns no Function class named {qualname}")
