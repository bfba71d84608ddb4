"""The verdict cache: a rerun with nothing changed reuses each Function's cases, not rechecks.

A recorded Function's cases are decided by its code, its recorded calls, its declaration
and the run's settings; when none of them changed since a run that stored its cases, the
stored cases are its cases again (``pytest --afdb``; docs/pytest-plugin.md, "the verdict
cache"). The key of one Function is the sha256 of:

* the run's part (``run_key``): this format's version, the suite's own code (every ``.py``
  of ``harness`` and ``autograd_function_db``) and version, torch's and Python's versions,
  the options (checks, seed, dtype, batch sizes, plan cap, timeout...), the expectations
  file's bytes, the default declaration, the recording's folder as shown;
* the Function's part (``function_key``): its code (``harness.sources.code_digest``: the
  class, and what its methods reference in its own package, transitively), what its
  declaration made of it (gradient, capabilities, tolerances, dtypes), and the digest of
  its recorded calls (its part of ``recording.json`` and the bytes of its tensor file).

Never cached: a Function whose source cannot be read, one checked with live values of the
recording process (they are not in the recording's bytes), one with a timeout, crash or
internal case (those depend on the machine's load or on the suite), a run that selected
cases or Functions, or that was interrupted or stopped early. A cached failure stays a
failure: its cases, messages and repro commands are the stored ones.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.core.results import CRASH, INTERNAL, TIMEOUT, CaseResult, RunResult

#: The stored files' format; a new one makes every stored verdict a miss.
FORMAT = "afdb-verdicts/1"
#: Statuses never stored: they depend on the machine or on the suite, not on the Function.
_UNSTABLE = frozenset({TIMEOUT, CRASH, INTERNAL})
#: The largest stored file read back (a Function's cases, as the JSON report holds them).
MAX_FILE = 64 << 20
_SUITE_DIGEST: list[str] = []


class VerdictStore:
    """One JSON file per Function in a folder (pytest's: ``config.cache.mkdir``)."""

    def __init__(self, folder: Path, shown: str, clear_hint: str = "") -> None:
        self.folder = Path(folder)
        #: How messages name the folder (relative), and how to start afresh.
        self.shown = shown
        self.clear_hint = clear_hint

    def _path(self, target: str) -> Path:
        return self.folder / (hashlib.sha256(target.encode("utf-8")).hexdigest()[:32] + ".json")

    def read(self, target: str) -> dict[str, Any] | None:
        path = self._path(target)
        try:
            if path.is_symlink() or path.stat().st_size > MAX_FILE:
                return None
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return doc if isinstance(doc, dict) else None

    def write(self, target: str, doc: dict[str, Any]) -> None:
        path = self._path(target)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            tmp.write_text(json.dumps(doc), encoding="utf-8")
            os.replace(tmp, path)
        except OSError:  # a cache that cannot be written costs a recheck, nothing else
            with contextlib.suppress(OSError):
                tmp.unlink()

    def clear(self) -> int:
        """Remove every stored verdict; returns how many."""
        gone = 0
        for path in self._files():
            with contextlib.suppress(OSError):
                path.unlink()
                gone += 1
        return gone

    def _files(self) -> list[Path]:
        try:
            return [p for p in self.folder.iterdir() if p.suffix == ".json" and p.is_file()]
        except OSError:
            return []


def _sha(*parts: Any) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(json.dumps(p, sort_keys=True, default=repr).encode("utf-8") + b"\0")
    return h.hexdigest()


def suite_digest() -> str:
    """The suite's own code and version (once per process): a changed check is a miss."""
    if not _SUITE_DIGEST:
        import autograd_function_db
        import harness

        h = hashlib.sha256()
        for package in (harness, autograd_function_db):
            root = Path(package.__file__).parent
            for path in sorted(root.rglob("*.py")):
                h.update(path.relative_to(root).as_posix().encode() + b"\0")
                with contextlib.suppress(OSError):
                    h.update(path.read_bytes())
        version = getattr(autograd_function_db, "__version__", "")
        _SUITE_DIGEST.append(f"{version}:{h.hexdigest()}")
    return _SUITE_DIGEST[0]


def _file_sha(path: str | None) -> str:
    if not path:
        return ""
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return "unreadable"


def run_key(args: Any, options: Any, directory: str) -> str:
    """The run's part of every Function's key (see the module docstring)."""
    import torch

    from harness.core.locations import portable_path

    default = getattr(args, "default_declaration", None)
    return _sha(
        FORMAT,
        suite_digest(),
        torch.__version__,
        list(sys.version_info[:2]),
        options.to_dict(),
        _file_sha(getattr(args, "expectations", None)),
        repr(default),
        portable_path(directory),
    )


def recorded_data(directory: str) -> dict[str, str]:
    """The digest of each Function's recorded calls: its part of ``recording.json`` and its
    tensor file's bytes (the recording was validated when it was loaded)."""
    from harness.recording.store import INDEX, TENSOR_DIR

    folder = Path(directory)
    try:
        doc = json.loads((folder / INDEX).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    out: dict[str, str] = {}
    for fn in doc.get("functions", ()) if isinstance(doc, dict) else ():
        if not isinstance(fn, dict) or not isinstance(fn.get("target"), str):
            continue
        name = fn.get("tensors")
        tensors = ""
        if isinstance(name, str):
            if os.path.basename(name) != name or name in ("", ".", ".."):
                continue
            tensors = _file_sha(str(folder / TENSOR_DIR / name))
        out[fn["target"]] = _sha(fn, tensors)
    return out


def function_key(recorded: Any, data: str, run: str) -> dict[str, str] | None:
    """One Function's key (``key``) and its parts by what they stand for (a miss names
    the part that changed), or None when it cannot be cached (see the module docstring)."""
    from harness.sources.code_digest import NoSource, code_digest

    entry = recorded.entry
    if entry is None or not data or recorded.live_only:
        return None
    objects = [entry.function, *entry.helper_functions]
    if entry.custom_op is not None:
        fn = getattr(entry.custom_op, "_init_fn", None)
        if fn is None:
            return None
        objects = [fn]
    try:
        code = code_digest(*objects)
    except (NoSource, RecursionError):
        return None
    made = [
        getattr(recorded.declaration, "text", ""),
        entry.name,
        entry.gradient,
        repr(entry.caps),
        repr(entry.tolerances),
        [str(d) for d in entry.dtypes],
        [list(g) for g in entry.linked_args],
        sorted(entry.tags),
    ]
    shape = [
        recorded.state,
        recorded.legacy,
        list(recorded.never_differentiated),
        list(recorded.inside),
        list(recorded.places),
    ]
    parts = {"settings": run, "code": code, "declaration": _sha(made), "calls": _sha(shape, data)}
    return {"key": _sha(parts), **parts}


#: What a changed part of a key means, for the summary's line.
CHANGED = {
    "settings": "the suite, torch or the options changed",
    "code": "whose code changed",
    "declaration": "whose declaration changed",
    "calls": "whose recorded calls changed",
}


#: Why a Function is checked though nothing of its key changed.
_OTHER = {
    "new": "not in the cache",
    "live": "checked with live values (never cached)",
    "never": "whose source cannot be read (never cached)",
}


def changed(doc: dict[str, Any] | None, parts: dict[str, str]) -> str:
    """Which part of a stored Function's key no longer holds ('' if none was stored)."""
    if not doc or doc.get("format") != FORMAT or not isinstance(doc.get("parts"), dict):
        return ""
    old = doc["parts"]
    return next((k for k in CHANGED if old.get(k) != parts.get(k)), "")


def _cases(doc: dict[str, Any] | None, target: str, key: str) -> list[CaseResult] | None:
    """The stored cases of ``target`` when ``doc`` was stored under ``key``, else None."""
    if not doc or doc.get("format") != FORMAT or doc.get("key") != key:
        return None
    raw = doc.get("cases")
    if not isinstance(raw, list) or not raw:
        return None
    out = []
    for d in raw:
        if not isinstance(d, dict) or d.get("entry") != target:
            return None
        if not all(isinstance(d.get(k), str) for k in ("id", "check", "status")):
            return None
        try:
            out.append(CaseResult.from_dict(d))
        except TypeError:
            return None
    return out


@dataclass
class Reuse:
    """One run's use of the cache: what runs, what was reused, what to store after."""

    store: VerdictStore
    #: The entries that run (their Functions missed, or cannot be cached).
    entries: list[Any]
    #: Stored cases by target (the Functions whose verdicts come from the cache).
    cached: dict[str, list[CaseResult]] = field(default_factory=dict)
    #: The key parts to store each running Function's cases under (cacheable ones only).
    keys: dict[str, dict[str, str]] = field(default_factory=dict)
    #: Why each running Function missed: a part of ``CHANGED``, ``new`` or ``never``.
    missed: dict[str, str] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)

    def merge(self, result: RunResult) -> None:
        """Store the fresh cases of each cacheable Function, add the reused ones, in the
        recording's order; ``result.metadata['verdict_cache']`` says which were reused."""
        complete = not result.metadata.get("interrupted") and not result.metadata.get("stopped")
        fresh: dict[str, list[CaseResult]] = {}
        for c in result.cases:
            fresh.setdefault(c.entry, []).append(c)
        if complete:
            for target, parts in self.keys.items():
                cases = fresh.get(target)
                if not cases or any(c.status in _UNSTABLE for c in cases):
                    continue
                doc = {
                    "format": FORMAT,
                    "target": target,
                    "key": parts["key"],
                    "parts": {k: v for k, v in parts.items() if k != "key"},
                    "cases": [c.to_dict() for c in cases],
                }
                self.store.write(target, doc)
        place = {t: n for n, t in enumerate(self.order)}
        cases = [*result.cases, *(c for cs in self.cached.values() for c in cs)]
        cases.sort(key=lambda c: place.get(c.entry, len(place)))  # stable within a Function
        result.cases[:] = cases
        result.metadata["verdict_cache"] = {
            "folder": self.store.shown,
            "reused": sorted(self.cached),
            "checked": sorted(fresh),
            "why_checked": dict(sorted(self.missed.items())),
        }

    def note(self, line: str, target: str) -> str:
        """A verdict line, saying so when its cases came from the cache."""
        return f"{line}; from the cache" if target in self.cached else line

    def summary(self, checkable: int) -> str:
        """``afdb cache: 7 of 9 verdicts reused; checked: 2 whose recorded calls changed
        (.pytest_cache/d/afdb-verdicts; --afdb-cache-clear ...)``."""
        from collections import Counter

        why = Counter(self.missed.values())
        words = {**CHANGED, **_OTHER}
        checked = ", ".join(f"{n} {words[k]}" for k, n in why.items())
        said = f"; checked: {checked}" if checked else ""
        hint = f"; {self.store.clear_hint}" if self.store.clear_hint else ""
        return (
            f"verdict cache: {len(self.cached)} of {checkable} verdicts reused{said} "
            f"({self.store.shown}{hint})"
        )


def split(
    args: Any,
    options: Any,
    directory: str,
    recorded: Sequence[Any],
    live: Mapping[str, Any] | None = None,
) -> Reuse | None:
    """The run's use of ``args.verdict_cache`` (a ``VerdictStore``), or None when the run
    does not use one (none given, or a selection: a part of a Function's cases)."""
    store = getattr(args, "verdict_cache", None)
    if store is None or _selected(args):
        return None
    run = run_key(args, options, directory)
    data = recorded_data(directory)
    reuse = Reuse(store, [], order=[r.target for r in recorded])
    for r in recorded:
        if r.entry is None:
            continue
        parts = None
        is_live = r.target in (live or {}) or bool(r.live_only)
        if not is_live:
            parts = function_key(r, data.get(r.target, ""), run)
        doc = store.read(r.target) if parts else None
        stored = _cases(doc, r.target, parts["key"]) if parts else None
        if stored is not None:
            reuse.cached[r.target] = stored
            continue
        reuse.entries.append(r.entry)
        if parts:
            reuse.keys[r.target] = parts
        reuse.missed[r.target] = (
            (changed(doc, parts) or "new") if parts else ("live" if is_live else "never")
        )
    return reuse


def _selected(args: Any) -> bool:
    """A run of some cases only (a target, --last-failed, a shard, --maxfail): not cached."""
    return any(
        getattr(args, name, None)
        for name in ("target", "last_failed", "shard", "maxfail", "samples")
    )


__all__ = ["Reuse", "VerdictStore", "function_key", "run_key", "split"]
