"""Type references in a recording: ``module:QualName`` of a class the recorded values name
(an enum, a namedtuple, a frozen dataclass), written only where it resolves back to the
same class, and resolved on reading only inside the recorded packages.

Resolving imports the module (the only code reading a recording runs: a package's own
import, as checking its Functions does anyway) and then looks each part of the qualified
name up in a ``__dict__`` (never ``getattr``: no property or module ``__getattr__`` runs).
The packages a recording may name are those of the Functions it holds, plus ``torch``.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Iterable
from typing import Any

#: Packages whose types any recording may name.
ALWAYS = frozenset({"torch"})


class RefError(Exception):
    """A reference that cannot be written or resolved; the message says why."""


def top_package(module: str) -> str:
    return module.split(".", 1)[0]


def packages_of(targets: Iterable[str]) -> frozenset[str]:
    """The packages a recording of ``targets`` (``module:QualName``) may name types from."""
    out = set(ALWAYS)
    for t in targets:
        module = t.partition(":")[0] if ":" in t else ""
        top = top_package(module) if module else ""
        if top and top != "__main__" and top.isidentifier():
            out.add(top)
    return frozenset(out)


def _lookup(owner: Any, qual: str) -> Any:
    obj = owner
    for part in qual.split("."):
        try:
            namespace = vars(obj)
        except TypeError:
            return None
        obj = namespace.get(part)
        if obj is None:
            return None
    return obj


def ref_of(cls: type, allowed: frozenset[str]) -> str:
    """``module:QualName`` of ``cls`` where it names the same class and lies in ``allowed``
    (RefError, the reason, otherwise)."""
    module = getattr(cls, "__module__", None) or ""
    qual = getattr(cls, "__qualname__", None) or ""
    if "<locals>" in qual or module == "__main__" or not module:
        raise RefError(
            f"`{module}.{qual}` is defined inside a function or in __main__, so a recording "
            "cannot name it"
        )
    top = top_package(module)
    if top not in allowed:
        raise RefError(
            f"`{module}:{qual}` belongs to package {top!r}, not the Function's own; a recording "
            "names types only from the packages whose Functions it holds"
        )
    if _lookup(sys.modules.get(module), qual) is not cls:
        raise RefError(f"`{module}:{qual}` does not lead back to the same class by its name")
    return f"{module}:{qual}"


def split_name(name: Any, what: str, refused: str = "") -> tuple[str, str]:
    """``module, qualname`` of a recorded ``module:QualName`` (identifiers only), else
    ``RefError`` naming ``what`` (``refused``: the words after the reason)."""
    if not isinstance(name, str):
        raise RefError(f"{what} {name!r} is not module:QualName{refused}")
    module, sep, qual = name.partition(":")
    if (
        not sep
        or not all(p.isidentifier() for p in module.split("."))
        or not all(p.isidentifier() for p in qual.split("."))
    ):
        raise RefError(f"{what} {name!r} is not module:QualName{refused}")
    return module, qual


def resolve(ref: str, allowed: frozenset[str], what: str = "type") -> Any:
    """The object ``ref`` names, importing its module only inside ``allowed`` (RefError).

    The one way a recording's names become objects: the types of its data (``kinds``) and,
    when a check makes its live values again, its references and tensor subclasses
    (``harness.sources.references``, ``what`` naming them in the message). Attributes are
    looked up in namespaces (``vars``), so no property or descriptor of the module runs."""
    module, qual = split_name(ref, what)
    top = top_package(module)
    if top not in allowed or top == "__main__":
        shown = ", ".join(sorted(allowed))
        named = "types" if what == "type" else "objects"
        raise RefError(
            f"{what} {ref!r}: module {module!r} is outside the recorded packages ({shown}); a "
            f"recording names {named} only from the packages whose Functions it holds"
        )
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())  # as the recorded Functions are imported (targets.py)
    try:
        mod = importlib.import_module(module)
    except Exception as e:
        raise RefError(
            f"{what} {ref!r}: module {module!r} cannot be imported ({type(e).__name__})"
        ) from None
    obj = _lookup(mod, qual)
    if obj is None:
        raise RefError(f"{what} {ref!r}: {module} has no {qual}")
    return obj
