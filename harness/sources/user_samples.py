"""A user's samples as the registry's ``fn(seed, dtype, device)``: reading a samples
callable or list (at most ``SAMPLES_MAX``, refusing shapes that are no list of samples),
and distinct data per slice for a source without a seed (``_SliceDiversity``).

``harness.sources.entries`` makes the Entry around it; the notes a run prints about its samples
(``samples_note``, ``slice_notes``) are read back from the function this module returns.
"""

from __future__ import annotations

import inspect
import itertools
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import torch

from autograd_function_db.entry import Entry, Sample
from harness.core.errors import UsageError
from harness.core.options import Options
from harness.plans.pytrees import leaves, map_leaves
from harness.plans.slices import derive_seed


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


def cast_sample(sample: Sample, dtype: torch.dtype | None, device: str) -> Sample:
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


def finite_noise(a: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """``a`` plus seeded noise of a tenth of its finite elements' mean magnitude, on its finite
    elements only: an infinity (a masked attention logit) or NaN stays where it is, and never
    makes the scale (and so every element) non-finite. Complex tensors get noise in both parts."""
    x = a.detach()
    if x.numel() == 0:
        return x.clone()
    finite = torch.isfinite(x)
    kept = x.abs().double()[finite]
    scale = (float(kept.mean()) if kept.numel() else 0.0) or 1.0
    if x.is_complex():
        re = torch.randn(x.shape, generator=gen, dtype=torch.float64)
        im = torch.randn(x.shape, generator=gen, dtype=torch.float64)
        noisy = x.to(torch.complex128) + 0.1 * scale * torch.complex(re, im)
    else:
        noisy = x.double() + 0.1 * scale * torch.randn(x.shape, generator=gen, dtype=torch.float64)
    return torch.where(finite, noisy.to(x.dtype), x)


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
            return finite_noise(a, gen)
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
    if getattr(samples, "recorded_samples", False):  # harness.sources.recorded_samples: as it is
        return samples  # type: ignore[no-any-return]
    diversity = _SliceDiversity(call)
    cap = SampleCap()

    def varied(
        base: Sequence[Sample], seed: int, dtype: torch.dtype | None, device: str
    ) -> list[Sample]:
        out = []
        for k, s in enumerate(base):
            keep = diversity.decide(k, cast_sample(s, dtype, device))
            varied_s = _perturbed(s, derive_seed("perturb", seed), keep) if seed else s
            out.append(cast_sample(varied_s, dtype, device))
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
            return [cast_sample(s, dtype, device) for s in _call_samples(samples, cap, seed)]

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


def base_samples(entry: Entry, options: Options) -> list[Sample]:
    """The samples the run starts from (seed as the runner derives it); UsageError if unusable."""
    from harness.engine.sample_cache import EntryData

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


def refuse_unfit_samples(entry: Entry, options: Options, *, spec: Any = None) -> None:
    """``SamplesError`` when a sample cannot call the Function with no transform at all
    (``harness.engine.probe``, in a forked child where it can; where this process cannot
    fork, in a fresh interpreter made from ``spec``, ``harness.sources.probe_elsewhere``):
    one line naming the sample, the call and the exception, with a hint when the source
    looked like one sample."""
    from harness.engine.fork_safety import unsafe_reason
    from harness.engine.forkpool import available
    from harness.engine.probe import probe_samples, refusal_line

    unsafe = available() and unsafe_reason()
    if unsafe and spec is not None:
        from harness.sources.probe_elsewhere import probe_in_fresh_interpreter

        refusal = probe_in_fresh_interpreter(spec, options)
    else:
        if unsafe:  # a Function passed as an object: nothing else can make it again
            print(
                f"note: process model: the samples' plain calls of {entry.name} run in this "
                f"process (forking it is not safe: {unsafe}; a Function passed as an object "
                "cannot be made again in a fresh interpreter)",
                file=sys.stderr,
            )
        refusal = probe_samples(entry, base_samples(entry, options), options.timeout_s)
    if refusal is None:
        return
    cap = getattr(entry.samples, "cap", None)
    hints = [cap.single] if isinstance(cap, SampleCap) and cap.single else []
    if options.dtype is not None:  # the run cast them: their own dtype may be what fits
        name = str(options.dtype).replace("torch.", "")
        hints.append(
            f"the samples were cast to {name} (--dtype {name}, dtype=); leave it out to keep "
            "their own dtypes"
        )
    raise SamplesError(refusal_line(entry, refusal, "; ".join(hints)))
