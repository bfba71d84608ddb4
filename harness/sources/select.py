"""Selecting entries and cases by name, tag (``tag:NAME``) or case id prefix."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from typing import Any

from harness.core.errors import UsageError


def _did_you_mean(word: str, known: Iterable[str], n: int = 3) -> list[str]:
    """Close matches of ``word`` among ``known`` (case-insensitive), in ``known``'s spelling."""
    by_lower: dict[str, str] = {}
    for k in known:
        by_lower.setdefault(k.lower(), k)
    close = difflib.get_close_matches(word.lower(), list(by_lower), n=n, cutoff=0.6)
    return [by_lower[c] for c in close]


def _suggestion(close: Sequence[str]) -> str:
    return f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""


def entry_of_selector(sel: str, names: Iterable[str]) -> str:
    """The entry name a selector names: ``NumpyMul`` or the entry of an id prefix
    (``NumpyMul/vmap``, ``NumpyMul/vmap/s0``)."""
    known = set(names)
    if sel in known:
        return sel
    return sel.split("/", 1)[0]


def select_entries(entries: Sequence[Any], names: Sequence[str]) -> list[Any]:
    """Entries by name, by tag with ``tag:NAME`` or by case id prefix (``NumpyMul/vmap``:
    its entry); every selector must match something.

    An unknown name gets the close ones ("did you mean"); an unknown tag lists the known tags.
    """
    if not names:
        return list(entries)
    entries = list(entries)
    by_name = {e.name: e for e in entries}
    chosen: list[Any] = []
    for sel in names:
        if sel.startswith("tag:"):
            tag = sel[4:]
            hits = [e for e in entries if tag in e.tags]
            if not hits:
                tags = sorted({t for e in entries for t in e.tags})
                close = _did_you_mean(tag, tags)
                hint = f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""
                raise UsageError(
                    f"{sel!r}: no entry has the tag {tag!r}; {hint}known tags: "
                    f"{', '.join(tags) or 'none'}"
                )
        else:
            name = entry_of_selector(sel, by_name)
            hit = by_name.get(name)
            if hit is None:
                close = _did_you_mean(name, by_name)
                what = f"{sel!r} matches no entry"
                if name != sel:
                    what = f"{sel!r}: no entry {name!r}"
                if close:
                    hint = _suggestion(close) + " (see `afdb list`)"
                else:
                    known = ", ".join(e.name for e in entries[:8])
                    hint = f"; names look like {known}, ... (see `afdb list`), or use tag:TAG"
                raise UsageError(what + hint)
            hits = [hit]
        chosen.extend(h for h in hits if h not in chosen)
    return chosen


def case_prefixes(entries: Sequence[Any], names: Sequence[str]) -> dict[str, list[str]] | None:
    """The case id prefixes a selection asks for, per entry; an entry selected whole (by its
    name or a tag) is absent. None when every case of the selected entries runs."""
    by_name = {e.name for e in entries}
    whole: set[str] = set()
    prefixes: dict[str, list[str]] = {}
    for sel in names:
        if sel.startswith("tag:"):
            whole.update(e.name for e in entries if sel[4:] in e.tags)
            continue
        name = entry_of_selector(sel, by_name)
        if name == sel:
            whole.add(name)
        else:
            prefixes.setdefault(name, []).append(sel.rstrip("/"))
    chosen = {k: v for k, v in prefixes.items() if k not in whole}
    return chosen or None


def matches_prefix(case_id: str, prefix: str) -> bool:
    """``prefix`` is the id itself or its start up to a "/" (as an expectation's id)."""
    return case_id == prefix or case_id.startswith(prefix + "/")
