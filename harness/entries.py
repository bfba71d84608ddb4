"""A user's Function as an ``Entry``: capabilities read from the class, samples, batch sizes.

User samples are rarely hazard-free (3x3 rotations, pairs of points), so unless the caller
fixes batch sizes, ``choose_batch_sizes`` picks sizes that no sample dimension uses and says
so in the result. Used by the Python API, the CLI's targets and the pytest plugin alike.
"""

from __future__ import annotations

import dataclasses
import inspect
import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import torch

from autograd_function_db.entry import (
    GRADIENT_CUSTOM,
    GRADIENT_DERIVATIVE,
    VMAP_NONE,
    VMAP_RULE,
    Capabilities,
    Entry,
    Sample,
    Tolerances,
)
from autograd_function_db.hazards import find_hazards, safe_batch_sizes, sample_dim_sizes
from harness.core.errors import UsageError
from harness.core.options import Options
from harness.plans.pytrees import leaves, map_leaves
from harness.plans.slices import derive_seed


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
    return dataclasses.replace(caps, **overrides) if overrides else caps


def _accepts_seed(fn: Callable[..., Any]) -> bool:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return any(
        p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL) or p.name == "seed"
        for p in params.values()
    )


class SamplesError(UsageError):
    """The user's samples callable raised or returned something unusable."""


#: Samples taken from a samples callable (or list) at most: a generator that yields forever
#: is read this far, not until memory runs out; the report says when more were given.
SAMPLES_MAX = 64


class SampleCap:
    """What reading a sample source found (set as it is read): more than ``SAMPLES_MAX``
    samples (``capped``), and a source shaped like one sample (``single``: the hint the
    plain-call probe adds when the samples cannot call the Function)."""

    def __init__(self) -> None:
        self.capped = False
        self.generator = False
        self.single = ""

    def note(self, what: str) -> str:
        if not self.capped:
            return ""
        if self.generator:
            return (
                f"took the first {SAMPLES_MAX} samples of an unbounded generator ({what} "
                f"yields more; the suite reads at most {SAMPLES_MAX}, never without end)"
            )
        return (
            f"took the first {SAMPLES_MAX} samples of {what}, which gives more (the suite "
            f"reads at most {SAMPLES_MAX})"
        )


def _describe_source(samples: Any) -> str:
    name = getattr(samples, "__qualname__", None) or getattr(samples, "__name__", None)
    module = getattr(samples, "__module__", None)
    return f"{module}.{name}" if module and name else repr(samples)


def _as_samples(items: Any, source: Any = None, cap: SampleCap | None = None) -> list[Sample]:
    what = f"the samples callable {_describe_source(source)}" if source is not None else "samples"
    if items is None:
        raise SamplesError(
            f"{what} returned None; return a list of argument tuples, e.g. [(torch.randn(4, 5),)]"
        )
    if isinstance(items, (torch.Tensor, Sample)) or not isinstance(items, Iterable):
        raise SamplesError(
            f"{what} returned a {type(items).__name__}; return an iterable of argument tuples "
            "or Sample objects, e.g. [(torch.randn(4, 5),)]"
        )
    if isinstance(items, (dict, str, bytes)):  # its keys or characters would be the samples
        kind = "dict" if isinstance(items, dict) else type(items).__name__
        raise SamplesError(
            f"{what} returned a {kind}, which reads as one sample per "
            f"{'key' if kind == 'dict' else 'character'}: return a list of argument tuples, "
            "e.g. [(x, y)] (Sample(args, name) objects to name them)"
        )
    if cap is not None:
        cap.generator = isinstance(items, Iterator)
        cap.single = _single_sample_hint(items, what)
    out = []
    for i, s in enumerate(itertools.islice(items, SAMPLES_MAX + 1)):
        if i == SAMPLES_MAX:
            if cap is not None:
                cap.capped = True
            break
        if isinstance(s, Sample):
            out.append(s)
        elif isinstance(s, (tuple, list)):
            out.append(Sample(tuple(s), f"sample{i}"))
        else:
            out.append(Sample((s,), f"sample{i}"))
    if not out:
        raise SamplesError(f"{what} returned no samples; return at least one argument tuple")
    return out


def _single_sample_hint(items: Any, what: str) -> str:
    """The hint for a source shaped like one sample: a tuple of tensors (each tensor would be
    a sample of one argument) is most likely one argument tuple returned without its list."""
    if not isinstance(items, tuple) or len(items) < 2:
        return ""
    if not all(isinstance(v, torch.Tensor) for v in items):
        return ""
    return (
        f"{what} returned a tuple of {len(items)} tensors, read as {len(items)} samples of one "
        f"argument each; if it is one sample, return a list of argument tuples: "
        f"[({', '.join('a' + str(i) for i in range(len(items)))})]"
    )


def _call_samples(samples: Callable[..., Any], cap: SampleCap, *args: Any) -> list[Sample]:
    try:
        items = samples(*args)
        return _as_samples(items, samples, cap)
    except SamplesError:
        raise
    except Exception as e:
        from harness.core.locations import describe_exception

        raise SamplesError(
            f"the samples callable {_describe_source(samples)} raised {describe_exception(e)}; "
            "fix it so it returns argument tuples"
        ) from e


def _cast(sample: Sample, dtype: torch.dtype | None, device: str) -> Sample:
    """Floating tensors in the run's dtype (None: their own), every tensor on the run's device."""
    args = []
    for a in sample.args:
        if isinstance(a, torch.Tensor):
            same_kind = dtype is not None and (
                (a.is_floating_point() and dtype.is_floating_point)
                or (a.is_complex() and dtype.is_complex)
            )
            if same_kind and a.dtype != dtype:
                a = a.to(dtype)
            if str(a.device) != str(device):
                a = a.to(device)
        args.append(a)
    return Sample(tuple(args), sample.name)


def _shuffle_seed(seed: int) -> int:
    """The seed of the per-slice shuffles of integer/bool tensors (apart from the float noise)."""
    return (seed * 31 + 7) % 2**63


def _shuffled(a: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """The same values in another order: indices stay in range, masks keep their count."""
    flat = a.detach().flatten()
    return flat[torch.randperm(flat.numel(), generator=gen)].reshape(a.shape)


def _perturbed(sample: Sample, seed: int, keep: frozenset[int] = frozenset()) -> Sample:
    """Distinct data for a slice when the user's generator takes no seed.

    Floating tensors get seeded noise of their own scale; integer and bool tensors
    (indices, masks) are shuffled, which keeps every value valid, except the arguments
    in ``keep`` (those the Function's forward refused shuffled); plain values are kept.
    Tensors inside tuple/list/dict arguments are treated alike.
    """
    gen = torch.Generator().manual_seed(seed)
    shuffle_gen = torch.Generator().manual_seed(_shuffle_seed(seed))

    def one(i: int, a: Any) -> Any:
        if not isinstance(a, torch.Tensor):
            return a
        if a.is_floating_point() or a.is_complex():
            noise = torch.randn(a.shape, generator=gen, dtype=torch.float64)
            scale = float(a.detach().abs().mean()) if a.numel() else 1.0
            return (a.detach().double() + 0.1 * (scale or 1.0) * noise).to(a.dtype)
        if i in keep or a.numel() < 2:
            return a
        return _shuffled(a, shuffle_gen)

    def per_arg(i: int, a: Any) -> Any:
        return map_leaves(a, lambda _k, v: one(i, v))

    return Sample(tuple(per_arg(i, a) for i, a in enumerate(sample.args)), sample.name)


#: How a slice with identical data is reported (the issue's words, per argument).
IDENTICAL_SLICES = (
    "argument {arg} is the same in every slice: a rule that mixes its slices would go "
    "unnoticed; give the samples a seed parameter"
)


def _discrete_args(sample: Sample) -> list[int]:
    return [
        i
        for i, a in enumerate(sample.args)
        if any(
            not (v.is_floating_point() or v.is_complex())
            for _, v in leaves(a)
            if isinstance(v, torch.Tensor)
        )
    ]


class _SliceDiversity:
    """For samples without a seed: which integer/bool arguments can be shuffled per slice.

    An argument is shuffled when the Function's eager forward accepts the shuffled
    sample (a sorted index or a mask with a pattern may be refused); otherwise it is
    kept identical in every slice and ``notes()`` says so.
    """

    def __init__(self, call: Callable[..., Any] | None) -> None:
        self.call = call
        self.keep: dict[int, frozenset[int]] = {}
        self.same: dict[int, list[int]] = {}

    def decide(self, index: int, sample: Sample) -> frozenset[int]:
        if index in self.keep:
            return self.keep[index]
        keep: set[int] = set()
        same: list[int] = []
        for i in _discrete_args(sample):
            trial = _perturbed(sample, 1, frozenset(j for j in range(len(sample.args)) if j != i))
            changed = any(
                isinstance(v, torch.Tensor) and not torch.equal(v, w)
                for (_, v), (_, w) in zip(leaves(trial.args[i]), leaves(sample.args[i]))
            )
            if not changed or not self._accepts(trial):
                keep.add(i)
                same.append(i)
        self.keep[index] = frozenset(keep)
        self.same[index] = same
        return self.keep[index]

    def _accepts(self, sample: Sample) -> bool:
        if self.call is None:
            return True
        try:
            with torch.no_grad():
                self.call(*sample.args)
        except Exception:
            return False
        return True

    def notes(self, names: Sequence[str] = ()) -> list[str]:
        out = []
        for index, args in sorted(self.same.items()):
            name = names[index] if index < len(names) else ""
            for arg in args:
                where = f"sample {index}" + (f" ({name})" if name else "")
                out.append(f"{where}: " + IDENTICAL_SLICES.format(arg=arg))
        return out


def user_sample_fn(
    samples: Any, call: Callable[..., Any] | None = None
) -> Callable[[int, torch.dtype | None, str], list[Sample]]:
    """Adapt a user's sample source into the registry's ``fn(seed, dtype, device)`` form.

    A callable that accepts a seed is called once per slice with a derived seed (so
    index tensors stay valid); one without is called once and its data perturbed per
    slice (floating noise; integer/bool tensors shuffled where ``call``, the Function,
    accepts that). Floating tensors keep their dtypes unless the run fixes one
    (``dtype=``, ``--dtype``).
    """
    diversity = _SliceDiversity(call)
    cap = SampleCap()

    def varied(
        base: Sequence[Sample], seed: int, dtype: torch.dtype | None, device: str
    ) -> list[Sample]:
        out = []
        for k, s in enumerate(base):
            keep = diversity.decide(k, _cast(s, dtype, device))
            varied_s = _perturbed(s, derive_seed("perturb", seed), keep) if seed else s
            out.append(_cast(varied_s, dtype, device))
        return out

    if isinstance(samples, (list, tuple)):
        fixed = _as_samples(samples, cap=cap)

        def listed(seed: int, dtype: torch.dtype | None, device: str) -> list[Sample]:
            return varied(fixed, seed, dtype, device)

        listed.user_seeded = False  # type: ignore[attr-defined]
        listed.diversity = diversity  # type: ignore[attr-defined]
        listed.own_dtypes = True  # type: ignore[attr-defined]
        listed.cap = cap  # type: ignore[attr-defined]
        listed.described = "the samples list"  # type: ignore[attr-defined]
        return listed
    if not callable(samples):
        raise UsageError(
            f"samples must be a callable returning argument tuples or Sample objects, got "
            f"{type(samples).__name__}"
        )
    if _accepts_seed(samples):

        def seeded(seed: int, dtype: torch.dtype | None, device: str) -> list[Sample]:
            return [_cast(s, dtype, device) for s in _call_samples(samples, cap, seed)]

        seeded.user_seeded = True  # type: ignore[attr-defined]
        seeded.own_dtypes = True  # type: ignore[attr-defined]
        seeded.cap = cap  # type: ignore[attr-defined]
        seeded.described = f"the samples callable {_describe_source(samples)}"  # type: ignore[attr-defined]
        return seeded

    def unseeded(seed: int, dtype: torch.dtype | None, device: str) -> list[Sample]:
        return varied(_call_samples(samples, cap), seed, dtype, device)

    unseeded.user_seeded = False  # type: ignore[attr-defined]
    unseeded.diversity = diversity  # type: ignore[attr-defined]
    unseeded.own_dtypes = True  # type: ignore[attr-defined]
    unseeded.cap = cap  # type: ignore[attr-defined]
    unseeded.described = f"the samples callable {_describe_source(samples)}"  # type: ignore[attr-defined]
    return unseeded


def samples_note(entry: Entry) -> str:
    """What the report says when the samples were capped at ``SAMPLES_MAX`` ("" if not);
    call it after the samples were drawn."""
    cap = getattr(entry.samples, "cap", None)
    if not isinstance(cap, SampleCap):
        return ""
    return cap.note(str(getattr(entry.samples, "described", "the samples")))


def slice_notes(entry: Entry, samples: Sequence[Sample]) -> str:
    """What the report says about arguments that stay identical across slices ("" if none)."""
    diversity = getattr(entry.samples, "diversity", None)
    if diversity is None:
        return ""
    return "; ".join(diversity.notes([s.name for s in samples]))


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


def base_samples(entry: Entry, options: Options) -> list[Sample]:
    """The samples the run starts from (seed as the runner derives it); UsageError if unusable."""
    from harness.engine.cases import EntryData

    try:
        samples = list(EntryData(entry, options).base_samples())
    except UsageError:
        raise
    except Exception as e:
        from harness.core.locations import describe_exception

        raise SamplesError(
            f"the samples for {entry.name} could not be built: {describe_exception(e)}"
        ) from e
    if not samples:
        raise SamplesError(f"the samples for {entry.name} are empty; return at least one sample")
    return samples


def refuse_unfit_samples(entry: Entry, options: Options) -> None:
    """``SamplesError`` when a sample cannot call the Function with no transform at all
    (``harness.engine.probe``, in a forked child where it can): one line naming the sample,
    the call and the exception, with a hint when the source looked like one sample."""
    from harness.engine.probe import probe_samples, refusal_line

    refusal = probe_samples(entry, base_samples(entry, options), options.timeout_s)
    if refusal is None:
        return
    cap = getattr(entry.samples, "cap", None)
    hint = cap.single if isinstance(cap, SampleCap) else ""
    raise SamplesError(refusal_line(entry, refusal, hint))


def _chunk_for(safe: Sequence[int], used: set[int]) -> tuple[int, int]:
    """A (batch, chunk) pair whose chunks (k and the remainder) avoid every sample dim."""
    for b in safe[1:]:
        for k in safe:
            if k < b and (b % k < 2 or b % k not in used):
                return b, k
    return 2 * safe[0], safe[0]


def choose_batch_sizes(
    entry: Entry,
    options: Options,
    *,
    fixed: bool = False,
    fixed_single: bool | None = None,
    fixed_nested: bool | None = None,
) -> Options:
    """Batch sizes no sample dim uses; refuse a sample only where the caller fixed a colliding size.

    ``fixed`` fixes both the single-level and the nested sizes; ``fixed_single`` and
    ``fixed_nested`` fix one of them (the other, and the chunked sizes, are chosen).
    The choice is recorded in ``options.batch_size_note`` for the output and reports.
    """
    fixed_single = fixed if fixed_single is None else fixed_single
    fixed_nested = fixed if fixed_nested is None else fixed_nested
    base = base_samples(entry, options)
    used: set[int] = set()
    for s in base:
        used |= sample_dim_sizes(s.args)
    safe = safe_batch_sizes(used, 8)

    def refuse(sizes: Sequence[int], flag: str, suggestion: str) -> None:
        for i, s in enumerate(base):
            hz = find_hazards(s.args, sizes)
            if hz:
                h = hz[0]
                raise UsageError(
                    f"sample {i} ({s.name or 'unnamed'}): argument {h.arg} has size {h.size} at "
                    f"dim {h.dim}, equal to the batch size {h.size} you fixed with {flag}; use "
                    f"{flag} {suggestion} (no sample dimension uses it), or leave {flag} out and "
                    "let the suite choose"
                )

    if fixed_single:
        refuse(options.batch_sizes, "--batch-size", str(safe[0]))
    if fixed_nested:
        refuse(options.nested_batch_sizes, "--nested-batch-sizes", f"{safe[0]},{safe[1]}")
    changes: dict[str, Any] = {}
    said = []
    if not fixed_single and used & set(options.batch_sizes):
        changes["batch_sizes"] = (safe[0],)
        said.append(f"batch size {safe[0]}")
    if not fixed_nested and used & set(options.nested_batch_sizes):
        changes["nested_batch_sizes"] = (safe[0], safe[1])
        said.append(f"nested sizes {safe[0]},{safe[1]}")
    b, k = options.chunk
    if used & {b, k, b % k} - {0, 1}:  # a last chunk of 1 is checked by the others
        changes["chunk"] = _chunk_for(safe, used)
        said.append(f"chunked {changes['chunk'][0]} in chunks of {changes['chunk'][1]}")
    if not changes:
        return options
    defaults = Options()
    note = (
        f"sample dims use sizes {sorted(used)}, which include default batch sizes "
        f"{sorted(used & set(defaults.hazard_sizes()))}; so the suite chose {', '.join(said)}, "
        "which no sample dimension uses (a misplaced batch dim then fails loudly instead of "
        "broadcasting)"
    )
    return options.replace(batch_size_note=note, **changes)
