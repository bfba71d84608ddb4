"""The backend areas of ``afdb certify``: cross-backend and torch.compile checks.

These are checks like the catalogue's (``CheckSpec``), registered with
``catalogue=False``: ``afdb run`` never runs them, ``afdb certify`` adds them per
backend kind (``extra_checks``).

* ``cross_backend``: the Function's outputs and first-order gradients (``autograd.grad``
  with a seeded cotangent) on the backend against the same call on the CPU, on the same
  values (moved to the host, or unwrapped), within per-dtype tolerances
  (``CROSS_TOLERANCES``, or the entry's own when looser). Every component a subclass
  result unwraps to is compared.
* ``compiled_X`` and ``X_of_compiled``: for each transform X (vmap, nested vmap, jvp,
  vjp, their compositions, second order; ``COMPILE_TRANSFORMS``), ``torch.compile(X(f))``
  (compile outside) and ``X(torch.compile(f))`` (compile inside) against ``X(f)`` in
  eager, on one representative plan per sample (all arguments batched at 0; the first
  nested plan), the same inputs and seeded tangents/cotangents. Dynamo's
  caches are reset before each compiled call, so no case reuses another's graphs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch

from autograd_function_db.entry import Entry
from harness.certify.backends import (
    COMPILE,
    DEVICE,
    Backend,
    BackendEntry,
    adapt_entry,
    import_modules,
    subclass_adapter,
)
from harness.checks.catalogue import (
    CaseContext,
    CheckFailure,
    CheckSpec,
    Unsupported,
    get_check,
    register,
)
from harness.checks.compare import compare_outputs
from harness.core.options import Options
from harness.plans.batching import as_tuple, vmapped
from harness.plans.plan import ArgLayout, LevelPlan, Plan, nested_plans
from harness.plans.slices import build_batched_args

CROSS_BACKEND = "cross_backend"

#: Per-dtype (rtol, atol) between two backends (or compiled and eager): kernels may sum in
#: another order, so float32 gets a few ulps more than a same-backend comparison.
CROSS_TOLERANCES: dict[str, tuple[float, float]] = {
    "float64": (1e-7, 1e-7),
    "float32": (1e-4, 1e-5),
    "float16": (1e-2, 1e-2),
    "bfloat16": (5e-2, 5e-2),
    "complex64": (1e-4, 1e-5),
    "complex128": (1e-7, 1e-7),
}


def cross_tolerances(entry: Entry, dtype: torch.dtype) -> tuple[float, float]:
    name = str(dtype).replace("torch.", "")
    rtol, atol = CROSS_TOLERANCES.get(name, CROSS_TOLERANCES["float32"])
    own = entry.tolerances.for_dtype(dtype)
    return max(rtol, own[0]), max(atol, own[1])


def _floating(a: Any) -> bool:
    return isinstance(a, torch.Tensor) and (a.is_floating_point() or a.is_complex())


def _backend_of(ctx: CaseContext) -> Any:
    backend = getattr(ctx.entry, "backend", None)
    if backend is None:
        raise Unsupported("not a backend run: this check runs under `afdb certify`")
    return backend


def _clone_inplace(entry: Entry, args: Sequence[Any]) -> list[Any]:
    return [
        a.clone() if k in entry.caps.inplace_args and isinstance(a, torch.Tensor) else a
        for k, a in enumerate(args)
    ]


# --- cross-backend ---------------------------------------------------------------------------


class _Sides:
    """Moving values between the backend and the CPU reference."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend
        self.adapter = None if backend.kind == DEVICE else subclass_adapter(backend.name)

    def host_components(self, x: Any) -> list[Any]:
        """The CPU values a backend value stands for (one per subclass component)."""
        parts = self.adapter.components(x) if self.adapter is not None else [x]
        return [p.detach().cpu() if isinstance(p, torch.Tensor) else p for p in parts]

    def to_backend(self, t: torch.Tensor) -> torch.Tensor:
        if self.adapter is not None:
            return self.adapter.wrap(t)
        return t.to(self.backend.name)


def run_cross_backend(ctx: CaseContext) -> str:
    backend = _backend_of(ctx)
    entry, plain = ctx.entry, getattr(ctx.entry, "plain", None)
    assert plain is not None
    if entry.caps.randomness:
        raise Unsupported(
            "a random entry draws from each backend's own generator, so values differ by design"
        )
    sides = _Sides(backend)
    args = ctx.slices.args()
    host = [sides.host_components(a)[0] if isinstance(a, torch.Tensor) else a for a in args]
    label = f"cross_backend ({backend.label} vs cpu)"
    try:
        with torch.no_grad():
            expected = as_tuple(plain.call(*_clone_inplace(plain, host)))
    except Exception as e:
        raise Unsupported(
            f"the CPU reference raised {type(e).__name__}: {e} (see the CPU certificate)"
        ) from None
    with torch.no_grad():
        actual = as_tuple(entry.call(*_clone_inplace(entry, args)))
    rtol, atol = cross_tolerances(entry, ctx.dtype)
    problems = _compare_sides(sides, actual, expected, rtol, atol, f"{label}: outputs")
    diff = [i for i, a in enumerate(args) if _floating(a)]
    outs = [
        j for j, o in enumerate(expected) if _floating(o) and j not in entry.caps.nondiff_outputs
    ]
    checked = "outputs"
    if entry.caps.backward and entry.caps.setup_context and diff and outs:
        gen = ctx.generator("cross_backend", "cotangent")
        cots = [
            torch.randn(expected[j].shape, generator=gen, dtype=torch.float64).to(expected[j].dtype)
            for j in outs
        ]
        grads_cpu = _grads(plain, host, diff, outs, cots)
        grads_backend = _grads(entry, args, diff, outs, [sides.to_backend(c) for c in cots])
        problems += _compare_sides(
            sides, grads_backend, grads_cpu, rtol, atol, f"{label}: first-order gradients"
        )
        checked = "outputs and first-order gradients"
    if problems:
        raise CheckFailure("; ".join(problems))
    return f"the same call on the CPU ({checked})"


def _grads(
    entry: Entry, args: Sequence[Any], diff: Sequence[int], outs: Sequence[int], cots: list[Any]
) -> tuple[Any, ...]:
    call = list(args)
    leaves = []
    for i in diff:
        call[i] = args[i].detach().clone().requires_grad_(True)
        leaves.append(call[i])
    out = as_tuple(entry.call(*_clone_inplace(entry, call)))
    grads = torch.autograd.grad(
        [out[j] for j in outs], leaves, cots, allow_unused=True, materialize_grads=True
    )
    return tuple(grads)


def _compare_sides(
    sides: _Sides,
    actual: Sequence[Any],
    expected: Sequence[Any],
    rtol: float,
    atol: float,
    label: str,
) -> list[str]:
    if len(actual) != len(expected):
        return [f"{label}: {len(actual)} values on the backend, {len(expected)} on the cpu"]
    problems: list[str] = []
    for k, (a, e) in enumerate(zip(actual, expected)):
        parts = sides.host_components(a)
        for c, part in enumerate(parts):
            name = f"value {k}" + (f" (component {c})" if len(parts) > 1 else "")
            problems += compare_outputs(
                [part], [e], rtol=rtol, atol=atol, label=label, names=[name]
            )
    return problems


def _cross_supported(entry: Entry) -> str | None:
    return None


register(
    CheckSpec(
        CROSS_BACKEND,
        run_cross_backend,
        lambda layout, options: [None],
        _cross_supported,
        "backend",
        "the same call on the CPU",
        "outputs and first-order gradients on the backend vs the same values on the CPU",
        catalogue=False,
    )
)


# --- torch.compile ---------------------------------------------------------------------------

#: The transforms composed with torch.compile, in catalogue order. Chunked vmap and
#: jacrev/jacfwd are left out: under compile they trace the same graphs as vmap,
#: vmap_of_vjp and vmap_of_jvp, and every compiled case costs a compilation.
COMPILE_TRANSFORMS = (
    "vmap",
    "vmap_nested",
    "jvp",
    "vjp",
    "grad_of_vmap",
    "vmap_of_vjp",
    "vmap_of_jvp",
    "jvp_of_vjp",
    "vjp_of_vjp",
)
#: Transforms that vmap (and so take a plan).
_BATCHED = frozenset({"vmap", "vmap_nested", "grad_of_vmap", "vmap_of_vjp", "vmap_of_jvp"})


def outside_name(transform: str) -> str:
    return f"compiled_{transform}"


def inside_name(transform: str) -> str:
    return f"{transform}_of_compiled"


COMPILE_CHECKS = tuple(
    name for t in COMPILE_TRANSFORMS for name in (outside_name(t), inside_name(t))
)


def compile_plans(transform: str) -> Callable[[ArgLayout, Options], list[Plan | None]]:
    """One representative plan per sample: all tensor arguments batched at 0, or the
    first nested plan; no plan for the transforms without vmap."""

    def plans(layout: ArgLayout, options: Options) -> list[Plan | None]:
        if transform not in _BATCHED:
            return [None]
        if not layout.units():
            return []
        if transform == "vmap_nested":
            return list(nested_plans(layout, options.nested_batch_sizes)[:1])
        zero = tuple(0 if r is not None else None for r in layout.ranks)
        return [Plan((LevelPlan(options.batch_sizes[0], zero),), "compile-representative")]

    return plans


def compile_supported(transform: str) -> Callable[[Entry], str | None]:
    def supported(entry: Entry) -> str | None:
        reason = get_check(transform).supported(entry)
        if reason:
            return reason
        if entry.caps.randomness:
            return (
                "a random entry: a compiled graph may draw its random numbers differently "
                "from eager, so eager is no reference"
            )
        return None

    return supported


class _Program:
    """The transform X applied to ``f`` on one case's inputs: ``call(f)`` runs X(f)."""

    def __init__(self, ctx: CaseContext, transform: str) -> None:
        self.ctx, self.transform = ctx, transform
        entry = ctx.entry
        self.args = ctx.slices.args()
        self.plan = ctx.plan
        if transform in ("vmap", "vmap_nested"):
            assert self.plan is not None
            self.inputs = build_batched_args(self.plan, ctx.slices)
            return
        self.diff = [i for i, a in enumerate(self.args) if _floating(a)]
        if not self.diff:
            raise Unsupported("no floating-point tensor argument: nothing to differentiate")
        with torch.no_grad():
            outs = as_tuple(entry.call(*_clone_inplace(entry, self.args)))
        self.outs = [
            j for j, o in enumerate(outs) if _floating(o) and j not in entry.caps.nondiff_outputs
        ]
        if not self.outs:
            raise Unsupported("no differentiable output")
        gen = ctx.generator("compile", transform)
        self.primals = [self.args[i] for i in self.diff]
        b = ctx.options.batch_sizes[0]
        batched = transform in _BATCHED

        def draw(likes: Sequence[torch.Tensor]) -> list[torch.Tensor]:
            shape = (b,) if batched else ()
            return [
                torch.randn((*shape, *t.shape), generator=gen, dtype=torch.float64).to(t.dtype)
                for t in likes
            ]

        self.tangents = draw(self.primals)
        self.cotangents = draw([outs[j] for j in self.outs])
        self.tangents2 = draw(self.primals)
        if batched:
            assert self.plan is not None
            full = build_batched_args(self.plan, ctx.slices)
            self.batched_primals = [full[i] for i in self.diff]

    def restricted(self, f: Callable[..., Any]) -> Callable[..., tuple[Any, ...]]:
        base, diff, outs, entry = self.args, self.diff, self.outs, self.ctx.entry

        def fr(*xs: Any) -> tuple[Any, ...]:
            call = list(base)
            for i, x in zip(diff, xs):
                call[i] = x
            out = as_tuple(f(*_clone_inplace(entry, call)))
            return tuple(out[j] for j in outs)

        return fr

    def program(self, f: Callable[..., Any]) -> tuple[Callable[..., Any], tuple[Any, ...]]:
        """(X(f), its inputs) for this case's transform."""
        t, fn = self.transform, torch.func
        if t in ("vmap", "vmap_nested"):
            assert self.plan is not None
            entry = self.ctx.entry

            def call(*a: Any) -> Any:
                return f(*_clone_inplace(entry, a))

            return vmapped(call, self.plan, [lv.out_dims for lv in self.plan.levels]), self.inputs
        fr = self.restricted(f)
        n = len(self.primals)
        cots = tuple(self.cotangents)

        def vjp_of(*p: Any) -> Any:
            return fn.vjp(fr, *p)[1](cots)

        def vjp_with_outputs(*p: Any) -> Any:  # the primal outputs too: a wrong forward shows
            out, back = fn.vjp(fr, *p)[:2]
            return out, back(cots)

        if t == "jvp":
            return (lambda *p: fn.jvp(fr, p, tuple(self.tangents))), tuple(self.primals)
        if t == "vjp":
            return vjp_with_outputs, tuple(self.primals)
        if t == "jvp_of_vjp":
            return (lambda *p: fn.jvp(vjp_of, p, tuple(self.tangents))), tuple(self.primals)
        if t == "vjp_of_vjp":

            def second(*p: Any) -> Any:
                out, back = fn.vjp(vjp_of, *p)[:2]
                return back(tuple(self.tangents2))

            return second, tuple(self.primals)
        bp = tuple(self.batched_primals)
        if t == "grad_of_vmap":
            vf = fn.vmap(fr, in_dims=(0,) * n)

            def grad_vmap(*p: Any) -> Any:
                out, back = fn.vjp(vf, *p)[:2]
                return out, back(cots)

            return grad_vmap, bp
        if t == "vmap_of_vjp":

            def per_slice(*pc: Any) -> Any:
                out, back = fn.vjp(fr, *pc[:n])[:2]
                return out, back(tuple(pc[n:]))

            return fn.vmap(per_slice), (*bp, *cots)
        if t == "vmap_of_jvp":

            def per_slice_jvp(*pt: Any) -> Any:
                return fn.jvp(fr, tuple(pt[:n]), tuple(pt[n:]))

            return fn.vmap(per_slice_jvp), (*bp, *self.tangents)
        raise AssertionError(f"unknown transform {t}")


def _flat(out: Any) -> list[Any]:
    leaves, _ = torch.utils._pytree.tree_flatten(out)
    return [x.detach() if isinstance(x, torch.Tensor) else x for x in leaves]


def _compile(fn: Callable[..., Any], options: Options, backend: Any) -> Callable[..., Any]:
    kwargs: dict[str, Any] = {"backend": backend.name}
    if backend.options.get("mode"):
        kwargs["mode"] = backend.options["mode"]
    return torch.compile(fn, **kwargs)


def run_compiled(ctx: CaseContext, transform: str, placement: str) -> str:
    import torch._dynamo

    from harness.core import shims

    shims.forbid()  # torch's own backward path wherever something is compiled
    backend = _backend_of(ctx)
    program = _Program(ctx, transform)
    eager_fn, inputs = program.program(ctx.entry.call)
    try:
        expected = _flat(eager_fn(*inputs))
    except Exception as e:
        raise Unsupported(
            f"{transform} raises in eager ({type(e).__name__}: {str(e)[:300]}), so there is "
            f"nothing to compare; the catalogue's {transform} check reports it"
        ) from None
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    try:
        if placement == "outside":
            compiled_fn = _compile(eager_fn, ctx.options, backend)
            what = f"torch.compile({transform}(f), backend={backend.name!r})"
        else:
            compiled_fn, _ = program.program(_compile(ctx.entry.call, ctx.options, backend))
            what = f"{transform}(torch.compile(f, backend={backend.name!r}))"
        actual = _flat(compiled_fn(*inputs))
        graphs = int(torch._dynamo.utils.counters["stats"]["unique_graphs"])
    finally:
        torch._dynamo.reset()
    rtol, atol = cross_tolerances(ctx.entry, ctx.dtype)
    where = f" {ctx.plan.id}" if ctx.plan is not None else ""
    problems = compare_outputs(
        actual, expected, rtol=rtol, atol=atol, label=f"{what}{where} vs {transform}(f) in eager"
    )
    if problems:
        raise CheckFailure("; ".join(problems))
    if graphs == 0:
        # Nothing was compiled (torch runs a compiled function called under an eager
        # torch.func transform in eager; a graph break everywhere does the same): a pass
        # would certify eager, not the backend.
        raise Unsupported(
            f"{what}: dynamo compiled no graph, so the call ran in eager and says nothing "
            f"about backend {backend.name!r}"
            + (
                " (torch does not compile a function called inside an eager torch.func transform)"
                if placement == "inside"
                else ""
            )
        )
    return f"{transform}(f) in eager"


for _t in COMPILE_TRANSFORMS:
    for _placement, _name in (("outside", outside_name(_t)), ("inside", inside_name(_t))):
        register(
            CheckSpec(
                _name,
                (lambda t, p: lambda ctx: run_compiled(ctx, t, p))(_t, _placement),
                compile_plans(_t),
                compile_supported(_t),
                "compile",
                f"{_t}(f) in eager",
                (
                    f"torch.compile({_t}(f)) against {_t}(f) in eager"
                    if _placement == "outside"
                    else f"{_t}(torch.compile(f)) against {_t}(f) in eager"
                ),
                catalogue=False,
            )
        )


__all__ = [
    "COMPILE_CHECKS",
    "COMPILE_TRANSFORMS",
    "CROSS_BACKEND",
    "CROSS_TOLERANCES",
    "cross_tolerances",
    "run_compiled",
    "run_cross_backend",
]


def extra_checks(backend: Backend) -> list[str]:
    """The backend's own check areas (beyond the catalogue's checks)."""
    if backend.kind == COMPILE:
        return list(COMPILE_CHECKS)
    if backend.kind == DEVICE and backend.name == "cpu":
        return []  # the CPU is the reference of every cross-backend comparison
    return [CROSS_BACKEND]


def adapt(backend: Backend, entries: Iterable[Entry]) -> list[BackendEntry]:
    """The entries as they run on ``backend`` (importing its --import modules first); the
    backend checks are registered by importing this module, as a worker process needs."""
    import_modules(backend.imports)
    return [adapt_entry(e, backend) for e in entries]
