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
from dataclasses import dataclass
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from harness.core.results import FAIL, PASS, SKIP, XFAIL, XPASS, CaseResult

SCHEMA = "afdb-expectations/1"
STATUSES = (XFAIL, SKIP)
KEYS = ("id", "status", "reason", "torch")


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


class ExpectationsError(ValueError):
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


def parse(text: str, path: str = "<expectations>") -> Expectations:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ExpectationsError(f"{path}: line {e.lineno}: not valid JSON ({e.msg})") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise ExpectationsError(f'{path}: line 1: expected an object with "schema": "{SCHEMA}"')
    raw = data.get("expectations")
    if not isinstance(raw, list):
        raise ExpectationsError(
            f'{path}: {_where(text, "expectations")}: "expectations" must be a list'
        )
    items = []
    seen: set[tuple[str, str]] = set()
    item_lines = _item_lines(text)
    unknown_top = sorted(set(data) - {"schema", "expectations"})
    if unknown_top:
        raise ExpectationsError(
            f"{path}: {_where(text, json.dumps(unknown_top[0]))}: unknown key "
            f'{unknown_top[0]!r}; the file holds only "schema" and "expectations"'
        )
    for i, item in enumerate(raw):
        where = f"line {item_lines[i]}" if i < len(item_lines) else f"expectation {i}"
        if not isinstance(item, dict):
            raise ExpectationsError(
                f"{path}: {where}: expectation {i} must be an object with id, status, reason"
            )
        extra = sorted(set(item) - set(KEYS))
        if extra:
            raise ExpectationsError(
                f"{path}: {where}: unknown key {extra[0]!r}; an expectation has id, status, "
                'reason and optionally torch (a version specifier such as "<2.14")'
            )
        cid = item.get("id")
        if not isinstance(cid, str) or not cid:
            raise ExpectationsError(
                f'{path}: {where}: "id" must be a non-empty case id or prefix, got {cid!r}'
            )
        if item.get("status") not in STATUSES:
            raise ExpectationsError(
                f"{path}: {where}: {cid}: status must be one of {', '.join(STATUSES)}, got {item.get('status')!r}"
            )
        reason = item.get("reason")
        if not isinstance(reason, str) or not reason.strip() or reason.strip().startswith("TODO"):
            raise ExpectationsError(
                f"{path}: {where}: {cid}: a reason is required (a link or words), got {reason!r}"
                + ("; replace the placeholder that --accept wrote" if reason == PLACEHOLDER else "")
            )
        spec = item.get("torch", "")
        if not isinstance(spec, str) or ("torch" in item and not spec.strip()):
            raise ExpectationsError(
                f'{path}: {where}: {cid}: "torch" must be a version specifier such as "<2.14" '
                f'or ">=2.13,<2.15", got {spec!r}'
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


def from_results(results: list[CaseResult], previous: Expectations | None = None) -> Expectations:
    """The expectations a run implies (for ``--accept``): keep reasons, ask for new ones.

    Entries whose ``"torch"`` condition does not hold on this torch say nothing about
    this run: they are kept as they are, in their place. Kept entries keep their
    condition; new ones get none.
    """
    used: set[Expectation] = set()
    added: list[Expectation] = []
    covered: set[str] = set()
    for r in results:
        if r.status in (FAIL, "error", "timeout", "crash", XFAIL, SKIP):
            exp = previous.lookup(r.id) if previous else None
            if exp is not None:
                used.add(exp)
            elif r.status != SKIP and r.id not in covered:
                covered.add(r.id)
                added.append(Expectation(r.id, XFAIL, PLACEHOLDER))
    active = set(previous.active) if previous else set()
    kept = [e for e in (previous.items if previous else ()) if e in used or e not in active]
    return Expectations(
        tuple(kept + added), torch_version=previous.torch_version if previous else None
    )


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
    from harness.engine.cases import case_record

    return case_record(case, SKIP, f"skipped by expectation: {exp.reason}", expectation=exp.reason)


def load_previous(path: str | Path) -> Expectations | None:
    """The file as it is, for ``--accept`` (None when missing; placeholders are tolerated)."""
    p = Path(path)
    if not p.exists():
        return None
    text = p.read_text()
    try:
        return parse(text, str(path))
    except ExpectationsError:
        data = json.loads(text)  # a placeholder left unfilled: keep what is there
        items = tuple(
            Expectation(
                e["id"],
                e.get("status", XFAIL),
                e.get("reason") or PLACEHOLDER,
                e["torch"] if isinstance(e.get("torch"), str) else "",
            )
            for e in data.get("expectations", [])
            if isinstance(e, dict) and isinstance(e.get("id"), str)
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
    new = from_results(results, previous)
    changes = []
    old = set(previous.items) if previous else set()
    for e in new.items:
        if e not in old:
            changes.append(f"added {e.id} (xfail): write its reason in {path}")
    for e in previous.items if previous else ():
        if e not in new.items:
            changes.append(f"removed {e.id} (it passes now, or matches no case)")
    write_atomic(path, new.to_json() + "\n")
    return Expectations(new.items, str(path)), changes
