"""What a recording holds, as the reader gives it back: frozen dataclasses, plain values.

The calls hold rebuilt arguments (tensors with their recorded ``requires_grad``, dtype,
device, strides), so they compare by identity, not by value (a tensor has no single
truth value).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class SkippedCall:
    """Calls not kept as samples, for one reason: where the first was made and how many."""

    reason: str
    where: str
    count: int = 1
    #: The class of the reason (``harness.recording.seen.SKIP_KINDS``); '' when unknown.
    kind: str = ""


@dataclass(frozen=True)
class NotKept:
    """An argument combination the program called but the recording kept no call of (the
    per-Function cap was reached): as the call's arguments read, where first, how often."""

    combination: str
    where: str
    count: int = 1


@dataclass(frozen=True, eq=False)
class RecordedCall:
    """One distinct call: its arguments rebuilt, and where it was made (a pytest node id or
    ``path/file.py:LINE``)."""

    args: tuple[Any, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)
    where: str = ""


@dataclass(frozen=True, eq=False)
class RecordedFunction:
    """A Function class (or a custom op) the program called, with up to K distinct calls.

    ``call_count`` counts every call seen (recorded, repeated, skipped, nested, under a
    transform); ``nested_in`` names where the calls made inside another Function's
    staticmethod were made (``mylib.ops:Outer.forward``); ``under_transform`` counts the
    calls made while a torch.func transform was active. None of those are samples.
    """

    target: str
    kind: str
    legacy: bool
    importable: bool
    calls: tuple[RecordedCall, ...]
    call_count: int
    skipped: tuple[SkippedCall, ...] = ()
    nested_in: tuple[str, ...] = ()
    under_transform: int = 0
    not_kept: tuple[NotKept, ...] = ()


@dataclass(frozen=True, eq=False)
class Recording:
    """A whole recording: its Functions sorted by target, the Functions of the named source
    packages that no call reached, and the program that ran (portable)."""

    functions: tuple[RecordedFunction, ...]
    never_called: tuple[str, ...] = ()
    program: str = ""

    def function(self, target: str) -> RecordedFunction | None:
        """The Function recorded under ``target`` (``module:QualName``), or None."""
        return next((f for f in self.functions if f.target == target), None)

    @property
    def call_count(self) -> int:
        """The distinct calls kept as samples, over every Function."""
        return sum(len(f.calls) for f in self.functions)

    @property
    def skipped_count(self) -> int:
        """The calls not kept because an argument was not recordable or over a limit."""
        return sum(s.count for f in self.functions for s in f.skipped)
