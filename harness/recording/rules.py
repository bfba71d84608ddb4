"""The rules a recording's names and files obey: one implementation for every reader.

``afdb recording`` (the validator), ``load_recording`` and so ``afdb check --recorded``,
``pytest --afdb``, ``afdb repro --recorded`` and the merge of a pytest-xdist run's parts
all read a recording through ``store.read_raw``/``store.build``, which apply these rules;
the check that later imports a reference (``harness.sources.references``) applies the same
functions again before importing anything. Two kinds of rules:

* names (checked on reading, nothing imported): a reference (``{"ref": ...}``) names a
  module-level object of a package whose Functions the recording holds; a wrapper
  subclass's class lies in torch or one of those packages; both are ``module:QualName``
  of identifiers. Whether the name leads to an object of the recorded type can only be
  known by importing it, which only a check does (``harness.sources.references``);
* files: nothing under the recording is a link (``links_under``), so every byte read is
  the folder's own.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from harness.recording.live import Ref, Wrapped, placeholders
from harness.recording.refs import RefError, split_name, top_package

#: The most entries a recording folder's walk looks at (one tensor file per Function).
MAX_ENTRIES = 100_000


def own_packages(targets: Any) -> frozenset[str]:
    """The packages of the recorded Functions (``module:QualName`` targets): the only ones a
    reference may name (``torch`` too for a wrapper subclass's class)."""
    out = set()
    for target in targets:
        module = str(target).partition(":")[0]
        top = top_package(module) if module else ""
        if top and top != "__main__" and top.isidentifier():
            out.add(top)
    return frozenset(out)


def check_reference(target: Any, packages: frozenset[str]) -> None:
    """A reference names an object of the recording's own packages (RefError otherwise)."""
    module = split_name(target, "the reference", "; refused")[0]
    if top_package(module) not in packages or top_package(module) == "__main__":
        raise RefError(
            f"refers to {target!r}, outside the packages whose Functions the recording holds "
            f"({', '.join(sorted(packages)) or 'none'}); refused"
        )


def check_subclass(cls: Any, packages: frozenset[str]) -> None:
    """A wrapper subclass's class lies in torch or the recording's packages (RefError)."""
    module = split_name(cls, "the tensor subclass", "; refused")[0]
    if top_package(module) not in packages | {"torch"} or top_package(module) == "__main__":
        raise RefError(
            f"names the tensor subclass {cls!r}, outside torch and the packages whose "
            "Functions the recording holds; refused"
        )


def check_names(value: Any, packages: frozenset[str]) -> None:
    """Every reference and wrapper subclass a read-back value holds obeys the name rules
    (RefError, the first that does not); imports nothing."""
    stack = [value]
    while stack:
        for held in placeholders(stack.pop()):
            if isinstance(held, Ref):
                check_reference(held.target, packages)
            elif isinstance(held, Wrapped):
                check_subclass(held.cls, packages)
                stack.append(held.meta)


def links_under(folder: Path) -> Iterator[Path]:
    """Every link under ``folder`` (never followed), the folder itself not included;
    RefError past MAX_ENTRIES entries (not a folder a recording makes)."""
    seen = 0
    pending = [folder]
    while pending:
        current = pending.pop()
        with os.scandir(current) as entries:
            for entry in entries:
                seen += 1
                if seen > MAX_ENTRIES:
                    raise RefError(f"holds more than {MAX_ENTRIES} entries; not a recording")
                path = Path(entry.path)
                if entry.is_symlink():
                    yield path
                elif entry.is_dir(follow_symlinks=False):
                    pending.append(path)
