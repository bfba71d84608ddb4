"""What a reproducer script of a recorded case imports: the Function's entry, rebuilt from
the recording by the suite's own code, so the script reads each recorded call exactly as
the check read it (``Entry.make_samples`` is the check's sample building)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from harness.core.errors import UsageError


def recorded_entry(
    directory: str, target: str, declarations: Sequence[str] = (), cls: Any = None
) -> Any:
    """The entry of the recorded Function ``target`` (``cls``: its class when it cannot be
    imported by its target, e.g. rebuilt by its factory)."""
    from harness.recording import load_recording
    from harness.sources.declare import parse_declarations
    from harness.sources.recorded import recorded_entry as make

    function = load_recording(directory).function(target)
    if function is None:
        raise UsageError(f"the recording {directory} holds no Function {target}")
    found = make(
        function,
        classes={target: cls} if cls is not None else None,
        declarations=parse_declarations(declarations),
    )
    if found.entry is None:
        raise UsageError(f"{target}: {found.state}: {found.note}")
    return found.entry
