"""Expectations: known failures and skips, kept outside the code in a versioned JSON file.

    {"schema": "afdb-expectations/1",
     "expectations": [{"id": "NumpyMul/vjp_of_vjp", "status": "xfail", "reason": "..."}]}

An ``id`` matches a case whose id equals it or starts with it followed by "/".
The longest matching id wins. An xfail that passes becomes ``xpass`` (which
fails the run until the file is updated); an expectation that matches no case
is reported.

An optional ``"torch"`` field holds a version specifier (``"<2.14"``,
``">=2.13,<2.15"``; PEP 440, evaluated with ``packaging``): the expectation holds
only on a torch it admits (local labels such as ``+cpu`` are ignored, and dev
builds count as their release), so one file serves several torch versions. On
another torch it says nothing: it is neither applied nor reported as unmatched,
and ``--accept`` keeps it as it is.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from harness.core.errors import UsageError
from harness.core.results import FAIL, PASS, SKIP, XFAIL, XPASS, CaseResult

SCHEMA = "afdb-expectations/1"
STATUSES = (XFAIL, SKIP)


def installed_torch() -> str:
    import torch

    return str(torch.__version__)


@lru_cache(maxsize=256)
def torch_admits(spec: str, version: str) -> bool:
    """Whether the torch ``version`` satisfies the specifier ``spec`` ("" admits every one)."""
    if not spec:
        return True
    try:
        v = Version(version)
    except InvalidVersion:
        return False
    # A nightly 2.14.0.dev counts as 2.14.0; a local label (+cpu, +cu130) is not a version.
    return SpecifierSet(spec).contains(Version(v.base_version), prereleases=True)


class ExpectationsError(UsageError):
    """A malformed expectations file (the message names the place and the problem)."""


@dataclass(frozen=True)
class Expectation:
    id: str
    status: str
    reason: str
    torch: str = ""  #: a version specifier; "" holds on every torch

    def matches(self, case_id: str) -> bool:
        return case_id == self.id or case_id.startswith(self.id.rstrip("/") + "/")

    def holds_on(self, torch_version: str) -> bool:
        return torch_admits(self.torch, torch_version)


@dataclass(frozen=True)
class Expectations:
    items: tuple[Expectation, ...] = ()
    path: str = ""
    #: The torch the ``"torch"`` conditions are evaluated against (None: the installed one).
    torch_version: str | None = None

    @cached_property
    def active(self) -> tuple[Expectation, ...]:
        """The expectations that hold on this torch (evaluated once: the file is frozen)."""
        version = self.torch_version or installed_torch()
        return tuple(e for e in self.items if e.holds_on(version))

    @cached_property
    def _by_prefix(self) -> dict[str, list[tuple[int, Expectation]]]:
        """The active expectations under their id without trailing "/" (what a case id
        starts with), each with its place in the file (ties go to the first)."""
        index: dict[str, list[tuple[int, Expectation]]] = {}
        for place, e in enumerate(self.active):
            index.setdefault(e.id.rstrip("/"), []).append((place, e))
        return index

    def _matching(self, case_id: str) -> list[tuple[int, Expectation]]:
        """Every active expectation matching ``case_id``: one whose id is the case id or a
        prefix of it ending before a "/" (so a dict lookup per "/" of the id, not a scan)."""
        index = self._by_prefix
        found = list(index.get(case_id, ()))
        cut = case_id.find("/")
        while cut != -1:
            found.extend(index.get(case_id[:cut], ()))
            cut = case_id.find("/", cut + 1)
        return [(place, e) for place, e in found if e.matches(case_id)]

    @cached_property
    def _looked_up(self) -> dict[str, Expectation | None]:
        """``lookup``'s answers by case id (a run asks for each case two or three times)."""
        return {}

    def lookup(self, case_id: str) -> Expectation | None:
        """The longest matching id wins; among equally long ones, the first in the file."""
        memo = self._looked_up
        if case_id in memo:
            return memo[case_id]
        found = self._matching(case_id)
        exp = min(found, key=lambda pe: (-len(pe[1].id), pe[0]))[1] if found else None
        if len(memo) < 1_000_000:
            memo[case_id] = exp
        return exp

    def unmatched(self, case_ids: list[str]) -> list[Expectation]:
        matched = {place for c in case_ids for place, _ in self._matching(c)}
        return [e for place, e in enumerate(self.active) if place not in matched]

    def to_json(self) -> str:
        return json.dumps(
            {"schema": SCHEMA, "expectations": [as_dict(e) for e in self.items]}, indent=2
        )


PLACEHOLDER = "TODO: say why this case is expected to fail (a link or words)"


def _where(text: str, needle: str) -> str:
    for n, line in enumerate(text.splitlines(), 1):
        if needle in line:
            return f"line {n}"
    return "somewhere"


def _item_lines(text: str) -> list[int]:
    """The line where each element of the top-level "expectations" list starts.

    The json module keeps no positions, so this scans the (already valid) JSON:
    strings are skipped, depth is tracked, and elements of the array that follows
    the "expectations" key at depth 1 are recorded.
    """
    lines: list[int] = []
    depth = 0
    line = 1
    i = 0
    last_key = None
    in_array = False
    expect_value = False
    n = len(text)
    while i < n:
        ch = text[i]
        if ch == "\n":
            line += 1
        elif ch == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            token = text[i + 1 : j]
            if in_array and depth == 2 and expect_value:
                lines.append(line)
                expect_value = False
            if depth == 1:
                last_key = token
            i = j + 1
            continue
        elif ch in "[{":
            if in_array and depth == 2 and expect_value:
                lines.append(line)
                expect_value = False
            depth += 1
            if ch == "[" and depth == 2 and last_key == "expectations":
                in_array = True
                expect_value = True
        elif ch in "]}":
            depth -= 1
            if depth == 1 and in_array:
                in_array = False
        elif ch == "," and in_array and depth == 2:
            expect_value = True
        elif not ch.isspace() and in_array and depth == 2 and expect_value:
            lines.append(line)
            expect_value = False
        i += 1
    return lines


def _schema_problem(data: dict[str, Any], text: str, path: str) -> str:
    """The first way ``data`` breaks ``harness/schemas/expectations.json``, as one line
    naming the file's line ('' when it is valid). The wording of a field's message is its
    description in the schema."""
    from harness.core.schema import load_schema, violations

    found = violations("expectations", data, limit=1)
    if not found:
        return ""
    parts, where, problem = found[0]
    if parts[:1] != ("expectations",):  # a key beside "schema" and "expectations"
        key = str(parts[0])
        return (
            f"{path}: {_where(text, json.dumps(key))}: unknown key {key!r}; the file holds "
            'only "schema" and "expectations"'
        )
    if len(parts) == 1:
        return f'{path}: {_where(text, "expectations")}: "expectations" must be a list'
    i = int(parts[1])
    item_lines = _item_lines(text)
    line = f"line {item_lines[i]}" if i < len(item_lines) else f"expectation {i}"
    item = data["expectations"][i]
    if len(parts) == 2:
        return f"{path}: {line}: expectation {i} must be an object with id, status, reason"
    key = str(parts[2])
    fields = load_schema("expectations")["$defs"]["expectation"]["properties"]
    if key not in fields:
        return (
            f"{path}: {line}: unknown key {key!r}; an expectation has id, status, reason and "
            'optionally torch (a version specifier such as "<2.14")'
        )
    cid = item.get("id")
    who = f"{cid}: " if key != "id" and isinstance(cid, str) and cid else ""
    return f"{path}: {line}: {who}{fields[key]['description']}, got {item.get(key)!r}"


def parse(text: str, path: str = "<expectations>") -> Expectations:
    """The expectations of a file's text; ExpectationsError (one line naming the file's
    line) for anything ``harness/schemas/expectations.json`` or the checks below refuse."""
    from harness.core.safe_io import DuplicateKey, loads, repeated_key

    try:
        data = loads(text)  # a key named twice is refused, as in every input (safe_io)
    except json.JSONDecodeError as e:
        raise ExpectationsError(f"{path}: line {e.lineno}: not valid JSON ({e.msg})") from None
    except DuplicateKey as e:
        raise ExpectationsError(repeated_key(path, str(e))) from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise ExpectationsError(f'{path}: line 1: expected an object with "schema": "{SCHEMA}"')
    problem = _schema_problem(data, text, path)
    if problem:
        raise ExpectationsError(problem)
    # What a schema cannot say: no placeholder reason, a PEP 440 specifier, no repeats.
    items = []
    seen: set[tuple[str, str]] = set()
    item_lines = _item_lines(text)
    for i, item in enumerate(data["expectations"]):
        where = f"line {item_lines[i]}" if i < len(item_lines) else f"expectation {i}"
        cid, reason, spec = item["id"], item["reason"], item.get("torch", "")
        if reason.strip().startswith("TODO"):
            raise ExpectationsError(
                f"{path}: {where}: {cid}: a reason is required (a link or words), got {reason!r}"
                + ("; replace the placeholder that --accept wrote" if reason == PLACEHOLDER else "")
            )
        try:
            SpecifierSet(spec)
        except InvalidSpecifier:
            raise ExpectationsError(
                f'{path}: {where}: {cid}: "torch" must be a version specifier such as "<2.14" '
                f'or ">=2.13,<2.15" (PEP 440), got {spec!r}'
            ) from None
        key = (cid, spec.replace(" ", ""))
        if key in seen:
            raise ExpectationsError(
                f"{path}: {where}: {cid}: listed twice" + (f" for torch {spec}" if spec else "")
            )
        seen.add(key)
        items.append(Expectation(cid, item["status"], reason.strip(), spec.strip()))
    return Expectations(tuple(items), path)


def load(path: str | Path) -> Expectations:
    from harness.core.safe_io import InputError, parse_json, read_text

    try:  # a FIFO, invalid UTF-8, nesting deeper than an expectations file: one line
        text = read_text(path)
        parse_json(text, str(path))
    except InputError as e:
        message = str(e).replace(": cannot read (", ": cannot read the expectations file (")
        if "not valid JSON" in message:
            raise ExpectationsError(_json_line(text, str(path))) from None
        raise ExpectationsError(message) from None
    return parse(text, str(path))


def _json_line(text: str, path: str) -> str:
    try:
        json.loads(text)
    except json.JSONDecodeError as e:
        return f"{path}: line {e.lineno}: not valid JSON ({e.msg})"
    return f"{path}: not valid JSON"


def status_after(expectations: Expectations, result: CaseResult) -> str:
    """The status ``apply`` would give ``result``, without changing or copying it."""
    exp = expectations.lookup(result.id)
    if exp is None:
        return result.status
    if exp.status == SKIP:
        return SKIP
    if exp.status == XFAIL:
        if result.status == PASS:
            return XPASS
        if result.status not in ("unsupported", "internal"):
            return XFAIL
    return result.status


def apply(expectations: Expectations, result: CaseResult) -> CaseResult:
    """The case's status after its expectation (if any): fail -> xfail, pass -> xpass."""
    exp = expectations.lookup(result.id)
    if exp is None:
        return result
    if exp.status == SKIP:
        result.status = SKIP
        result.message = f"skipped by expectation: {exp.reason}"
        result.expectation = exp.reason
    elif exp.status == XFAIL:
        if result.status == PASS:
            result.status = XPASS
            result.message = (
                f"expected to fail ({exp.reason}) but passed: remove or update the expectation "
                f"{exp.id!r}"
            )
            result.expectation = exp.reason
        elif result.status not in ("unsupported", "internal"):  # the suite's bugs stay visible
            result.message = f"expected failure ({exp.reason}): {result.message}"
            result.status = XFAIL
            result.expectation = exp.reason
    return result


def should_skip(expectations: Expectations | None, case_id: str) -> Expectation | None:
    if expectations is None:
        return None
    exp = expectations.lookup(case_id)
    return exp if exp is not None and exp.status == SKIP else None


#: Statuses ``--accept`` writes an expectation for (an ``xfail`` for each root cause).
_FAILED = (FAIL, "error", "timeout", "crash")
#: Statuses an expectation may also cover without changing them: an ``xfail`` leaves
#: ``unsupported`` and ``internal`` as they are, and a skip or another xfail is decided by
#: the longest id. A ``pass`` it covered would become ``xpass``, a failure of another cause
#: would take its reason: the prefixes of a cause cover neither.
_HARMLESS = ("unsupported", "internal", SKIP, XFAIL)


def from_results(results: list[CaseResult], previous: Expectations | None = None) -> Expectations:
    """The expectations a run implies (for ``--accept``): keep reasons, ask for new ones.

    A new failure gets no expectation of its own: each root cause of the new failures
    (``harness.reports.grouping``) gets the shortest id prefixes that cover its cases and
    no other case of the run (``cover``), usually one (``Entry/check``) per check it fails
    in whole, with one reason placeholder.

    Entries whose ``"torch"`` condition does not hold on this torch say nothing about
    this run: they are kept as they are, in their place. Kept entries keep their
    condition; new ones get none.
    """
    return _implied(results, previous)[0]


def _implied(
    results: list[CaseResult], previous: Expectations | None
) -> tuple[Expectations, list[tuple[Any, list[str]]]]:
    """``from_results``'s expectations, and each new root cause with its prefixes."""
    used: set[Expectation] = set()
    fresh: list[CaseResult] = []
    for r in results:
        if (
            r.status == XFAIL
            and not r.expectation
            and (previous is None or previous.lookup(r.id) is None)
        ):
            continue  # a known torch bug the suite recognised itself: no expectation needed
        if r.status in (*_FAILED, XFAIL, SKIP):
            exp = previous.lookup(r.id) if previous else None
            if exp is not None:
                used.add(exp)
            elif r.status in _FAILED:
                fresh.append(r)
    causes = cause_prefixes(results, fresh)
    added = [Expectation(p, XFAIL, PLACEHOLDER) for _, prefixes in causes for p in prefixes]
    active = set(previous.active) if previous else set()
    kept = [e for e in (previous.items if previous else ()) if e in used or e not in active]
    implied = Expectations(
        tuple(kept + added), torch_version=previous.torch_version if previous else None
    )
    return implied, causes


def cause_prefixes(
    results: list[CaseResult], fresh: list[CaseResult]
) -> list[tuple[Any, list[str]]]:
    """Each root cause of ``fresh`` (a ``Group``, in report order) with the id prefixes
    that cover its cases and no other case of ``results`` that an xfail would change."""
    from harness.reports.grouping import group_cases

    out = []
    for g in group_cases(fresh):
        mine = [c.id for c in g.cases]
        taken = set(mine)
        others = [r.id for r in results if r.id not in taken and r.status not in _HARMLESS]
        out.append((g, cover(mine, others)))
    return out


def cover(ids: list[str], others: list[str], *, depth: int = 2) -> list[str]:
    """The fewest id prefixes (``/``-bounded, at least ``depth`` parts: ``Entry/check``)
    that match every id of ``ids`` and none of ``others``, in the order of ``ids``."""
    out: list[str] = []

    def walk(prefix: str, mine: list[str], level: int) -> None:
        if level >= depth and not any(Expectation(prefix, XFAIL, "").matches(o) for o in others):
            out.append(prefix)
            return
        children: dict[str, list[str]] = {}
        for i in mine:
            parts = i.split("/")
            child = "/".join(parts[: level + 1])
            children.setdefault(child, []).append(i)
        for child, under in children.items():
            if child == prefix:  # the id itself: nothing shorter covers it alone
                out.append(prefix)
            else:
                walk(child, under, level + 1)

    by_entry: dict[str, list[str]] = {}
    for i in ids:
        by_entry.setdefault(i.split("/", 1)[0], []).append(i)
    for entry, mine in by_entry.items():
        walk(entry, mine, 1)
    return out


def as_dict(e: Expectation) -> dict[str, Any]:
    d = {"id": e.id, "status": e.status, "reason": e.reason}
    if e.torch:
        d["torch"] = e.torch
    return d


def skip_result(expectations: Expectations | None, case: Any) -> CaseResult | None:
    """A ``skip`` record for a case the file skips (it is not run), else None."""
    exp = should_skip(expectations, case.id)
    if exp is None:
        return None
    from harness.engine.records import case_record

    return case_record(case, SKIP, f"skipped by expectation: {exp.reason}", expectation=exp.reason)


def load_previous(path: str | Path) -> Expectations | None:
    """The file as it is, for ``--accept`` (None when missing; placeholders are tolerated).

    Read like every input file (a FIFO or a device is refused, never waited on); a file
    that is not an expectations file at all is refused (ExpectationsError, one line)."""
    from harness.core.safe_io import InputError, parse_json, read_text

    if not os.path.lexists(path):
        return None
    try:
        text = read_text(path, "--accept")
    except InputError as e:
        raise ExpectationsError(str(e)) from None
    try:
        return parse(text, str(path))
    except ExpectationsError as err:
        try:
            data = parse_json(text, str(path))
        except InputError:
            raise err from None
        if not isinstance(data, dict) or data.get("schema") != SCHEMA:
            raise err from None
        raw = data.get("expectations")
        if not isinstance(raw, list):
            raise err from None
        # A placeholder left unfilled, or a field --accept rewrites: keep what is there.
        items = tuple(
            Expectation(
                e["id"],
                e["status"] if e.get("status") in STATUSES else XFAIL,
                e["reason"] if isinstance(e.get("reason"), str) and e["reason"] else PLACEHOLDER,
                e["torch"] if isinstance(e.get("torch"), str) else "",
            )
            for e in raw
            if isinstance(e, dict) and isinstance(e.get("id"), str) and e["id"]
        )
        return Expectations(items, str(path))


def accept(path: str | Path, results: list[CaseResult]) -> tuple[Expectations, list[str]]:
    """Rewrite ``path`` from a run: keep matching entries and their reasons, drop what passes now.

    Returns the new expectations and one line per change, for the user.
    """
    from harness.reports.report import write_atomic

    try:
        previous = load_previous(path)
    except (OSError, ValueError) as err:
        raise ExpectationsError(f"{path}: cannot read it to --accept ({err})") from None
    from harness.reports.grouping import headline

    new, causes = _implied(results, previous)
    changes = []
    for group, prefixes in causes:
        ids = ", ".join(prefixes[:3]) + (f" and {len(prefixes) - 3} more" if prefixes[3:] else "")
        what = "an expectation" if len(prefixes) == 1 else f"{len(prefixes)} expectations"
        changes.append(
            f"added {what} (xfail) for one root cause, {headline(group)}: {ids}; write its "
            f"reason in {path}"
        )
    for e in previous.items if previous else ():
        if e not in new.items:
            changes.append(f"removed {e.id} (it passes now, or matches no case)")
    write_atomic(path, new.to_json() + "\n")
    return Expectations(new.items, str(path)), changes


def as_expectations(value: Any) -> Expectations | None:
    """An ``Expectations`` from what a caller passed (a loaded one, a path, or None); a file
    that cannot be read is one ``UsageError``."""
    if value is None or isinstance(value, Expectations):
        return value
    try:
        return load(value)
    except ExpectationsError as e:
        raise UsageError(str(e)) from None
