"""Recorded references and wrapper subclasses, made live again when a Function is checked.

A recording names objects (``{"ref": ...}``: a module-level function or instance; a
traceable wrapper tensor subclass's class) that only a check imports: reading a recording
imports nothing. ``resolve`` imports a reference only from the packages whose Functions the
recording holds (a subclass's class also from torch), through the one resolver of recorded
names (``harness.recording.refs.resolve``, which also makes the recorded types again), and
refuses, in one line, a name outside them or one that is not the recorded kind of object: a
hostile or stale recording.
"""

from __future__ import annotations

from typing import Any

import torch

from harness.core.errors import UsageError
from harness.recording import refs, rules
from harness.recording.live import Ref, Wrapped, type_name
from harness.recording.refs import RefError


def _load(target: str, allowed: frozenset[str], where: str, what: str) -> Any:
    """``target`` imported by the recording's own resolver (``harness.recording.refs``),
    its refusal one line naming the call."""
    try:
        return refs.resolve(target, allowed, what)
    except RefError as e:
        raise UsageError(f"{where}: {e}; record again") from None


def _rule(check: Any, name: str, packages: frozenset[str], where: str) -> None:
    """One of the recording's name rules (``harness.recording.rules``), as one line."""
    try:
        check(name, packages)
    except RefError as e:
        raise UsageError(f"{where}: {e}") from None


def resolve(value: Any, packages: frozenset[str], where: str) -> Any:
    """``value`` with its ``Ref``s imported again (only modules of ``packages``, the
    recording's own, each an object of the recorded type) and its wrapper subclasses
    rebuilt (classes of torch or of ``packages``). A reference that
    breaks either rule is a hostile or stale recording: UsageError, one line."""
    if isinstance(value, Ref):
        _rule(rules.check_reference, value.target, packages, where)  # as reading applied it
        obj = _load(value.target, packages, where, "the reference")
        if type_name(obj) != value.type:
            raise UsageError(
                f"{where}: {value.target!r} is a `{type_name(obj)}` here, the recording says "
                f"a `{value.type}`; refused (record again)"
            )
        return obj
    if isinstance(value, Wrapped):
        _rule(rules.check_subclass, value.cls, packages, where)
        return _rebuild(value, packages | {"torch"}, where)
    if type(value) in (tuple, list):
        items = [resolve(v, packages, where) for v in value]
        return tuple(items) if type(value) is tuple else items
    if type(value) is dict:
        return {k: resolve(v, packages, where) for k, v in value.items()}
    return value


def _rebuild(value: Wrapped, allowed: frozenset[str], where: str) -> torch.Tensor:
    """The wrapper subclass again: its class imported (a ``torch`` module, or one of the
    recording's packages, checked by ``resolve`` before) and ``__tensor_unflatten__``."""
    cls = _load(value.cls, allowed, where, "the tensor subclass")
    try:
        ok = isinstance(cls, type) and issubclass(cls, torch.Tensor)
        if not ok or not hasattr(cls, "__tensor_unflatten__"):
            raise TypeError("not a traceable wrapper tensor subclass")
        out = cls.__tensor_unflatten__(
            dict(value.inner), value.meta, torch.Size(value.shape), value.strides
        )
    except Exception as e:
        raise UsageError(
            f"{where}: the tensor subclass {value.cls!r} cannot be rebuilt here "
            f"({type(e).__name__}: {str(e)[:200]}); refused"
        ) from None
    if type(out) is not cls or list(out.shape) != list(value.shape):
        raise UsageError(f"{where}: {value.cls!r} rebuilt as something else; refused")
    return out.requires_grad_(True) if value.requires_grad else out
