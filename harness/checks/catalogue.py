"""The check catalogue: what a check is, and the registry of all of them.

A check is a small function ``run(ctx) -> str | None`` that either returns (pass,
optionally naming the reference it used) or raises ``CheckFailure`` with a
message naming the sub-check, the expected and the actual value. Each check
declares which Functions it applies to (``supported``) and which plans it runs
over (``plans``). The modules that own checks (``vmap``, ``contract``, ``autodiff``,
``eager``, ``three_level``, ``batched_grad``, ``fallback``, ``opcheck``) register them in
``CHECKS`` through ``register``; ``_load_builtin_checks`` imports them, and ``containers``
(which adds a case guard, ``add_case_guard``), on first use of the registry. The catalogue
imports none of them: they all import it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from autograd_function_db.entry import GRADIENT_DERIVATIVE, VMAP_NONE, Entry, Sample
from harness.core.options import Options, sample_dtype
from harness.plans.plan import ArgLayout, Plan
from harness.plans.slices import SliceSource, derive_seed


class CheckFailure(AssertionError):
    """The Function does not conform: wrong values, shapes, dtypes or contract."""


class Unsupported(Exception):
    """Raised by a check that finds at run time it cannot apply (reason in the message)."""


class NonFiniteSample(Exception):
    """The sample's reference values are NaN or infinite: every comparison would be vacuous
    (``error``, with the advice to choose samples where the Function is finite)."""


class TorchBug(Exception):
    """A known bug of torch itself, recognised by a precise signature in the case (``xfail``,
    never the Function's): the message names the bug and carries a plain-torch repro."""


class ReferenceRaised(Exception):
    """The reference computation raised, not the transform under test (``error``; the
    message says which side raised, what it means for users and whether the transform ran)."""


@dataclass
class CaseContext:
    """Everything one case needs: the entry, the sample's slices, the plan, the options."""

    entry: Entry
    case_id: str
    sample_index: int
    sample: Sample
    plan: Plan | None
    slices: SliceSource
    options: Options
    notes: list[str] = field(default_factory=list)
    #: ``randomness=`` for the vmaps a check runs ("same" for a random entry whose RNG is fixed).
    vmap_randomness: str = "error"
    #: The dtype of a dtype leg (``harness.checks.dtype_leg``): the sample was cast to it, and
    #: references that run the Function itself (eager backward) run at float64 instead.
    leg: torch.dtype | None = None

    @property
    def dtype(self) -> torch.dtype:
        """The dtype the case computes in: the run's, or (samples' own) the sample's least
        precise floating dtype."""
        if self.options.dtype is not None:
            return self.options.dtype
        return sample_dtype(self.sample.args) or torch.float64

    @property
    def tolerances(self) -> tuple[float, float]:
        return self.entry.tolerances.for_dtype(self.dtype)

    def generator(self, *extra: object) -> torch.Generator:
        """A generator seeded from the run seed and the case id (tangents, cotangents)."""
        return torch.Generator().manual_seed(derive_seed(self.options.seed, self.case_id, *extra))


PlanFn = Callable[[ArgLayout, Options], "list[Plan | None]"]
SupportFn = Callable[[Entry], "str | None"]


@dataclass(frozen=True)
class CheckSpec:
    name: str
    run: Callable[[CaseContext], str | None]
    plans: PlanFn
    supported: SupportFn
    family: str  # "vmap", "autodiff" (torch.func) or "eager" (eager autograd only)
    reference: str  # what it compares against, for the report
    description: str = ""
    #: False for checks that run only where a caller names them (``afdb certify``'s
    #: backend areas): they are not in the catalogue that ``afdb run`` runs by default.
    catalogue: bool = True
    #: When set, the check makes cases only for the entries it returns True for, named with
    #: ``--checks`` or not (the eager checks: only Functions torch.func cannot differentiate,
    #: where torch.func's own checks, which run eager autograd too, cannot run); for the
    #: others it makes no case at all (no id, not even ``unsupported``).
    by_default: Callable[[Entry], bool] | None = None


CHECKS: dict[str, CheckSpec] = {}


#: A finding a catalogue case of the vmap or autodiff family reports before its check runs:
#: ``guard(ctx, check, family)`` gives the failure's message, or "" (none here).
CaseGuard = Callable[["CaseContext", str, str], str]

#: The guards, added by the modules that own them when the built-in checks are loaded
#: (``harness.checks.containers``: floating outputs nested in containers).
_GUARDS: list[CaseGuard] = []


def add_case_guard(guard: CaseGuard) -> None:
    """Run ``guard`` before every catalogue case of the vmap and autodiff families: the
    seam through which a module below the checks' runners (``containers``) reports a
    finding of the whole family without the catalogue importing it."""
    _GUARDS.append(guard)


def register(spec: CheckSpec) -> CheckSpec:
    """Add ``spec`` to the registry. A catalogue check of the vmap or autodiff family first
    runs the case guards (``add_case_guard``): floating outputs nested in containers are
    reported once per family (``harness.checks.containers``)."""
    if spec.name in CHECKS:
        raise ValueError(f"check {spec.name!r} registered twice")
    if spec.catalogue and spec.family in ("vmap", "autodiff"):
        spec = dataclasses.replace(spec, run=_guarded(spec))
    CHECKS[spec.name] = spec
    return spec


def _guarded(spec: CheckSpec) -> Callable[[CaseContext], str | None]:
    run = spec.run

    def run_guarded(ctx: CaseContext) -> str | None:
        _load_builtin_checks()  # the guards' modules
        for guard in _GUARDS:
            text = guard(ctx, spec.name, spec.family)
            if text:
                raise CheckFailure(text)
        return run(ctx)

    return run_guarded


def no_plan(layout: ArgLayout, options: Options) -> list[Plan | None]:
    return [None]


LEGACY_FIX = (
    "legacy forward(ctx, ...) cannot be used with torch.func transforms: move ctx out of "
    "forward (def forward(*args)) and save what backward needs in a "
    "@staticmethod setup_context(ctx, inputs, output); `afdb migrate` does it and verifies "
    "it (docs/migrating.md)"
)


#: torch's words when a torch.func transform meets an autograd.Function without setup_context.
TORCH_FUNC_REFUSAL = "it must override the setup_context staticmethod"


def needs_setup_context(entry: Entry) -> str | None:
    return None if entry.caps.setup_context else LEGACY_FIX


def needs_vmap(entry: Entry) -> str | None:
    reason = needs_setup_context(entry)
    if reason:
        return reason
    if entry.caps.vmap == VMAP_NONE:
        return (
            "no vmap support: add a @staticmethod vmap(info, in_dims, *args) -> "
            "(outputs, out_dims), or set generate_vmap_rule = True"
        )
    return None


#: The catalogue's order (design.md), whatever order the modules were imported in.
CATALOGUE_ORDER = (
    "vmap",
    "vmap_nested",
    "vmap_chunked",
    "vmap_hazard",
    "vmap_fallback",
    "contract",
    "jvp",
    "vjp",
    "grad_of_vmap",
    "jvp_of_vmap",
    "vmap_of_vjp",
    "vmap_of_jvp",
    "jvp_of_vjp",
    "vjp_of_vjp",
    "vmap_of_vjp_of_vjp",
    "vmap_of_jvp_of_vjp",
    "vmap_of_autograd_grad",
    "jacrev",
    "jacfwd",
    "opcheck_schema",
    "opcheck_autograd_registration",
    "opcheck_faketensor",
    "opcheck_aot_dispatch_static",
    "opcheck_aot_dispatch_dynamic",
    "eager_vjp",
    "eager_jvp",
    "eager_vjp_of_vjp",
)


#: The staticmethods of an autograd.Function that a case can be caught running when it
#: runs out of time (``harness.engine.hangs``).
STATICMETHODS = ("forward", "setup_context", "backward", "jvp", "vmap")

_V, _B, _J = "vmap", "backward", "jvp"

#: Which of the Function's staticmethods a check calls, beyond ``forward`` and
#: ``setup_context`` (every check calls those). A hang in one of them on a sample means
#: every case of these checks on that sample would hang too, so they are not run
#: (``harness.engine.timeouts``). It must cover what a check may call (a check that calls a
#: staticmethod not listed pays the limit again): the checks that vmap a backward or a jvp
#: (``jacrev``, ``jacfwd``, ``vmap_of_autograd_grad``) call the vmap rule when the backward
#: or jvp calls the Function itself. ``tests/test_hang_once.py`` traces every check on a
#: Function that records its calls. A check not listed calls everything.
STATICMETHODS_CALLED: dict[str, frozenset[str]] = {
    name: frozenset(called)
    for name, called in {
        "vmap": {_V},
        "vmap_nested": {_V},
        "vmap_chunked": {_V},
        "vmap_hazard": {_V},
        "vmap_fallback": {_V, _B, _J},  # vmap of the Function, its vjp, its jvp
        "contract": {_V},
        "jvp": {_J},
        "vjp": {_B},
        "grad_of_vmap": {_V, _B},
        "jvp_of_vmap": {_V, _J},
        "vmap_of_vjp": {_V, _B},
        "vmap_of_jvp": {_V, _J},
        "jvp_of_vjp": {_B, _J},
        "vjp_of_vjp": {_B},
        "vmap_of_vjp_of_vjp": {_V, _B},
        "vmap_of_jvp_of_vjp": {_V, _B, _J},
        "vmap_of_autograd_grad": {_B, _V},  # a backward that calls the Function: its rule
        "jacrev": {_B, _V},
        "jacfwd": {_J, _V},
        "eager_vjp": {_B},
        "eager_jvp": {_J},
        "eager_vjp_of_vjp": {_B},
    }.items()
}

#: Checks whose reference runs the Function's eager backward for a custom gradient
#: (``gradient="custom"``: the first-order Jacobian is the backward's, not finite
#: differences').
_CUSTOM_GRADIENT_BACKWARD = frozenset({"jvp", "jacfwd"})


def staticmethods_called(check: str, entry: Entry) -> frozenset[str]:
    """The staticmethods a case of ``check`` on ``entry`` may call (all when unknown)."""
    called = STATICMETHODS_CALLED.get(check)
    if called is None:
        return frozenset(STATICMETHODS)
    if check in _CUSTOM_GRADIENT_BACKWARD and entry.gradient != GRADIENT_DERIVATIVE:
        called = called | {_B}
    return called | {"forward", "setup_context"}


def check_names(family: str | None = None) -> list[str]:
    _load_builtin_checks()
    rank = {n: i for i, n in enumerate(CATALOGUE_ORDER)}
    names = sorted(CHECKS, key=lambda n: rank.get(n, len(rank)))
    if family is None:
        return [n for n in names if CHECKS[n].catalogue]
    return [n for n in names if CHECKS[n].family == family]


def get_check(name: str) -> CheckSpec:
    _load_builtin_checks()
    try:
        return CHECKS[name]
    except KeyError:
        raise KeyError(f"unknown check {name!r}; known checks: {', '.join(CHECKS)}") from None


_LOADED = False


def _load_builtin_checks() -> None:
    """Import the modules that register the built-in checks (once, in catalogue order)."""
    global _LOADED
    if _LOADED:
        return
    _LOADED = True
    import importlib

    for module in (
        "vmap",
        "contract",
        "autodiff",
        "eager",
        "three_level",
        "batched_grad",
        "fallback",
        "opcheck",
        "containers",  # adds the guard of every vmap and autodiff case (registers no check)
    ):
        importlib.import_module(f"harness.checks.{module}")
