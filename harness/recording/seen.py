"""What the observer holds per Function while recording: its calls so far, their
snapshots, and why others were not recorded (``harness.recording.observer``)."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from harness.core.locations import portable_argv
from harness.recording.selection import Selector

#: Distinct skip reasons kept per Function; more are counted under one reason.
MAX_REASONS = 20
#: The classes of why a call was not recorded: over a size limit, a live value that could
#: not be copied (or changed during the call), one whose copy took too long, a value that
#: is not data (a meta tensor, a generator), a failure of the recorder itself.
SKIP_KINDS = ("limit", "not copyable", "slow copy", "not data", "recorder")


@dataclass
class Seen:
    """What one Function (or op) has seen so far."""

    target: str
    kind: str
    legacy: bool
    importable: bool
    call_count: int = 0
    under_transform: int = 0
    nested_in: set[str] = field(default_factory=set)
    keys: set[str] = field(default_factory=set)
    calls: list[tuple[dict[str, Any], list[torch.Tensor]]] = field(default_factory=list)
    skipped: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: Which calls to keep (``harness.recording.selection``), the bytes of each kept call,
    #: and the packages whose types (enums, namedtuples) the calls' values may name.
    selector: Selector = field(default_factory=lambda: Selector(8))
    sizes: list[int] = field(default_factory=list)
    allowed: frozenset[str] = frozenset({"torch"})
    #: Combination of each distinct call already seen, by ``values.fast_key`` (a repeat
    #: then costs no snapshot).
    fast: dict[Any, str] = field(default_factory=dict)
    #: Calls made only inside another Function (kept when no top-level call is).
    inner_calls: list[tuple[dict[str, Any], list[torch.Tensor]]] = field(default_factory=list)
    inner_keys: set[str] = field(default_factory=set)
    #: The live snapshots of calls that hold live values, by their place in ``calls``.
    live: dict[int, tuple[tuple[Any, ...], dict[str, Any], str]] = field(default_factory=dict)
    inner_live: dict[int, tuple[tuple[Any, ...], dict[str, Any], str]] = field(default_factory=dict)

    def skip(self, reason: str, where: str, order: list[int], kind: str = "not data") -> None:
        """Count a call not recorded; ``kind``: the class of the reason (``SKIP_KINDS``)."""
        if reason not in self.skipped and len(self.skipped) >= MAX_REASONS:
            reason = f"other calls not recorded (more than {MAX_REASONS} distinct reasons)"
        have = self.skipped.get(reason)
        if have is None:
            self.skipped[reason] = {
                "reason": reason,
                "where": where,
                "count": 1,
                "order": order,
                "kind": kind,
            }
        else:
            have["count"] += 1


def is_legacy(cls: type) -> bool:
    from torch.autograd.function import _is_setup_context_defined

    return not _is_setup_context_defined(cls.setup_context)  # type: ignore[attr-defined]


def op_target(op: Any) -> tuple[str, str]:
    """(namespace, ``torch.ops.ns.name[.overload]``) of an OpOverload or OpOverloadPacket."""
    qualified = getattr(op, "_qualified_op_name", None) or op._schema.name
    ns, _, name = qualified.partition("::")
    overload = getattr(op, "_overloadname", "default") or "default"
    target = f"torch.ops.{ns}.{name}" + ("" if overload == "default" else f".{overload}")
    return ns, target


def mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB"


def default_program() -> str:
    argv = portable_argv(list(sys.argv))
    if argv and os.path.isabs(argv[0]):  # a script outside the working directory
        argv[0] = ".../" + "/".join(Path(argv[0]).parts[-2:])
    return " ".join(argv)
