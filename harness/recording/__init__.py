"""Recording: the calls a program makes to its autograd.Functions, kept as data to check.

``with harness.recording(DIR) as recorder: ...`` (or ``afdb record``, or
``pytest --afdb-record``) observes every ``torch.autograd.Function.apply`` (and the
``torch.library`` custom ops of the namespaces named) while the program runs and writes,
on leaving (also on an exception or ``SystemExit``), up to K distinct calls per Function
to DIR: JSON validated by ``harness/schemas/recording.json`` and safetensors files, never
pickle. ``load_recording(DIR)`` reads one back, refusing a damaged or hostile one with one
line (``UsageError``).

Owns: the observer (``observer``), arguments as data (``values``, the kinds beyond plain
values in ``kinds``, their two refusals in ``data_errors``, types named by reference in
``refs``, live snapshots of what cannot be data in ``live``), which calls to keep
(``selection``), the safetensors reader/writer (``tensorfile``), the files on disk, their
validation and the merge of a pytest-xdist run's parts (``store``), the rules every reader
applies to a recording's names and files, one implementation (``rules``), what a recording holds
as read back (``model``) and its one-line summary (``summary``), the Function classes of
named packages (``packages``), the pytest session's recording (``pytest_session``).

Inside the wing the order runs one way: ``data_errors`` and ``refs`` <- ``kinds`` <-
``values`` <- ``live`` <- ``rules`` <- ``store`` <- ``observer`` <- this package's ``recording()``.

May import: torch, the standard library, ``harness.core`` (and pytest, in
``pytest_session`` only). Nothing above it: recording
runs no check (the commands and the plugin that check what was recorded sit above).
"""

from __future__ import annotations

import contextlib
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from harness.recording import store
from harness.recording.model import RecordedCall, RecordedFunction, Recording, SkippedCall
from harness.recording.observer import Recorder
from harness.recording.packages import check_sources
from harness.recording.store import RecordingError, load_recording

__all__ = [
    "RecordedCall",
    "RecordedFunction",
    "Recorder",
    "Recording",
    "RecordingError",
    "SkippedCall",
    "load_recording",
    "recording",
]


@contextlib.contextmanager
def recording(
    out_dir: str | Path,
    *,
    sources: tuple[str, ...] | list[str] = (),
    ops: tuple[str, ...] | list[str] = (),
    max_calls: int = 8,
    tensor_limit: int = 16 << 20,
    total_limit: int = 256 << 20,
    program: str | None = None,
) -> Iterator[Recorder]:
    """Observe the Functions called inside the block; write them to ``out_dir`` on leaving
    it, whatever way it is left. ``sources``: packages whose uncalled Functions are
    listed; ``ops``: custom op namespaces to record; limits in calls and bytes."""
    recorder = Recorder(
        out_dir,
        sources=tuple(sources),
        ops=tuple(ops),
        max_calls=max_calls,
        tensor_limit=tensor_limit,
        total_limit=total_limit,
        program=program,
    )
    check_sources(recorder.sources)
    store.check_target(recorder.out_dir)  # refused now, not after the program ran
    recorder.start()
    try:
        yield recorder
    finally:
        recorder.stop()
        recorder.write()


class _CallableModule(types.ModuleType):
    """``harness.recording(DIR)`` is ``harness.recording.recording(DIR)``."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return recording(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
