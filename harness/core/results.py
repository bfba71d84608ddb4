"""Case results, run results, and the versioned JSON form of a run."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field, fields
from typing import Any

SCHEMA = "afdb-report/1"

PASS = "pass"
FAIL = "fail"
ERROR = "error"
UNSUPPORTED = "unsupported"
SKIP = "skip"
XFAIL = "xfail"
XPASS = "xpass"
TIMEOUT = "timeout"
CRASH = "crash"
#: The suite's own code raised (a bug of the suite, never blamed on the Function).
INTERNAL = "internal"

STATUSES = (PASS, FAIL, ERROR, UNSUPPORTED, SKIP, XFAIL, XPASS, TIMEOUT, CRASH, INTERNAL)
#: Statuses that make a run non-conforming.
BAD_STATUSES = frozenset({FAIL, ERROR, XPASS, TIMEOUT, CRASH, INTERNAL})
#: Statuses of a case that compared nothing: a run of only these checked nothing.
NOT_CHECKED = frozenset({UNSUPPORTED, SKIP})
#: The exit status of a run that checked nothing (pytest's for "no tests ran").
NOTHING_CHECKED_EXIT = 5


def internal_first(cases: list[CaseResult]) -> list[CaseResult]:
    """The cases in their order, except that internal errors of the suite come first."""
    return sorted(cases, key=lambda c: c.status != INTERNAL)


def _json_copy(x: Any) -> Any:
    """A copy of JSON-like data (what dataclasses.asdict would copy)."""
    if type(x) is dict:
        return {k: _json_copy(v) for k, v in x.items()}
    if type(x) is list:
        return [_json_copy(v) for v in x]
    if type(x) is tuple:
        return tuple(_json_copy(v) for v in x)
    return x


@dataclass
class CaseResult:
    id: str
    entry: str
    check: str
    sample: int | None
    sample_name: str
    plan: dict[str, Any] | None
    status: str
    message: str = ""
    duration_s: float = 0.0
    reference: str = ""
    repro: str = ""
    dtype: str = ""
    #: The reason of the expectation that made this case xfail, xpass or skip ("" if none).
    expectation: str = ""

    @property
    def ok(self) -> bool:
        return self.status not in BAD_STATUSES

    def to_dict(self) -> dict[str, Any]:
        from harness.core.textsafe import cap

        # Not dataclasses.asdict: its deep copies were a tenth of writing a report. The
        # plan (JSON-native lists and dicts) is copied so the caller may change it.
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["plan"] = _json_copy(self.plan)
        d["duration_s"] = round(self.duration_s, 6)
        d["message"] = cap(str(d["message"]))  # one cap for every message, whoever built it
        d["repro"] = cap(str(d["repro"]))
        if not self.expectation:
            del d["expectation"]  # most cases have none: reports stay as they were
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CaseResult:
        names = cls.__dataclass_fields__
        return cls(**{k: v for k, v in d.items() if k in names})


@dataclass
class RunResult:
    cases: list[CaseResult]
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.cases)

    @property
    def nothing_checked(self) -> bool:
        """No case compared anything: every case is ``unsupported`` or ``skip`` (or there are
        none). Such a run does not conform, whatever its statuses (exit 5, "nothing checked")."""
        return all(c.status in NOT_CHECKED for c in self.cases)

    @property
    def conforms(self) -> bool:
        """Every case conforms and at least one was checked."""
        return self.ok and not self.nothing_checked

    @property
    def verdict(self) -> str:
        """PASS or FAIL; PARTIAL for a merge that lacks shards or cases (``afdb merge
        --partial``); NOTHING CHECKED when no case was checked (all unsupported or skipped);
        INTERRUPTED when the run stopped early (its cases are a prefix)."""
        if self.metadata.get("partial"):
            return "PARTIAL"
        if self.metadata.get("interrupted"):
            return "INTERRUPTED"
        if not self.ok:
            return "FAIL"
        return "NOTHING CHECKED" if self.nothing_checked else "PASS"

    def verdict_note(self) -> str:
        """One sentence on why the verdict is not PASS or FAIL ('' when it is)."""
        partial = self.metadata.get("partial")
        if partial:
            note = partial.get("note") if isinstance(partial, dict) else None
            return f"this merge is not the whole run ({note or 'cases are missing'})."
        if self.metadata.get("interrupted"):
            return "this report holds only the cases that finished before the run was stopped."
        return ""

    def counts(self) -> dict[str, int]:
        """Cases per status (internal errors of the suite first, then in STATUSES order)."""
        c = Counter(r.status for r in self.cases)
        order = (INTERNAL, *(s for s in STATUSES if s != INTERNAL))
        return {s: c[s] for s in order if c[s]}

    def summary_line(self) -> str:
        counts = self.counts()
        parts = ", ".join(f"{n} {s}" for s, n in counts.items()) or "no cases"
        return f"{len(self.cases)} cases: {parts}"

    @property
    def has_internal(self) -> bool:
        return any(c.status == INTERNAL for c in self.cases)

    @property
    def exit_status(self) -> int:
        """0 all conform, 1 something does not, 3 the suite itself failed on some case, 5
        nothing was checked (every case unsupported or skipped: pytest's "no tests ran")."""
        if self.has_internal:
            return 3
        if not self.ok:
            return 1
        return NOTHING_CHECKED_EXIT if self.nothing_checked else 0

    def failures(self) -> list[CaseResult]:
        """Non-conforming cases, internal errors of the suite first."""
        return internal_first([c for c in self.cases if not c.ok])

    def matrix(self) -> dict[str, dict[str, Counter[str]]]:
        """entry -> check -> status counts."""
        out: dict[str, dict[str, Counter[str]]] = {}
        for c in self.cases:
            out.setdefault(c.entry, {}).setdefault(c.check, Counter())[c.status] += 1
        return out

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "metadata": self.metadata,
            "summary": {"total": len(self.cases), "ok": self.ok, "counts": self.counts()},
            "cases": [c.to_dict() for c in internal_first(self.cases)],
        }

    def to_json(self, indent: int | None = 1) -> str:
        """The report as JSON text: with ``indent``, one case per line (the C encoder writes
        each; the indenting pure-Python encoder took most of a report's write time)."""
        d = self.to_json_dict()
        if indent is None:
            return json.dumps(d)
        cases = d.pop("cases")
        head = json.dumps({**d, "cases": []}, indent=indent)
        if not cases:
            return head
        assert head.endswith('"cases": []\n}'), head[-40:]
        pad = " " * indent
        lines = f",\n{pad * 2}".join(json.dumps(c) for c in cases)
        return head[: -len("[]\n}")] + f"[\n{pad * 2}{lines}\n{pad}]\n}}"

    @classmethod
    def from_json_dict(cls, d: dict[str, Any]) -> RunResult:
        return cls([CaseResult.from_dict(c) for c in d["cases"]], dict(d.get("metadata", {})))
