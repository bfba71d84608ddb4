"""A recording's Functions as entries, or the reason one cannot be checked.

Each recorded Function with at least one recorded call becomes an ``Entry`` named by its
target (``mylib.ops:SoftSort``) whose samples are its recorded calls as they were made
(``harness.sources.recorded_samples``: the base slice is the call itself; other slices take the
Function's other calls where they stack, else noise only on the tensors a call
differentiated or an argument declared ``perturb-args``).
The class is the live one when the recording process checks (``classes``), else imported
again by its target; a class that cannot be (``__main__``, ``<locals>``) is reported as
such with how to check it, never skipped silently.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from autograd_function_db.entry import Entry, Sample
from harness.core.errors import UsageError
from harness.plans.pytrees import leaves
from harness.recording.rules import own_packages
from harness.sources.declare import Declaration

#: What each recorded Function became (``RecordedEntry.state``).
CHECKED = "checked"
NEVER_CALLED = "never called"
NOT_RECORDABLE = "not recordable"
NOT_IMPORTABLE = "not importable"
NESTED_ONLY = "nested only"
#: Recorded as data, but an argument is of a kind the checks do not take (sparse, quantized).
NOT_CHECKABLE = "not checkable"
#: Every recorded call holds a value only the recording process had (a lambda, a module).
LIVE_ONLY = "live only"
#: What a check in another process says about such calls (and under pytest-xdist).
NEEDS_PROCESS = "the recording process: run `pytest --afdb` or `afdb record --check`"
NEEDS_PROCESS_XDIST = (
    "the recording process (a pytest-xdist worker): run `pytest --afdb` without -n"
)


def needs_process(n: int, advice: str = NEEDS_PROCESS) -> str:
    """``2 calls need the recording process: run ...``."""
    return f"{n} call{'s need' if n != 1 else ' needs'} {advice}"


@dataclass(frozen=True)
class RecordedEntry:
    """One recorded Function: its entry when it can be checked, else why not."""

    target: str
    state: str
    entry: Entry | None = None
    note: str = ""
    legacy: bool = False
    #: How many calls the program made, and the places (tests, file:line) of the recorded ones.
    call_count: int = 0
    places: tuple[str, ...] = ()
    #: Floating tensor arguments no recorded call had requires_grad on.
    never_differentiated: tuple[int, ...] = ()
    declaration: Declaration | None = None
    nested_in: tuple[str, ...] = field(default_factory=tuple)
    #: Recorded calls left out here because they hold live values (see ``LIVE_ONLY``).
    live_only: int = 0
    live_note: str = ""
    #: Where the checked calls came from when every one was made inside another Function.
    inside: tuple[str, ...] = ()
    #: Why its calls were not recorded, by class (``harness.recording.seen.SKIP_KINDS``),
    #: the most frequent first.
    skip_kinds: tuple[str, ...] = ()
    #: Every call was made under a torch.func transform (none could be recorded).
    only_under_transform: bool = False


def _custom_op(target: str) -> Any:
    """``ns::name`` (or ``ns::name.overload``) as the torch.ops object."""
    qual = target.split(":", 2)[-1] if "::" not in target else target
    ns, _, rest = qual.partition("::")
    name, _, overload = rest.partition(".")
    try:
        packet = getattr(getattr(torch.ops, ns), name)
        return getattr(packet, overload) if overload else packet
    except (AttributeError, RuntimeError) as e:
        raise UsageError(f"custom op {target}: not registered in this process ({e})") from None


def _positional(cls: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any], legacy: bool) -> tuple:
    """A recorded call's arguments as one positional tuple (samples are positional)."""
    if not kwargs:
        return tuple(args)
    forward = getattr(cls, "forward", None)
    try:
        params = list(inspect.signature(forward).parameters.values())  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise UsageError(
            "its forward's signature cannot be read to place keyword arguments"
        ) from None
    if legacy and params:
        params = params[1:]  # ctx
    sig = inspect.Signature(params)
    try:
        bound = sig.bind(*args, **kwargs)
    except TypeError as e:
        raise UsageError(f"its keyword arguments do not bind to forward: {e}") from None
    bound.apply_defaults()
    return tuple(bound.args)


def never_differentiated(samples: Sequence[Sample], requires: Sequence[Sequence[bool]]) -> tuple:
    """Positions of floating tensor arguments that no call had requires_grad on."""
    if not samples:
        return ()
    out = []
    for i in range(len(samples[0].args)):
        floating = all(
            any(
                isinstance(v, torch.Tensor) and (v.is_floating_point() or v.is_complex())
                for _, v in leaves(s.args[i])
            )
            for s in samples
            if i < len(s.args)
        )
        if floating and not any(r[i] for r in requires if i < len(r)):
            out.append(i)
    return tuple(out)


def _requires_grad(args: tuple[Any, ...]) -> list[bool]:
    return [
        any(isinstance(v, torch.Tensor) and v.requires_grad for _, v in leaves(a)) for a in args
    ]


def _detached(args: tuple[Any, ...]) -> tuple[Any, ...]:
    from harness.plans.pytrees import map_leaves

    return tuple(
        map_leaves(a, lambda _k, v: v.detach() if isinstance(v, torch.Tensor) else v) for a in args
    )


def _unsupported_argument(calls: Sequence[tuple[Any, ...]]) -> str:
    """Why the recorded calls cannot be checked although they were recorded ("" if they
    can): the checks batch, clone and compare strided dense tensors only."""
    for args in calls:
        for i, a in enumerate(args):
            for _, v in leaves(a):
                if isinstance(v, torch.Tensor) and (v.layout != torch.strided or v.is_quantized):
                    if v.layout == torch.sparse_coo and not v.requires_grad:
                        continue  # data no call differentiates: passed as recorded
                    kind = "quantized" if v.is_quantized else str(v.layout).removeprefix("torch.")
                    return (
                        f"argument {i} is a {kind} tensor: recorded exactly, but the checks take "
                        "strided dense tensors only"
                    )
    return ""


def sparse_data(calls: Sequence[tuple[Any, ...]]) -> tuple[int, ...]:
    """Positions of arguments that hold a sparse COO tensor in some call (no call
    differentiates them: ``_unsupported_argument`` refuses the others)."""
    return tuple(
        sorted(
            {
                i
                for args in calls
                for i, a in enumerate(args)
                for _, v in leaves(a)
                if isinstance(v, torch.Tensor) and v.layout == torch.sparse_coo
            }
        )
    )


def _calls_as_made(
    target: str,
    samples: Sequence[Sample],
    positional: Sequence[tuple[Any, ...]],
    perturb_args: Sequence[int],
) -> Any:
    """The samples of a recorded Function: each call as made for the base slice, distinct
    data for the others where the forward accepts it (``harness.sources.recorded_samples``)."""
    from harness.sources.recorded_samples import RecordedSamples, differentiated_leaves

    return RecordedSamples(samples, differentiated_leaves(positional), perturb_args, target)


#: Why a class that cannot be imported again was not checked, and how to check it.
UNIMPORTABLE = (
    "defined where it cannot be imported again (__main__, a function or a test): it is "
    "checked only in the recording process, with `afdb record --check` or `pytest --afdb`"
)
#: The same under pytest-xdist: a worker recorded it, the controller cannot load it.
UNIMPORTABLE_XDIST = (
    "defined where it cannot be imported again (a function or a test) and recorded by a "
    "pytest-xdist worker, so the controller cannot check it: run `pytest --afdb` without -n"
)


def _load_class(function: Any, classes: Mapping[str, Any] | None, unimportable: str) -> Any:
    """The live class (the recording process) or the one imported by its target."""
    if classes and function.target in classes:
        return classes[function.target]
    if function.kind == "custom_op":
        return _custom_op(function.target)
    if not function.importable:
        raise UsageError(unimportable)
    from harness.sources.imports import load_attr

    return load_attr(function.target, "recorded Function")


def recorded_entry(
    function: Any,
    *,
    classes: Mapping[str, Any] | None = None,
    declarations: Mapping[str, Declaration] | None = None,
    default: Declaration | None = None,
    unimportable: str = UNIMPORTABLE,
    live: Mapping[int, tuple[Any, ...]] | None = None,
    packages: frozenset[str] = frozenset(),
) -> RecordedEntry:
    """One ``RecordedFunction`` as a ``RecordedEntry``; ``default`` applies where no
    declaration names the Function (the command line's own capability flags); ``live``:
    the recording process's snapshots of the calls that hold live values, by their place;
    ``packages``: the only packages a recorded reference may be imported from."""
    from harness.recording.live import Live, placeholders
    from harness.sources.entries import make_entry
    from harness.sources.references import resolve

    decl = (declarations or {}).get(function.target) or default
    common: dict[str, Any] = {
        "legacy": bool(function.legacy),
        "call_count": int(function.call_count),
        "places": tuple(
            dict.fromkeys(
                [c.where.split(" (inside ", 1)[0] for c in function.calls if c.where]
                + [s.where for s in function.skipped if s.where]
            )
        ),
        "declaration": decl,
        "nested_in": tuple(function.nested_in),
    }
    kinds: dict[str, int] = {}
    for s in function.skipped:
        kind = getattr(s, "kind", "") or "not data"
        kinds[kind] = kinds.get(kind, 0) + int(getattr(s, "count", 1))
    common["skip_kinds"] = tuple(sorted(kinds, key=lambda k: -kinds[k]))
    if not function.calls:
        if function.skipped:
            first = function.skipped[0]
            more = sum(int(getattr(s, "count", 1)) for s in function.skipped) - 1
            note = f"{first.reason} ({first.where})" if first.where else first.reason
            if more > 0:
                note += f"; and {more} more call{'s' if more > 1 else ''} not recordable"
            return RecordedEntry(function.target, NOT_RECORDABLE, note=note, **common)
        under = int(getattr(function, "under_transform", 0) or 0)
        if under and not function.nested_in:
            return RecordedEntry(
                function.target,
                NOT_RECORDABLE,
                only_under_transform=True,
                note=f"called only under a torch.func transform ({under} calls; their "
                "arguments are wrapped tensors): call it once outside a transform to record it",
                **common,
            )
        if function.nested_in:
            inside = ", ".join(function.nested_in)
            return RecordedEntry(
                function.target,
                NESTED_ONLY,
                note=f"called only inside {inside}, which is checked with it; call it directly "
                "in a test to check it on its own",
                **common,
            )
        return RecordedEntry(function.target, NEVER_CALLED, **common)
    inside_of: tuple[str, ...] = ()
    if function.calls and all(" (inside " in c.where for c in function.calls):
        inside_of = tuple(
            dict.fromkeys(c.where.split(" (inside ", 1)[1].rstrip(")") for c in function.calls)
        )
    common["inside"] = inside_of
    # the calls as this process can check them: live snapshots, references imported again
    calls: list[tuple[int, Any, tuple[Any, ...], dict[str, Any]]] = []
    needs = 0
    for i, call in enumerate(function.calls):
        held = placeholders([call.args, call.kwargs])
        if not held:
            calls.append((i, call, tuple(call.args), dict(call.kwargs)))
        elif live and i in live:
            calls.append((i, call, tuple(live[i][0]), dict(live[i][1])))
        elif any(isinstance(h, Live) for h in held):
            needs += 1
        else:
            where = f"{function.target} call {i}"
            calls.append(
                (
                    i,
                    call,
                    resolve(tuple(call.args), packages, where),
                    dict(resolve(dict(call.kwargs), packages, where)),
                )
            )
    common["live_only"] = needs
    advice = NEEDS_PROCESS_XDIST if unimportable == UNIMPORTABLE_XDIST else NEEDS_PROCESS
    common["live_note"] = needs_process(needs, advice) if needs else ""
    if not calls:
        return RecordedEntry(function.target, LIVE_ONLY, note=common["live_note"], **common)
    try:
        cls = _load_class(function, classes, unimportable)
    except UsageError as e:
        return RecordedEntry(function.target, NOT_IMPORTABLE, note=str(e), **common)
    samples: list[Sample] = []
    requires: list[list[bool]] = []
    problems: list[str] = []
    positional: list[tuple[Any, ...]] = []
    for i, call, call_args, call_kwargs in calls:
        try:
            args = _positional(cls, call_args, call_kwargs, bool(function.legacy))
        except UsageError as e:
            problems.append(f"call {i} ({call.where}): {e}")
            continue
        requires.append(_requires_grad(args))
        positional.append(args)
        samples.append(Sample(_detached(args), f"call{i}"))
    if not samples:
        return RecordedEntry(function.target, NOT_RECORDABLE, note="; ".join(problems), **common)
    unsupported = _unsupported_argument(positional)
    if unsupported:
        return RecordedEntry(function.target, NOT_CHECKABLE, note=unsupported, **common)
    gradient = decl.gradient if decl else "derivative"
    caps = dict(decl.capabilities) if decl else {}
    sparse = sparse_data(positional)
    if sparse:  # data no call differentiated: held fixed, as a declaration would
        caps["nondiff_args"] = tuple(sorted({*caps.get("nondiff_args", ()), *sparse}))
    # which inputs the program differentiated together (harness.checks.recorded_use)
    caps["grad_patterns"] = tuple(
        sorted({tuple(i for i, r in enumerate(req) if r) for req in requires})
    )
    source = _calls_as_made(function.target, samples, positional, caps.pop("perturb_args", ()))
    try:
        entry = make_entry(cls, source, name=function.target, gradient=gradient, **caps)
    except UsageError as e:
        return RecordedEntry(function.target, NOT_IMPORTABLE, note=str(e), **common)
    source.accept_with(entry.call)  # the forward decides which arguments may vary per slice
    skipped_nondiff = set(caps.get("nondiff_args", ()))
    never = tuple(i for i in never_differentiated(samples, requires) if i not in skipped_nondiff)
    return RecordedEntry(
        function.target, CHECKED, entry=entry, never_differentiated=never, **common
    )


def recorded_entries(
    recording: Any,
    *,
    classes: Mapping[str, Any] | None = None,
    declarations: Mapping[str, Declaration] | None = None,
    default: Declaration | None = None,
    unimportable: str = UNIMPORTABLE,
    live: Mapping[str, Mapping[int, tuple[Any, ...]]] | None = None,
) -> list[RecordedEntry]:
    """Every Function of the recording (its order), then those of ``--source`` never called.
    ``live``: the recording process's live snapshots by target (``Recorder.live_calls``)."""
    packages = own_packages(f.target for f in recording.functions if f.kind == "function")
    out = [
        recorded_entry(
            f,
            classes=classes,
            declarations=declarations,
            default=default,
            unimportable=unimportable,
            live=(live or {}).get(f.target),
            packages=packages,
        )
        for f in recording.functions
    ]
    seen = {r.target for r in out}
    out += [RecordedEntry(t, NEVER_CALLED) for t in recording.never_called if t not in seen]
    return out
