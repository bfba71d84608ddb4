"""Expectations: known failures and skips, kept outside the code in a versioned JSON file.

    {"schema": "afdb-expectations/1",
     "expectations": [{"id": "NumpyMul/vjp_of_vjp", "status": "xfail", "reason": "..."}]}

An ``id`` matches a case whose id equals it or starts with it followed by "/".
The longest matching id wins. An xfail that passes becomes ``xpass`` (which
fails the run until the file is updated); an expectation that matches no case
is reported.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .results import FAIL, PASS, SKIP, XFAIL, XPASS, CaseResult

SCHEMA = "afdb-expectations/1"
STATUSES = (XFAIL, SKIP)


class ExpectationsError(ValueError):
    """A malformed expectations file (the message names the place and the problem)."""


@dataclass(frozen=True)
class Expectation:
    id: str
    status: str
    reason: str

    def matches(self, case_id: str) -> bool:
        return case_id == self.id or case_id.startswith(self.id.rstrip("/") + "/")


@dataclass(frozen=True)
class Expectations:
    items: tuple[Expectation, ...] = ()
    path: str = ""

    def lookup(self, case_id: str) -> Expectation | None:
        best = None
        for e in self.items:
            if e.matches(case_id) and (best is None or len(e.id) > len(best.id)):
                best = e
        return best

    def unmatched(self, case_ids: list[str]) -> list[Expectation]:
        return [e for e in self.items if not any(e.matches(c) for c in case_ids)]

    def to_json(self) -> str:
        return json.dumps(
            {
                "schema": SCHEMA,
                "expectations": [
                    {"id": e.id, "status": e.status, "reason": e.reason} for e in self.items
                ],
            },
            indent=2,
        )


def _where(text: str, needle: str) -> str:
    for n, line in enumerate(text.splitlines(), 1):
        if needle in line:
            return f"line {n}"
    return "somewhere"


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
    seen: set[str] = set()
    for i, item in enumerate(raw):
        if not isinstance(item, dict):
            raise ExpectationsError(
                f"{path}: expectation {i}: must be an object with id, status, reason"
            )
        cid = item.get("id")
        where = _where(text, json.dumps(cid)) if isinstance(cid, str) else f"expectation {i}"
        if not isinstance(cid, str) or not cid:
            raise ExpectationsError(
                f'{path}: expectation {i}: "id" must be a non-empty case id or prefix'
            )
        if item.get("status") not in STATUSES:
            raise ExpectationsError(
                f"{path}: {where}: {cid}: status must be one of {', '.join(STATUSES)}, got {item.get('status')!r}"
            )
        reason = item.get("reason")
        if not isinstance(reason, str) or not reason.strip() or reason.strip().startswith("TODO"):
            raise ExpectationsError(
                f"{path}: {where}: {cid}: a reason is required (a link or words), got {reason!r}"
            )
        if cid in seen:
            raise ExpectationsError(f"{path}: {where}: {cid}: listed twice")
        seen.add(cid)
        items.append(Expectation(cid, item["status"], reason.strip()))
    return Expectations(tuple(items), path)


def load(path: str | Path) -> Expectations:
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise ExpectationsError(
            f"{path}: cannot read the expectations file ({e.strerror})"
        ) from None
    return parse(text, str(path))


def apply(expectations: Expectations, result: CaseResult) -> CaseResult:
    """The case's status after its expectation (if any): fail -> xfail, pass -> xpass."""
    exp = expectations.lookup(result.id)
    if exp is None:
        return result
    if exp.status == SKIP:
        result.status = SKIP
        result.message = f"skipped by expectation: {exp.reason}"
    elif exp.status == XFAIL:
        if result.status == PASS:
            result.status = XPASS
            result.message = (
                f"expected to fail ({exp.reason}) but passed: remove or update the expectation "
                f"{exp.id!r}"
            )
        elif result.status not in ("unsupported",):
            result.message = f"expected failure ({exp.reason}): {result.message}"
            result.status = XFAIL
    return result


def should_skip(expectations: Expectations | None, case_id: str) -> Expectation | None:
    if expectations is None:
        return None
    exp = expectations.lookup(case_id)
    return exp if exp is not None and exp.status == SKIP else None


def from_results(results: list[CaseResult], previous: Expectations | None = None) -> Expectations:
    """The expectations a run implies (for ``--accept``): keep reasons, ask for new ones."""
    items: list[Expectation] = []
    covered: set[str] = set()
    for r in results:
        if r.status in (FAIL, "error", "timeout", "crash", XFAIL):
            exp = previous.lookup(r.id) if previous else None
            if exp is not None:
                if exp.id not in covered:
                    covered.add(exp.id)
                    items.append(exp)
            elif r.id not in covered:
                covered.add(r.id)
                items.append(
                    Expectation(r.id, XFAIL, "TODO: say why this case is expected to fail")
                )
        elif r.status == SKIP:
            exp = previous.lookup(r.id) if previous else None
            if exp is not None and exp.id not in covered:
                covered.add(exp.id)
                items.append(exp)
    return Expectations(tuple(items))


def as_dict(e: Expectation) -> dict[str, Any]:
    return {"id": e.id, "status": e.status, "reason": e.reason}
