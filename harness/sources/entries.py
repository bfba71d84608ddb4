"""A user's Function as an ``Entry``: capabilities read from the class, samples, batch sizes.

User samples are rarely hazard-free (3x3 rotations, pairs of points), so unless the caller
fixes batch sizes, ``choose_batch_sizes`` picks sizes that no sample dimension uses and says
so in the result. Used by the Python API, the CLI's targets and the pytest plugin alike.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from autograd_function_db.entry import (
    GRADIENT_CUSTOM,
    GRADIENT_DERIVATIVE,
    VMAP_NONE,
    VMAP_RULE,
    Capabilities,
    Entry,
    Tolerances,
)
from harness.core.errors import UsageError
from harness.sources.user_samples import user_sample_fn


def custom_op_of(target: Any) -> Any | None:
    """The torch.library custom op ``target`` is, or None.

    A ``CustomOpDef`` (``@torch.library.custom_op``) is returned as it is; an ``OpOverload`` or
    ``OpOverloadPacket`` (``torch.ops.ns.name``, ``.default``) gives its ``CustomOpDef`` when
    ``torch.library.custom_op`` made it, else the overload itself (an op defined with
    ``torch.library.Library``: it runs and opcheck tests it, but it has no rule to intercept).
    """
    from torch._library.custom_ops import OPDEFS, CustomOpDef

    if isinstance(target, CustomOpDef):
        return target
    if isinstance(target, torch._ops.OpOverloadPacket):
        names = target.overloads()
        if "default" not in names and len(names) != 1:
            raise UsageError(
                f"{target!r} has overloads {', '.join(names)}: name one "
                f"(torch.ops.{target._qualified_op_name.replace('::', '.')}.OVERLOAD)"
            )
        target = getattr(target, "default" if "default" in names else names[0])
    if isinstance(target, torch._ops.OpOverload):
        return OPDEFS.get(target._schema.name, target)
    return None


def op_qualname(op: Any) -> str:
    """``ns::name`` of a custom op (a CustomOpDef or an OpOverload)."""
    name = getattr(op, "_qualname", None)
    if name is None:
        schema = getattr(op, "_schema", None)
        name = schema.name if schema is not None else str(op)
    return str(name)


def function_class(target: Any) -> type:
    """The autograd.Function subclass behind ``target`` (the class, or a callable carrying one)."""
    if isinstance(target, type) and issubclass(target, torch.autograd.Function):
        return target
    for attr in ("autograd_function", "function", "__self__"):
        cls = getattr(target, attr, None)
        if isinstance(cls, type) and issubclass(cls, torch.autograd.Function):
            return cls
    raise UsageError(
        f"{target!r} is not a torch.autograd.Function subclass or a torch.library custom op; "
        "pass the class, a callable with an `autograd_function` attribute naming it, or a "
        "custom op (a @torch.library.custom_op function, or torch.ops.NS.NAME[.OVERLOAD])"
    )


def samples_attribute(target: Any) -> Any:
    """The ``samples`` a Function class or callable (or a custom op) carries, else a
    module-level ``samples`` beside it (a callable or a list), or None."""
    import sys

    samples = getattr(target, "samples", None)
    if samples is None and custom_op_of(target) is None:
        samples = getattr(function_class(target), "samples", None)
    if samples is not None:
        return samples
    beside = getattr(sys.modules.get(getattr(target, "__module__", "") or ""), "samples", None)
    return beside if callable(beside) or isinstance(beside, (list, tuple)) else None


def samples_places(target: Any) -> str:
    """Where ``samples_attribute`` looked, for the message when it found nothing."""
    name = getattr(target, "__qualname__", None) or getattr(target, "__name__", None) or "TARGET"
    module = getattr(target, "__module__", None)
    beside = f" and a module-level `samples` in {module}" if module else ""
    return f"looked for {name}.samples{beside}"


def _custom_op_capabilities(op: Any, overrides: dict[str, Any]) -> Capabilities:
    """Capabilities of a custom op, read from its registrations (a CustomOpDef's
    register_autograd / register_vmap, or kernels for the Autograd and FuncTorchBatched keys):
    no forward-mode AD (torch.library gives custom ops reverse mode only)."""
    from torch._library.custom_ops import CustomOpDef

    name = op_qualname(op)
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    if isinstance(op, CustomOpDef):
        backward = op._backward_fn is not None
        vmap = VMAP_RULE if getattr(op, "_vmap_fn", None) is not None else VMAP_NONE
    else:
        backward = bool(has(name, "Autograd"))
        vmap = VMAP_RULE if has(name, "FuncTorchBatched") else VMAP_NONE
    caps = Capabilities(
        vmap=vmap,
        jvp=False,
        backward=backward,
        double_backward=backward,
        setup_context=True,
    )
    if "double_backward" in tuple(overrides.get("claims", ())):
        overrides = {**overrides, "double_backward": True}
    if overrides.get("double_backward") is True:
        overrides = {**overrides, "double_backward_declared": True}
    return dataclasses.replace(caps, **overrides) if overrides else caps


def is_custom_op(target: Any) -> bool:
    """A ``torch.library`` custom op (a CustomOpDef, or an OpOverload / OpOverloadPacket)."""
    try:
        return custom_op_of(target) is not None
    except UsageError:  # a packet of several overloads: a custom op, though not one to run
        return True


def make_entry(
    function: Any,
    samples: Any,
    *,
    name: str | None = None,
    gradient: str = GRADIENT_DERIVATIVE,
    tolerances: Tolerances | None = None,
    **capabilities: Any,
) -> Entry:
    """A user's Function (an autograd.Function, a callable naming one, or a
    ``torch.library`` custom op) and samples as an Entry."""
    if gradient not in (GRADIENT_DERIVATIVE, GRADIENT_CUSTOM):
        raise UsageError(f"gradient must be 'derivative' or 'custom', got {gradient!r}")
    capabilities = dict(capabilities)
    dtypes = declared_dtypes(capabilities.pop("dtypes", None))
    cap_fields = {f.name for f in dataclasses.fields(Capabilities)}
    unknown = set(capabilities) - cap_fields
    if unknown:
        known = ", ".join(sorted({*cap_fields, "dtypes"}))
        raise UsageError(f"unknown capability {sorted(unknown)[0]!r}; known: {known}")
    custom = custom_op_of(function)
    if custom is not None:
        caps = _custom_op_capabilities(custom, capabilities)
        return Entry(
            name=name or op_qualname(custom).replace("::", "."),
            function=custom,
            samples=user_sample_fn(samples, function),  # type: ignore[arg-type]
            op=function,
            caps=caps,
            tolerances=tolerances or Tolerances(),
            gradient=gradient,
            tags=frozenset(("custom-op",)),
            custom_op=custom,
            description=f"torch.library custom op {op_qualname(custom)}",
            dtypes=dtypes,
        )
    cls = function_class(function)
    caps = Capabilities.from_function(cls, **capabilities)
    op = None if function is cls else function
    return Entry(
        name=name or cls.__name__,
        function=cls,
        samples=user_sample_fn(samples, function if op is not None else cls.apply),  # type: ignore[attr-defined]
        op=op,
        caps=caps,
        tolerances=tolerances or Tolerances(),
        gradient=gradient,
        # A user's Function declares no dtypes unless it says so (dtypes=, --dtypes): it runs
        # at its samples' own, or the one the user asks for (dtype=, --dtype), and float64
        # samples get a float32 leg (harness.checks.dtype_leg) unless float32 is left out.
        dtypes=dtypes,
    )


def declared_dtypes(value: Any) -> tuple[torch.dtype, ...]:
    """The ``dtypes=`` capability as torch dtypes: names (``"float64"``) or dtypes; () for none."""
    from harness.core.options import DTYPES

    if value is None:
        return ()
    items = [value] if isinstance(value, (str, torch.dtype)) else list(value)
    out = []
    for item in items:
        if isinstance(item, torch.dtype) and item in DTYPES.values():
            out.append(item)
        elif isinstance(item, str) and item.strip().replace("torch.", "") in DTYPES:
            out.append(DTYPES[item.strip().replace("torch.", "")])
        else:
            raise UsageError(f"dtypes: unknown dtype {item!r}; use names among {', '.join(DTYPES)}")
    if not out:
        raise UsageError(f"dtypes: name at least one dtype among {', '.join(DTYPES)}")
    return tuple(dict.fromkeys(out))
