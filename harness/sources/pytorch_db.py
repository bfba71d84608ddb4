"""PyTorch's own ``torch.testing._internal.autograd_function_db``, adapted into entries.

Imported at run time (never copied): each OpInfo becomes an Entry whose Function is found
from ``OpInfo.op`` and whose sample generator calls the OpInfo's ``sample_inputs_func``
under a seeded global RNG (``make_tensor`` draws from it), so different seeds give
different data of the same structure. Its samples are not hazard-free at the default batch
sizes: ``harness.sources.batch_sizes`` picks sizes that avoid their dims.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import inspect
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from autograd_function_db.entry import Capabilities, Entry, Sample, Tolerances
from autograd_function_db.registry import Registry
from harness.core.errors import UsageError
from harness.plans.slices import seed_cpu_rng

PYTORCH_MODULE = "torch.testing._internal.autograd_function_db"
#: Prefix of adapted entry names, so they never clash with the suite's own.
PYTORCH_PREFIX = "pytorch."


class SourceError(UsageError):
    """An unknown source, or one that cannot be loaded (a one-line reason)."""


def _function_of(op: Callable[..., Any], module: Any) -> type | None:
    """The autograd.Function behind an OpInfo's ``op``: ``F.apply`` or a lambda calling it."""
    owner = getattr(op, "__self__", None)
    if isinstance(owner, type) and issubclass(owner, torch.autograd.Function):
        return owner
    code = getattr(op, "__code__", None)
    if code is None:
        return None
    for name in code.co_names:
        candidate = getattr(module, name, None)
        if isinstance(candidate, type) and issubclass(candidate, torch.autograd.Function):
            return candidate
    return None


def _plain(x: Any) -> Any:
    return x.detach() if isinstance(x, torch.Tensor) else x


def _seeded_samples(opinfo: Any) -> tuple[Callable[[int, torch.dtype, str], list[Sample]], dict]:
    """A seeded sample generator over ``opinfo.sample_inputs_func`` and the kwargs its
    samples share (bound into the op, since entries take positional arguments only)."""

    def draw(seed: int, dtype: torch.dtype, device: str) -> list[tuple[tuple, dict]]:
        with torch.random.fork_rng(devices=[]):
            seed_cpu_rng(int(seed) & 0x7FFF_FFFF_FFFF_FFFF)
            raw = list(opinfo.sample_inputs_func(opinfo, device, dtype, False))
        return [
            ((_plain(s.input), *(_plain(a) for a in s.args)), dict(s.kwargs or {})) for s in raw
        ]

    probe = draw(0, torch.float64, "cpu")
    kwargs = probe[0][1] if probe else {}
    for _, kw in probe:
        if kw.keys() != kwargs.keys() or any(repr(kw[k]) != repr(kwargs[k]) for k in kw):
            raise SourceError(
                f"{opinfo.name}: samples with different keyword arguments cannot be adapted "
                "(entries take positional arguments only)"
            )

    def samples(seed: int, dtype: torch.dtype, device: str) -> list[Sample]:
        return [Sample(args, f"opinfo{i}") for i, (args, _) in enumerate(draw(seed, dtype, device))]

    return samples, kwargs


def adapt_opinfo(opinfo: Any, module: Any) -> Entry:
    """One OpInfo of PyTorch's autograd_function_db as an Entry of this suite."""
    function = _function_of(opinfo.op, module)
    if function is None:
        raise SourceError(f"{opinfo.name}: cannot find the autograd.Function behind its op")
    samples, kwargs = _seeded_samples(opinfo)
    op = opinfo.op
    if kwargs:
        base_op = op

        def op(*args: Any) -> Any:
            return base_op(*args, **kwargs)

    caps = Capabilities.from_function(function)
    # The OpInfo's own flags record what PyTorch knows does not work (numpy inside jvp,
    # for example), so they narrow what the class alone would claim.
    caps = dataclasses.replace(
        caps,
        jvp=caps.jvp and bool(getattr(opinfo, "supports_forward_ad", False)),
        double_backward=caps.double_backward and bool(getattr(opinfo, "supports_gradgrad", True)),
    )
    # Non-differentiable outputs: those with a non-floating dtype (indices), read off one call.
    probe = samples(0, torch.float64, "cpu")
    nondiff: tuple[int, ...] = ()
    if probe:
        with torch.no_grad():
            out = op(*(a.clone() if isinstance(a, torch.Tensor) else a for a in probe[0].args))
        outs = out if isinstance(out, (tuple, list)) else (out,)
        nondiff = tuple(
            k
            for k, o in enumerate(outs)
            if isinstance(o, torch.Tensor) and not (o.is_floating_point() or o.is_complex())
        )
    caps = dataclasses.replace(caps, nondiff_outputs=nondiff)
    # Integer tensor arguments (an index and its inverse) are only valid together: batch
    # them as one group, so each slice gets a matching pair.
    index_args = tuple(
        i
        for i, a in enumerate(probe[0].args if probe else ())
        if isinstance(a, torch.Tensor) and not (a.is_floating_point() or a.is_complex())
    )
    linked = (index_args,) if len(index_args) > 1 else ()
    short = opinfo.name.removesuffix("AutogradFunction")
    own_doc = function.__dict__.get("__doc__")
    doc = inspect.cleandoc(own_doc) if own_doc else ""
    return Entry(
        name=PYTORCH_PREFIX + short,
        function=function,
        samples=samples,
        op=op,
        caps=caps,
        tolerances=Tolerances(),
        linked_args=linked,
        tags=frozenset({"source:pytorch", f"pytorch-opinfo:{opinfo.name}"}),
        description=(
            f"PyTorch's autograd_function_db OpInfo {opinfo.name!r} "
            f"(Function {function.__name__})" + (f": {doc.splitlines()[0]}" if doc else "")
        ),
    )


#: The one module PyTorch's autograd_function_db imports that is costly: importing
#: ``opinfo.core`` pulls in ``common_device_type``, hence ``torch._inductor`` and
#: ``torch._dynamo`` (about 1.3 s, as long as ``import torch`` itself), for two classes.
OPINFO_CORE = "torch.testing._internal.opinfo.core"


class _StandInOpInfo:
    """What the adapter reads of an ``OpInfo``, with ``OpInfo``'s own defaults for the
    flags it reads; every other keyword is kept as an attribute."""

    def __init__(self, name: str, **fields: Any) -> None:
        self.name = name
        self.supports_forward_ad = False
        self.supports_gradgrad = True
        self.supports_fwgrad_bwgrad = False
        for key, value in fields.items():
            setattr(self, key, value)


class _StandInSampleInput:
    """``SampleInput``'s constructor, as far as the adapter reads it (input, args, kwargs)."""

    def __init__(
        self,
        input: Any,
        *var_args: Any,
        args: Any = None,
        kwargs: Any = None,
        **var_kwargs: Any,
    ) -> None:
        for key in ("output_process_fn_grad", "broadcasts_input", "name"):
            var_kwargs.pop(key, None)
        if (var_args or var_kwargs) and (args is not None or kwargs is not None):
            raise ValueError("SampleInput: give args/kwargs either positionally or by keyword")
        self.input = input
        self.args = tuple(var_args) if var_args else tuple(args or ())
        self.kwargs = dict(var_kwargs) if var_kwargs else dict(kwargs or {})


def _module_with_stand_ins() -> types.ModuleType | None:
    """PyTorch's autograd_function_db, executed from its own file with small stand-ins for
    ``OpInfo`` and ``SampleInput`` instead of importing ``opinfo.core`` (see OPINFO_CORE).

    The module is not registered in ``sys.modules``, so a later ``import`` of it (by
    PyTorch's own tests in the same process) still gets the real one. None when the file
    cannot be found or needs more of ``opinfo.core`` than the stand-ins give: the caller
    then imports it the ordinary way. ``tests/test_sources.py`` proves the entries built
    either way are the same (names, capabilities, samples).
    """
    if OPINFO_CORE in sys.modules or PYTORCH_MODULE in sys.modules:
        return None  # already paid for: the real import is free
    try:
        spec = importlib.util.find_spec(PYTORCH_MODULE)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None
    try:
        code = compile(Path(spec.origin).read_bytes(), spec.origin, "exec")
    except (OSError, SyntaxError, ValueError):
        return None
    stand_in = types.ModuleType(OPINFO_CORE)
    stand_in.OpInfo = _StandInOpInfo  # type: ignore[attr-defined]
    stand_in.SampleInput = _StandInSampleInput  # type: ignore[attr-defined]
    module = types.ModuleType(PYTORCH_MODULE)
    module.__file__ = spec.origin
    module.__package__ = PYTORCH_MODULE.rpartition(".")[0]
    sys.modules[OPINFO_CORE] = stand_in
    try:
        exec(code, module.__dict__)
    except Exception:  # it needs more than the stand-ins: import it for real
        return None
    finally:
        if sys.modules.get(OPINFO_CORE) is stand_in:
            del sys.modules[OPINFO_CORE]
    return module


def pytorch_registry(*, stand_ins: bool = True) -> Registry:
    """PyTorch's autograd_function_db as a Registry (not validated at the default batch
    sizes: its samples use dim 3; see ``options_for_source``). ``stand_ins=False`` imports
    the module the ordinary way (the test of ``_module_with_stand_ins`` compares the two)."""
    try:
        module = _module_with_stand_ins() if stand_ins else None
        if module is None:
            module = importlib.import_module(PYTORCH_MODULE)
    except ModuleNotFoundError as e:  # a dependency of torch's testing internals
        missing = e.name or str(e)
        if missing.split(".")[0] == "torch":  # an old or stripped torch build
            raise SourceError(f"cannot import {PYTORCH_MODULE}: {e}") from None
        raise SourceError(
            f"cannot import {PYTORCH_MODULE}: it needs the module {missing!r}, which is not "
            f"installed; install it (pip install {missing.split('.')[0]}) or reinstall the "
            "suite with its dependencies"
        ) from None
    except Exception as e:  # an old or stripped torch build
        raise SourceError(f"cannot import {PYTORCH_MODULE}: {type(e).__name__}: {e}") from None
    return Registry((adapt_opinfo(o, module) for o in module.autograd_function_db), validate=False)
