"""Backends a vendor certifies: a device, a tensor subclass, a torch.compile backend.

A ``Backend`` turns the database's entries into entries that run on it
(``harness.certify.checks.adapt``; the extra check areas are ``extra_checks`` there):

* **device** ``D``: samples are drawn on ``D`` (every sample generator takes a device);
  numpy-backed entries round-trip through the host themselves. Besides every check's own
  reference, ``cross_backend`` compares outputs and first-order gradients on ``D`` with
  the same case on the CPU (not for ``cpu`` itself, which is the reference).
* **subclass** ``module:Class``: floating-point tensor arguments are wrapped in the class
  (the wrapping convention is ``subclass_adapter``'s docstring); every check runs on the
  wrapped inputs, and ``cross_backend`` compares the unwrapped results with plain tensors.
* **compile** ``B``: the checks ``compiled_X`` (``torch.compile(X(f))``) and
  ``X_of_compiled`` (``X(torch.compile(f))``) compare each transform X against the same
  transform in eager (``harness.certify.checks``).

A backend is described by a plain dict (``spec``), so worker processes and
``afdb certify --verify`` rebuild it from a certificate.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.metadata
import inspect
import platform
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from autograd_function_db.entry import Entry, Sample
from harness.core.errors import UsageError

DEVICE = "device"
SUBCLASS = "subclass"
COMPILE = "compile"
KINDS = (DEVICE, SUBCLASS, COMPILE)


class BackendError(UsageError):
    """A backend that cannot be used here (a one-line reason naming what to fix)."""


# --- loading what --import names -------------------------------------------------------------


def import_modules(names: Sequence[str]) -> dict[str, str]:
    """Import each module (a PrivateUse1 device, a compile backend's registration) and
    return ``{module: version of its distribution or ''}`` for the certificate."""
    from harness.sources.imports import import_module

    loaded: dict[str, str] = {}
    for name in names:
        try:
            module = import_module(name, f"--import {name}")
        except UsageError as e:
            raise BackendError(str(e)) from None
        loaded[name] = _module_version(name, module)
    return loaded


def _module_version(name: str, module: Any) -> str:
    version = getattr(module, "__version__", None)
    if isinstance(version, str):
        return version
    top = name.split(".")[0]
    for dist in importlib.metadata.packages_distributions().get(top, []):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return ""


def _resolve(spec: str, what: str) -> Any:
    """``module:attr`` or ``path/to/file.py:attr`` as an object, or BackendError."""
    from harness.sources.imports import load_attr

    try:
        return load_attr(spec, what)
    except BackendError:
        raise
    except UsageError as e:
        raise BackendError(str(e)) from None


# --- the subclass wrapping convention ------------------------------------------------------


@dataclass(frozen=True)
class SubclassAdapter:
    """How a tensor subclass backend wraps a plain tensor and unwraps a result.

    The convention, first match wins:

    * ``wrap``: a module-level ``wrap(t)`` next to the class (an adapter module), else a
      ``Class.from_tensor(t)`` classmethod, else ``Class(t, ...)`` with ``t`` for the first
      required positional parameter and a clone of ``t`` for every further one (so a
      wrapper of several tensors, such as ``TwoTensor(a, b)``, holds equal copies).
    * ``unwrap``: a module-level ``unwrap(x)`` (a plain tensor, or a list of them),
      else the inner tensors of a traceable wrapper subclass (``__tensor_flatten__``: every
      component is compared), else ``x.as_subclass(torch.Tensor)``.

    Only floating-point (and complex) tensor arguments are wrapped; index tensors stay plain.
    """

    cls: type
    spec: str
    wrap_fn: Callable[[torch.Tensor], torch.Tensor]
    unwrap_fn: Callable[[Any], Any] | None
    how: str

    def wrap(self, t: torch.Tensor) -> torch.Tensor:
        return self.wrap_fn(t)

    def components(self, x: Any) -> list[torch.Tensor]:
        """The plain tensors a result stands for (one, or one per inner tensor)."""
        if not isinstance(x, torch.Tensor):
            return [x]
        if not isinstance(x, self.cls):
            return [x]
        if self.unwrap_fn is not None:
            out = self.unwrap_fn(x)
            return list(out) if isinstance(out, (list, tuple)) else [out]
        if hasattr(x, "__tensor_flatten__"):
            names, _ = x.__tensor_flatten__()
            return [getattr(x, n) for n in names]
        return [x.as_subclass(torch.Tensor)]


def subclass_adapter(spec: str) -> SubclassAdapter:
    """The adapter for ``module:Class`` (BackendError if it is not a tensor subclass)."""
    cls = _resolve(spec, "--subclass")
    if not (isinstance(cls, type) and issubclass(cls, torch.Tensor)) or cls is torch.Tensor:
        raise BackendError(
            f"--subclass {spec!r}: {getattr(cls, '__name__', cls)!r} is not a subclass of "
            "torch.Tensor; name the tensor subclass class, e.g. "
            "torch.testing._internal.two_tensor:TwoTensor"
        )
    from harness.sources.imports import import_module, split_spec

    module = import_module(split_spec(spec, "--subclass")[0], "--subclass")
    wrap = getattr(module, "wrap", None)
    unwrap = getattr(module, "unwrap", None)
    if callable(wrap):
        how = f"{module.__name__}.wrap(t)"
        wrap_fn: Callable[[torch.Tensor], torch.Tensor] = wrap
    elif callable(getattr(cls, "from_tensor", None)):
        how = f"{cls.__name__}.from_tensor(t)"
        wrap_fn = cls.from_tensor  # type: ignore[attr-defined]
    else:
        extra = _required_tensor_params(cls)
        how = f"{cls.__name__}(t{', t.clone()' * extra})"

        def wrap_fn(t: torch.Tensor) -> torch.Tensor:
            return cls(t, *(t.clone() for _ in range(extra)))

    adapter = SubclassAdapter(cls, spec, wrap_fn, unwrap if callable(unwrap) else None, how)
    probe = torch.linspace(-1.0, 1.0, 6, dtype=torch.float64).reshape(2, 3)
    try:
        wrapped = adapter.wrap(probe)
    except Exception as e:
        raise BackendError(
            f"--subclass {spec!r}: cannot wrap a tensor with {how} ({type(e).__name__}: {e}); "
            "give the class a from_tensor(t) classmethod or put wrap(t)/unwrap(x) in its module"
        ) from None
    if not isinstance(wrapped, cls):
        raise BackendError(
            f"--subclass {spec!r}: {how} returned {type(wrapped).__name__}, not {cls.__name__}"
        )
    return adapter


def _required_tensor_params(cls: type) -> int:
    """How many required positional parameters the constructor has beyond the first."""
    try:
        sig = inspect.signature(cls)
    except (TypeError, ValueError):
        return 0
    params = [
        p
        for p in sig.parameters.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
    ]
    return max(0, len(params) - 1)


# --- compile backends ----------------------------------------------------------------------


def compile_backends() -> list[str]:
    import torch._dynamo

    return sorted(torch._dynamo.list_backends(exclude_tags=()))


def check_compile_backend(name: str) -> None:
    import torch._dynamo

    if name in compile_backends():
        return
    try:
        torch._dynamo.lookup_backend(name)
    except Exception:
        raise BackendError(
            f"--compile {name!r}: unknown torch.compile backend; known: "
            f"{', '.join(compile_backends())} (or register one in a module given with --import)"
        ) from None


COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


# --- the backend ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Backend:
    kind: str
    name: str
    options: dict[str, Any] = field(default_factory=dict)
    imports: tuple[str, ...] = ()

    def spec(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "name": self.name,
            "options": dict(self.options),
            "imports": list(self.imports),
        }

    @classmethod
    def from_spec(cls, d: dict[str, Any]) -> Backend:
        return cls(d["kind"], d["name"], dict(d.get("options") or {}), tuple(d.get("imports", ())))

    @property
    def device(self) -> str:
        """The device the samples are drawn on."""
        return self.name if self.kind == DEVICE else "cpu"

    @property
    def label(self) -> str:
        extra = f" mode={self.options['mode']}" if self.options.get("mode") else ""
        return f"{self.kind} {self.name}{extra}"

    def validate(self) -> None:
        """Refuse (BackendError) a backend that cannot be used here."""
        if self.kind == DEVICE:
            check_device(self.name)
        elif self.kind == SUBCLASS:
            subclass_adapter(self.name)
        elif self.kind == COMPILE:
            check_compile_backend(self.name)
            mode = self.options.get("mode")
            if mode is not None and mode not in COMPILE_MODES:
                raise BackendError(f"--mode {mode!r}: use one of {', '.join(COMPILE_MODES)}")
        else:
            raise BackendError(f"unknown backend kind {self.kind!r}; use one of {', '.join(KINDS)}")

    def runs_catalogue(self) -> bool:
        """Whether the catalogue's own checks run on this backend (not for compile, whose
        area compares compiled with eager; eager is what the CPU certificate covers)."""
        return self.kind != COMPILE


@dataclass(frozen=True)
class BackendEntry(Entry):
    """An entry as it runs on a backend, with the plain entry it came from."""

    backend: Backend | None = field(default=None, compare=False, hash=False)
    plain: Entry | None = field(default=None, compare=False, hash=False)


def _wrapped_samples(entry: Entry, adapter: SubclassAdapter) -> Callable[..., list[Sample]]:
    def samples(seed: int, dtype: torch.dtype, device: str) -> list[Sample]:
        out = []
        for s in entry.make_samples(seed, dtype, device):
            args = tuple(
                adapter.wrap(a)
                if isinstance(a, torch.Tensor) and (a.is_floating_point() or a.is_complex())
                else a
                for a in s.args
            )
            out.append(Sample(args, s.name))
        return out

    return samples


def adapt_entry(entry: Entry, backend: Backend) -> BackendEntry:
    fields = {f.name: getattr(entry, f.name) for f in dataclasses.fields(Entry)}
    if backend.kind == SUBCLASS:
        fields["samples"] = _wrapped_samples(entry, subclass_adapter(backend.name))
    return BackendEntry(**fields, backend=backend, plain=entry)


# --- what torch cannot do on a backend -----------------------------------------------------

#: Fragments of torch's own error messages that say torch (not the Function) cannot run
#: something on a tensor subclass or a device; an ``error`` case whose message carries
#: one becomes ``unsupported`` with torch's words.
SUBCLASS_LIMITS = (
    ".numpy() is not supported for tensor subclasses",
    "Cannot access data pointer of Tensor",
    "Cannot access storage of",
    "is not supported for tensor subclasses",
    "doesn't support tensor subclasses",
    "does not support tensor subclasses",
)
DEVICE_LIMITS = (
    "Could not run '",
    "is not currently implemented for the",
    "not implemented for '",
    "Cannot convert a MPS Tensor to float64",
)


def torch_limit(backend: Backend, message: str) -> str | None:
    """The fragment of ``message`` naming a limit of torch on ``backend``, if any."""
    limits = SUBCLASS_LIMITS if backend.kind == SUBCLASS else DEVICE_LIMITS
    if backend.kind == COMPILE or (backend.kind == DEVICE and backend.name == "cpu"):
        return None
    return next((frag for frag in limits if frag in message), None)


def reclassify(results: Iterable[Any], backend: Backend) -> int:
    """Turn errors that are torch's limits on this backend into ``unsupported``; the count."""
    from harness.core.results import ERROR, UNSUPPORTED

    changed = 0
    for r in results:
        if r.status != ERROR or not torch_limit(backend, r.message):
            continue
        r.status = UNSUPPORTED
        r.message = f"torch cannot run this on {backend.label}: {r.message}"
        r.repro = ""
        changed += 1
    return changed


# --- devices and the environment -----------------------------------------------------------


def check_device(name: str) -> None:
    try:
        torch.empty(1, device=name) + 1
    except Exception as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise BackendError(
            f"--device {name!r}: not usable here ({first}); for an out-of-tree device "
            "give the module that registers it with --import"
        ) from None


def device_info(name: str) -> dict[str, Any]:
    """Name, capability, driver and runtime versions of a device (what torch can tell)."""
    dev = torch.device(name)
    info: dict[str, Any] = {"device": str(dev), "device_type": dev.type}
    if dev.type == "cpu":
        info["device_name"] = cpu_name()
        return info
    if dev.type == "cuda":
        index = dev.index if dev.index is not None else torch.cuda.current_device()
        props = torch.cuda.get_device_properties(index)
        info["device_name"] = props.name
        info["capability"] = f"{props.major}.{props.minor}"
        info["runtime"] = f"cuda {torch.version.cuda}" if torch.version.cuda else ""
        if getattr(torch.version, "hip", None):
            info["runtime"] = f"hip {torch.version.hip}"
        try:
            info["driver"] = str(torch.cuda.driver_version())  # type: ignore[attr-defined]
        except Exception:
            info["driver"] = ""
        return info
    module = getattr(torch, dev.type, None)
    get_name = getattr(module, "get_device_name", None)
    if callable(get_name):
        try:
            info["device_name"] = str(get_name())
        except Exception:
            info["device_name"] = ""
    return info


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


__all__ = [
    "COMPILE",
    "DEVICE",
    "KINDS",
    "SUBCLASS",
    "Backend",
    "BackendEntry",
    "BackendError",
    "SubclassAdapter",
    "adapt_entry",
    "check_device",
    "compile_backends",
    "cpu_name",
    "device_info",
    "import_modules",
    "reclassify",
    "subclass_adapter",
    "torch_limit",
]
