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
  class, and what its methods reference in its own package, transitively), the code of
  what its calls name (a module-level function passed by reference, the types of its
  enums, dataclasses, tensor subclasses), what its declaration made of it (gradient,
  capabilities, tolerances, dtypes), and the digest of its recorded calls (its part of
  ``recording.json`` and the bytes of its tensor file).

Never cached: a Function whose source cannot be read, one whose calls hold live values of
the recording process or a module-level object that is not plain data (neither is in the
recording's bytes), one with a timeout, crash or
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
import types
from collections.abc import Sequence
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
            root = Path(package.__file__ or "").parent
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


def recorded_data(directory: str) -> dict[str, tuple[str, tuple[str, ...]]]:
    """Each Function's recorded calls as (the digest of its part of ``recording.json`` and
    its tensor file's bytes, the module-level objects its calls pass by reference); the
    recording was validated when it was loaded."""
    from harness.recording.store import INDEX, TENSOR_DIR

    folder = Path(directory)
    try:
        doc = json.loads((folder / INDEX).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    out: dict[str, tuple[str, tuple[str, ...]]] = {}
    for fn in doc.get("functions", ()) if isinstance(doc, dict) else ():
        if not isinstance(fn, dict) or not isinstance(fn.get("target"), str):
            continue
        name = fn.get("tensors")
        tensors = ""
        if isinstance(name, str):
            if os.path.basename(name) != name or name in ("", ".", ".."):
                continue
            tensors = _file_sha(str(folder / TENSOR_DIR / name))
        out[fn["target"]] = (_sha(fn, tensors), tuple(sorted(set(_refs(fn.get("calls"))))))
    return out


#: Nodes that name a type of the program by ``module:QualName`` (harness.recording.kinds,
#: live), and the field holding it: the type's code decides what the Function gets.
_NAMED = {"ref": "target", "enum": "type", "namedtuple": "type", "dataclass": "type"}
_NAMED_SUBCLASS = ("subclass", "class")
#: A value only the recording process held: the recording's bytes do not describe it.
LIVE = "<live>"


def _refs(node: Any) -> list[str]:
    """The ``module:QualName`` the nodes under ``node`` name (references, the types of
    enums, namedtuples, dataclasses and tensor subclasses), and ``LIVE`` for a live value."""
    if isinstance(node, list):
        return [r for item in node for r in _refs(item)]
    if not isinstance(node, dict):
        return []
    out = []
    for key, value in node.items():
        if key == "live" and isinstance(value, dict):
            out.append(LIVE)
            continue
        field_name = _NAMED.get(key) or (_NAMED_SUBCLASS[1] if key == _NAMED_SUBCLASS[0] else "")
        if field_name and isinstance(value, dict) and isinstance(value.get(field_name), str):
            out.append(value[field_name])
        out.extend(_refs(value))
    return out


def _referenced(target: str) -> Any:
    """The object a recorded reference names, from the modules this process has imported
    (the check imported them to rebuild the calls); None when it is not there."""
    module, _, qual = target.partition(":")
    obj: Any = sys.modules.get(module)
    for part in qual.split(".") if obj is not None else ():
        obj = vars(obj).get(part) if hasattr(obj, "__dict__") else None
        if obj is None:
            return None
    return obj


def _refs_digest(refs: Sequence[str], package: str) -> str | None:
    """The code of the functions and classes the calls name (a vector field given to an
    ODE step is the Function's code too), plain data by value, another package's by name;
    None when one cannot be read or is an object whose state the recording lacks."""
    from harness.sources.code_digest import code_digest, plain_value

    parts = []
    for ref in refs:
        if ref.split(":", 1)[0].split(".", 1)[0] != package:
            parts.append([ref, "another package's"])  # by name, as code_digest keys it
            continue
        obj = _referenced(ref)
        if obj is None:
            return None
        if isinstance(obj, (type, types.FunctionType)):
            try:
                parts.append([ref, code_digest(obj)])
            except Exception:  # noqa: BLE001 - NoSource, or code that cannot be read
                return None
            continue
        value = plain_value(obj)
        if value is None:
            return None
        parts.append([ref, value])
    return _sha(parts)


def function_key(
    recorded: Any, data: tuple[str, tuple[str, ...]] | None, run: str
) -> dict[str, str] | None:
    """One Function's key (``key``) and its parts by what they stand for (a miss names
    the part that changed), or None when it cannot be cached (see the module docstring)."""
    from harness.sources.code_digest import code_digest

    entry = recorded.entry
    if entry is None or not data or recorded.live_only:
        return None
    calls, refs = data
    if LIVE in refs:
        return None
    passed = _refs_digest(refs, recorded.target.split(":", 1)[0].split(".", 1)[0])
    if passed is None:
        return None
    objects = [entry.function, *entry.helper_functions]
    if entry.custom_op is not None:
        fn = getattr(entry.custom_op, "_init_fn", None)
        if fn is None:
            return None
        objects = [fn]
    try:
        code = code_digest(*objects)
    except Exception:  # noqa: BLE001 - NoSource, or code that cannot be read: never cached
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
    parts = {
        "settings": run,
        "code": _sha(code, passed),
        "declaration": _sha(made),
        "calls": _sha(shape, calls),
    }
    return {"key": _sha(parts), **parts}


#: What a changed part of a key means, for the summary's line.
CHANGED = {
    "settings": "after a change to the suite, torch or the options",
    "code": "whose code changed",
    "declaration": "whose declaration changed",
    "calls": "whose recorded calls changed",
}


#: Why a Function is checked though nothing of its key changed.
_OTHER = {
    "new": "not in the cache",
    "live": "checked with live values (never cached)",
    "never": "not cacheable (no source, or an object passed by reference)",
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
        is_live = LIVE in data.get(r.target, ("", ()))[1] or bool(r.live_only)
        if not is_live:
            parts = function_key(r, data.get(r.target), run)
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
