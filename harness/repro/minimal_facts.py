"""What the minimal-script generator learns from a case before writing anything.

``CaseFacts`` draws the case's sample as the suite does and calls the Function once: its
arguments, which are differentiable, its outputs' shapes and dtypes, the suite's
tolerances; a case the short form cannot cover raises ``NotMinimal`` here, saying why.
``DiffNames`` follows from them: how the script names the Function of its differentiable
arguments. Shared by every minimal body (``minimal``, ``minimal_autodiff``,
``minimal_composite``).
"""

from __future__ import annotations

from typing import Any

import torch

from autograd_function_db.entry import Entry
from harness.checks import finite_diff as fd
from harness.checks.autodiff_refs import eager_outputs
from harness.core.options import Options, sample_dtype
from harness.engine.cases import Case
from harness.engine.sample_cache import EntryData
from harness.plans.plan import MID, resolve_out_dim


class NotMinimal(Exception):
    """The case needs the full script (the message says why, in a few words)."""


def dtype_name(dtype: torch.dtype) -> str:
    """The dtype as the script spells it (``torch.<name>``), or ``NotMinimal``."""
    name = str(dtype).replace("torch.", "")
    if not isinstance(getattr(torch, name, None), torch.dtype):
        raise NotMinimal(f"dtype {dtype}")
    return name


class CaseFacts:
    """The case's sample, drawn, and what one call of the Function on it returns."""

    def __init__(self, entry: Entry, options: Options, case: Case) -> None:
        if case.sample_index is None:
            raise NotMinimal("a case of no one sample")
        if entry.caps.randomness:
            raise NotMinimal("a Function that uses randomness")
        if entry.caps.inplace_args:
            raise NotMinimal("arguments modified in place")
        self.args = EntryData(entry, options).slices(case.sample_index).args(())
        for a in self.args:
            if isinstance(a, (tuple, list, dict)):
                raise NotMinimal("container arguments (tuples, lists, dicts of tensors)")
            if isinstance(a, torch.Tensor) and a.is_complex():
                raise NotMinimal("complex arguments")
        dtype = options.dtype or sample_dtype(self.args) or torch.float64
        self.rtol, self.atol = entry.tolerances.for_dtype(dtype)
        self.dtype = dtype_name(dtype)
        self.diff = tuple(i for i, a in enumerate(self.args) if fd.is_differentiable_dtype(a))
        probe = entry.call(*[a.clone() if isinstance(a, torch.Tensor) else a for a in self.args])
        self.single = isinstance(probe, torch.Tensor)
        if not self.single and not (
            isinstance(probe, (tuple, list)) and all(isinstance(o, torch.Tensor) for o in probe)
        ):
            raise NotMinimal("outputs other than a tensor or a tuple of tensors")

        def flat(*a: Any) -> tuple[Any, ...]:
            out = entry.call(*a)
            return (out,) if isinstance(out, torch.Tensor) else tuple(out)

        outputs, marked = eager_outputs(flat, self.args, self.diff)
        if any(o.is_complex() for o in outputs):
            raise NotMinimal("complex outputs")
        self.outputs = outputs
        self.outs = tuple(
            j
            for j, o in enumerate(outputs)
            if fd.is_differentiable_dtype(o) and j not in entry.caps.nondiff_outputs
            and j not in marked
        )  # fmt: skip

    def level(self, case: Case) -> Any:
        if case.plan is None or len(case.plan.levels) != 1:
            raise NotMinimal("nested vmap levels")
        return case.plan.levels[0]

    def out_dims(self, lv: Any) -> list[int]:
        """The level's out_dims per output ("mid": the interior position of each)."""
        return [
            resolve_out_dim(MID, o.dim()) if lv.out_dims == MID else lv.out_dims
            for o in self.outputs
        ]


class DiffNames:
    """How a script names the Function of its differentiable arguments: ``call`` itself when
    every argument and output is differentiable, else ``f`` (the others fixed to ``base``)."""

    def __init__(self, facts: CaseFacts) -> None:
        self.diff, self.outs = facts.diff, facts.outs
        self.simple = self.diff == tuple(range(len(facts.args))) and self.outs == tuple(
            range(len(facts.outputs))
        )

    def defs(self, base: str = "") -> list[str]:
        """DIFF, OUTS and ``f`` (``base``: the default of its fixed arguments)."""
        if self.simple:
            return []
        self.base = base
        return [
            f"DIFF, OUTS = {self.diff!r}, {self.outs!r}  # the differentiable arguments, outputs",
            "",
            f"def f(*xs, base{'=' + base if base else ''}, fn=call):  # fn of the arguments at "
            "DIFF (the others from base)",
            "    a = [xs[DIFF.index(i)] if i in DIFF else v for i, v in enumerate(base)]",
            "    return tuple(fn(*a)[j] for j in OUTS)",
            "",
        ]

    base = ""

    def of(self, base: str, fn: str = "call") -> str:
        """A callable of the differentiable arguments, the others from ``base``."""
        if self.simple:
            return fn
        if base == self.base and fn == "call":
            return "f"
        return f"lambda *x: f(*x, base={base}{'' if fn == 'call' else ', fn=' + fn})"

    def apply(self, base: str, args: str) -> str:
        """The call of that callable on the list ``args``."""
        return f"call(*{args})" if self.simple else f"f(*{args}, base={base})"

    def pick(self, args: str) -> str:
        """The differentiable ones of the arguments ``args``."""
        if self.simple:
            return args if args.endswith("]") else f"list({args})"
        return f"[{args}[i] for i in DIFF]"
