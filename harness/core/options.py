"""Run options: one frozen object that every layer (plans, checks, runner, reports) reads."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch

from harness.core.dtype_names import DTYPE_NAMES, SAMPLE_DTYPES

DTYPES: dict[str, torch.dtype] = {name: getattr(torch, name) for name in DTYPE_NAMES}


def dtype_name(dtype: torch.dtype | None) -> str:
    """``float32`` for torch.float32; ``samples`` for None (the samples' own dtypes)."""
    return SAMPLE_DTYPES if dtype is None else str(dtype).replace("torch.", "")


def parse_dtype(name: str | None) -> torch.dtype | None:
    """The inverse of ``dtype_name`` (KeyError for an unknown name)."""
    return None if name in (None, SAMPLE_DTYPES) else DTYPES[name]


def sample_dtype_name(args: Any) -> str:
    """The floating/complex dtypes of a sample's tensors, e.g. ``float64`` or ``float32+float64``."""
    names = sorted(
        {
            dtype_name(a.dtype)
            for a in args
            if isinstance(a, torch.Tensor) and (a.is_floating_point() or a.is_complex())
        }
    )
    return "+".join(names) if names else "none"


def sample_dtype(args: Any) -> torch.dtype | None:
    """The least precise floating/complex dtype among a sample's tensors (None: none)."""
    dts = [
        a.dtype
        for a in args
        if isinstance(a, torch.Tensor) and (a.is_floating_point() or a.is_complex())
    ]
    if not dts:
        return None
    return max(dts, key=lambda d: torch.finfo(d).eps)


@dataclass(frozen=True)
class Options:
    checks: tuple[str, ...] | None = None  # None: every check
    batch_sizes: tuple[int, ...] = (2,)
    nested_batch_sizes: tuple[int, ...] = (2, 3)
    chunk: tuple[int, int] = (3, 2)  # (batch size, chunk size)
    seed: int = 0
    #: None: every sample keeps its own dtypes (``afdb check``'s default); else floating
    #: (complex) sample tensors are cast to it.
    dtype: torch.dtype | None = torch.float32
    device: str = "cpu"
    plan_cap: int = 16
    timeout_s: float | None = None
    #: Set when the harness chose batch sizes to avoid a user's sample dims.
    batch_size_note: str = ""
    #: Set when some argument is the same in every slice (samples without a seed).
    slice_note: str = ""
    #: Opt-in: the vmap_hazard pass (batch sizes equal to sample dims).
    hazard_probe: bool = False
    #: Set when the samples were capped (a source that gave more than the suite takes).
    samples_note: str = ""

    def hazard_sizes(self) -> tuple[int, ...]:
        sizes = {*self.batch_sizes, *self.nested_batch_sizes, *self.chunk}
        return tuple(sorted(sizes))

    def replace(self, **changes: Any) -> Options:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return {
            "checks": list(self.checks) if self.checks else None,
            "batch_sizes": list(self.batch_sizes),
            "nested_batch_sizes": list(self.nested_batch_sizes),
            "chunk": list(self.chunk),
            "seed": self.seed,
            "dtype": dtype_name(self.dtype),
            "device": self.device,
            "plan_cap": self.plan_cap,
            "timeout_s": self.timeout_s,
            "batch_size_note": self.batch_size_note,
            "slice_note": self.slice_note,
            "hazard_probe": self.hazard_probe,
            "samples_note": self.samples_note,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Options:
        return cls(
            checks=tuple(d["checks"]) if d.get("checks") else None,
            batch_sizes=tuple(d.get("batch_sizes", (2,))),
            nested_batch_sizes=tuple(d.get("nested_batch_sizes", (2, 3))),
            chunk=tuple(d.get("chunk", (3, 2))),  # type: ignore[arg-type]
            seed=int(d.get("seed", 0)),
            dtype=parse_dtype(d.get("dtype", "float32")),
            device=d.get("device", "cpu"),
            plan_cap=int(d.get("plan_cap", 16)),
            timeout_s=d.get("timeout_s"),
            batch_size_note=d.get("batch_size_note", ""),
            slice_note=d.get("slice_note", ""),
            hazard_probe=bool(d.get("hazard_probe", False)),
            samples_note=str(d.get("samples_note", "")),
        )
