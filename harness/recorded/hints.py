"""What a recorded Function's failing cases may advise, from the Function's own behaviour.

Two probes, run on the recorded calls (the unbatched samples the check built) only for a
Function that already failed, never to decide a status:

* ``gradient_presence``: does the Function itself treat an argument as non-differentiable?
  For an argument no recorded call differentiated, each call is made with that argument
  alone requiring grad, then with every floating argument requiring grad, and its
  gradient read with ``torch.autograd.grad``. ``nondiff-args=N`` is offered only where
  every call in both ways gave no gradient (the backward returned None, or the forward
  kept the argument out of the graph); a gradient in some calls or ways and not in others,
  or a gradient the check found wrong, is named as such, with a warning that declaring
  the argument away would hide it.
* ``looks_like_surrogate``: at every recorded call the forward is locally constant (central
  differences in float64 exactly zero in random directions) while the backward returns a
  non-zero gradient: a surrogate or straight-through gradient, to declare if intended.

A probe that raises says nothing (the check's cases already carry that failure).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

#: At most this many recorded calls are probed per Function.
MAX_CALLS = 8
#: What ``gradient_presence`` finds for one argument.
NONE = "none"  # no gradient in any call, either way: the Function treats it as non-differentiable
SOME = "some"  # a gradient in some calls or ways, none in others
ALWAYS = "always"  # a gradient in every call and way


def _floating(v: Any) -> bool:
    return isinstance(v, torch.Tensor) and (v.is_floating_point() or v.is_complex())


def _outputs(out: Any) -> list[torch.Tensor]:
    from harness.plans.pytrees import leaves

    return [v for _, v in leaves(out) if isinstance(v, torch.Tensor) and v.requires_grad]


def _grad_of(entry: Any, args: Sequence[Any], wanted: int, needing: Sequence[int]) -> bool | None:
    """Whether the call with the arguments at ``needing`` requiring grad gives a gradient
    for argument ``wanted`` (None: the call or its backward raised)."""
    call = [a.detach().clone() if isinstance(a, torch.Tensor) else a for a in args]
    for i in needing:
        call[i] = call[i].requires_grad_(True)
    try:
        with torch.enable_grad():
            outs = _outputs(entry.call(*call))
            if not outs:
                return False  # the forward kept it out of the graph
            grads = torch.autograd.grad(
                outs, [call[wanted]], [torch.ones_like(o) for o in outs], allow_unused=True
            )
    except Exception:  # noqa: BLE001 - the cases already report a Function that raises
        return None
    return grads[0] is not None


def gradient_presence(entry: Any, samples: Sequence[Any], wanted: int) -> tuple[str, str]:
    """(NONE / SOME / ALWAYS or '' when the probe could not run, a few words on when a
    gradient came: 'only when another argument needs one too')."""
    seen: dict[str, set[bool]] = {"alone": set(), "all": set()}
    for sample in list(samples)[:MAX_CALLS]:
        args = tuple(sample.args)
        if wanted >= len(args) or not _floating(args[wanted]):
            return "", ""
        diff = [i for i, a in enumerate(args) if _floating(a) and i not in entry.caps.nondiff_args]
        for way, needing in (("alone", [wanted]), ("all", sorted({*diff, wanted}))):
            got = _grad_of(entry, args, wanted, needing)
            if got is None:
                return "", ""
            seen[way].add(got)
    every = seen["alone"] | seen["all"]
    if every == {False}:
        return NONE, ""
    if every == {True}:
        return ALWAYS, ""
    if seen["alone"] == {False} and seen["all"] == {True}:
        return SOME, "only when another argument needs a gradient too"
    return SOME, "in some recorded calls and not in others"


def _flat_difference(entry: Any, args: Sequence[Any], diff: Sequence[int]) -> bool | None:
    """Whether central differences of the forward are exactly zero at ``args`` in two random
    directions of the differentiable arguments, in float64 where the Function runs there
    (else at its own dtype); None: it cannot be told."""
    try:
        with torch.no_grad():
            entry.call(*[a.detach().double() if i in diff else a for i, a in enumerate(args)])
        wide = True
    except Exception:  # noqa: BLE001 - a Function that runs at its own dtype only
        wide = False
    gen = torch.Generator().manual_seed(20240607)
    base = [a.detach().double() if i in diff else a for i, a in enumerate(args)]
    try:
        with torch.no_grad():
            for _ in range(2):
                moved = []
                for sign in (1.0, -1.0):
                    call = list(base)
                    for i in diff:
                        x = base[i]
                        t = torch.randn(x.shape, generator=gen, dtype=torch.float64)
                        step = 1e-6 * max(1.0, float(x.abs().max()) if x.numel() else 1.0)
                        moved_x = x + sign * step * t
                        call[i] = moved_x if wide else moved_x.to(args[i].dtype)
                    moved.append([o.double() for o in _all_outputs(entry.call(*call))])
                if not moved[0] or any(not torch.equal(p, m) for p, m in zip(*moved)):
                    return False
    except Exception:  # noqa: BLE001
        return None
    return True


def _all_outputs(out: Any) -> list[torch.Tensor]:
    from harness.plans.pytrees import leaves

    return [v for _, v in leaves(out) if isinstance(v, torch.Tensor) and v.is_floating_point()]


def looks_like_surrogate(entry: Any, samples: Sequence[Any]) -> bool:
    """The forward is locally constant at every recorded call (finite differences exactly
    zero) and the backward is not (a non-zero gradient for some differentiable argument)."""
    calls = list(samples)[:MAX_CALLS]
    if not calls:
        return False
    for sample in calls:
        args = tuple(sample.args)
        diff = [
            i
            for i, a in enumerate(args)
            if isinstance(a, torch.Tensor) and a.is_floating_point() and a.numel()
            and i not in entry.caps.nondiff_args
        ]  # fmt: skip
        if not diff or not _flat_difference(entry, args, diff):
            return False
        call = [
            a.detach().clone().requires_grad_(True) if i in diff else a for i, a in enumerate(args)
        ]
        try:
            with torch.enable_grad():
                outs = _outputs(entry.call(*call))
                if not outs:
                    return False
                grads = torch.autograd.grad(
                    outs, [call[i] for i in diff], [torch.ones_like(o) for o in outs],
                    allow_unused=True,
                )  # fmt: skip
        except Exception:  # noqa: BLE001
            return False
        if not any(g is not None and bool(g.detach().ne(0).any()) for g in grads):
            return False
    return True


def surrogate_hint(target: str) -> str:
    """The verdict line's advice for a Function ``looks_like_surrogate`` found."""
    return (
        "looks like a surrogate/straight-through gradient: if intended, declare "
        f"'{target} gradient=custom'"
    )
