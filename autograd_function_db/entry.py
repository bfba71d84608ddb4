"""The entry model: one Function under test, its samples and what it claims.

Everything here is a frozen dataclass so an entry can be shared between
processes, hashed and compared; the registry and the harness never mutate one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

VMAP_RULE = "rule"
VMAP_GENERATED = "generated"
VMAP_NONE = "none"

GRADIENT_DERIVATIVE = "derivative"
GRADIENT_CUSTOM = "custom"


@dataclass(frozen=True)
class Sample:
    """One set of positional arguments for a Function (a tuple of tensors and plain values)."""

    args: tuple[Any, ...]
    name: str = ""

    def tensor_positions(self) -> tuple[int, ...]:
        return tuple(i for i, a in enumerate(self.args) if isinstance(a, torch.Tensor))


#: A sample generator: ``fn(seed, dtype, device) -> iterable of Sample``.
#: Called with different seeds, it must return samples of the same structure
#: (shapes, non-tensor values) with different data, so the harness can build
#: distinct, valid batch slices (index tensors included) from separate calls.
SampleFn = Callable[[int, torch.dtype, str], Iterable[Sample]]


@dataclass(frozen=True)
class Tolerances:
    """Per-dtype (rtol, atol); entries override what they need."""

    float32: tuple[float, float] = (1.3e-5, 1e-5)
    float64: tuple[float, float] = (1e-7, 1e-7)
    float16: tuple[float, float] = (1e-3, 1e-3)
    bfloat16: tuple[float, float] = (1.6e-2, 1e-2)
    complex64: tuple[float, float] = (1.3e-5, 1e-5)
    complex128: tuple[float, float] = (1e-7, 1e-7)
    #: Base relative step of the finite-difference reference (None: chosen per dtype).
    fd_step: float | None = None

    def for_dtype(self, dtype: torch.dtype) -> tuple[float, float]:
        name = str(dtype).replace("torch.", "")
        return getattr(self, name, self.float32)


def _overrides(cls: type, name: str) -> bool:
    return getattr(cls, name, None) is not getattr(torch.autograd.Function, name, None)


def is_once_differentiable(fn: Any) -> bool:
    """True when ``fn`` was wrapped by ``torch.autograd.function.once_differentiable``."""
    code = getattr(fn, "__code__", None)
    return bool(
        code is not None
        and getattr(fn, "__wrapped__", None) is not None
        and code.co_name == "wrapper"
        and code.co_filename.replace("\\", "/").endswith("torch/autograd/function.py")
    )


@dataclass(frozen=True)
class Capabilities:
    """What a Function claims to support. Checks a Function does not claim are `unsupported`."""

    vmap: str = VMAP_RULE  # "rule" | "generated" | "none"
    jvp: bool = False
    backward: bool = True
    double_backward: bool = True
    setup_context: bool = True
    inplace_args: tuple[int, ...] = ()
    nondiff_outputs: tuple[int, ...] = ()
    #: Argument positions never differentiated (float parameter tables, masks stored as
    #: floats): they get no tangent or cotangent and no gradient is demanded of them.
    nondiff_args: tuple[int, ...] = ()
    randomness: bool = False
    once_differentiable: bool = False
    #: ``gradient=custom`` with a jvp that is deliberately the true derivative while the
    #: backward follows the custom rule (declared ``jvp=true-derivative``): forward and
    #: reverse mode then differ by design, and the jvp is checked against finite differences.
    jvp_true_derivative: bool = False
    #: ``double_backward=True`` was given explicitly: the Function claims double backward, so
    #: torch refusing it (an ``out=`` op in backward) is its ``error``, not ``unsupported``.
    double_backward_declared: bool = False
    #: Recorded Functions only: the sets of inputs the program differentiated together, one
    #: per recorded call (``harness.checks.recorded_use``).
    grad_patterns: tuple[tuple[int, ...], ...] = ()
    #: Transforms declared as claimed (``claims=vmap,jvp,double_backward``) that the class
    #: cannot show: torch refusing one of them is the Function's ``error``, not
    #: ``unsupported`` (``harness.engine.refusals``).
    claims: tuple[str, ...] = ()

    def describe(self) -> list[str]:
        """Short phrases for what the Function claims (``afdb list``, ``afdb check``)."""
        vmap = {VMAP_RULE: "vmap rule", VMAP_GENERATED: "generated vmap rule"}
        parts = [vmap.get(self.vmap, "no vmap")]
        parts += [n for n, on in (("jvp", self.jvp), ("backward", self.backward)) if on]
        if self.backward and not self.double_backward:
            parts.append("no double backward")
        if not self.setup_context:
            parts.append("legacy forward(ctx, ...)")
        if self.inplace_args:
            parts.append(f"in-place args {list(self.inplace_args)}")
        if self.nondiff_outputs:
            parts.append(f"non-differentiable outputs {list(self.nondiff_outputs)}")
        if self.nondiff_args:
            parts.append(f"non-differentiated args {list(self.nondiff_args)}")
        if self.randomness:
            parts.append("random (honours info.randomness)")
        return parts

    @classmethod
    def from_function(cls, function: type, **overrides: Any) -> Capabilities:
        """Read the capabilities a Function class declares by what it overrides."""
        if getattr(function, "generate_vmap_rule", False):
            vmap = VMAP_GENERATED
        elif _overrides(function, "vmap"):
            vmap = VMAP_RULE
        else:
            vmap = VMAP_NONE
        once = is_once_differentiable(getattr(function, "backward", None))
        caps = cls(
            vmap=vmap,
            jvp=_overrides(function, "jvp") or _overrides(function, "forward_ad"),
            backward=_overrides(function, "backward") or _overrides(function, "vjp"),
            double_backward=not once,
            setup_context=_overrides(function, "setup_context"),
            once_differentiable=once,
        )
        if "double_backward" in tuple(overrides.get("claims", ())):
            overrides = {**overrides, "double_backward": True}
        if overrides.get("double_backward") is True:
            overrides = {**overrides, "double_backward_declared": True}
        return dataclasses.replace(caps, **overrides) if overrides else caps


@dataclass(frozen=True)
class Entry:
    """One Function under test.

    ``op`` is what the harness calls (defaults to ``function.apply``); ``function``
    is the autograd.Function class whose vmap rule the contract check intercepts.
    ``linked_args`` lists groups of argument positions that are only valid together
    (an index and its inverse): they are batched or unbatched as a group.
    """

    name: str
    function: type
    samples: SampleFn
    op: Callable[..., Any] | None = None
    caps: Capabilities = field(default_factory=Capabilities)
    tolerances: Tolerances = field(default_factory=Tolerances)
    tags: frozenset[str] = frozenset()
    linked_args: tuple[tuple[int, ...], ...] = ()
    gradient: str = GRADIENT_DERIVATIVE
    dtypes: tuple[torch.dtype, ...] = (torch.float32, torch.float64)
    description: str = ""
    #: Functions the vmap rule itself calls (contract interception covers them too).
    helper_functions: tuple[type, ...] = ()
    #: A ``torch.library.custom_op`` (CustomOpDef) when the entry is a custom op rather than
    #: an autograd.Function: ``function`` and ``op`` then hold the same object, the vmap
    #: rule is the one given to ``register_vmap`` (or none: torch falls back to a loop).
    custom_op: Any = None

    @property
    def function_name(self) -> str:
        """The Function's class name, or the custom op's qualified name (``afdb::numpy_sin``)."""
        if self.custom_op is not None:
            return str(getattr(self.custom_op, "_qualname", self.name))
        return getattr(self.function, "__name__", self.name)

    @property
    def call(self) -> Callable[..., Any]:
        return self.op if self.op is not None else self.function.apply  # type: ignore[attr-defined]

    def make_samples(
        self, seed: int, dtype: torch.dtype | None = torch.float64, device: str = "cpu"
    ) -> list[Sample]:
        """The samples for ``seed``. ``dtype=None``: the samples' own dtypes, i.e. the first
        declared dtype for a generator that needs one, or as they come from a generator
        marked ``own_dtypes`` (a user's samples, which keep theirs)."""
        if dtype is None and not getattr(self.samples, "own_dtypes", False):
            dtype = self.dtypes[0] if self.dtypes else torch.float64
        out = []
        for s in self.samples(seed, dtype, device):  # type: ignore[arg-type]
            out.append(s if isinstance(s, Sample) else Sample(tuple(s)))
        return out


def entry(
    name: str,
    function: type,
    samples: SampleFn,
    *,
    tags: Sequence[str] = (),
    op: Callable[..., Any] | None = None,
    **caps_and_fields: Any,
) -> Entry:
    """Build an Entry with capabilities read from the class, overridable by keyword.

    Keywords that name a Capabilities field override that field; the others are
    Entry fields (tolerances, linked_args, gradient, dtypes, description).
    """
    cap_names = {f.name for f in dataclasses.fields(Capabilities)}
    cap_kw = {k: v for k, v in caps_and_fields.items() if k in cap_names}
    entry_kw = {k: v for k, v in caps_and_fields.items() if k not in cap_names}
    return Entry(
        name=name,
        function=function,
        samples=samples,
        op=op,
        caps=Capabilities.from_function(function, **cap_kw),
        tags=frozenset(tags),
        **entry_kw,
    )
