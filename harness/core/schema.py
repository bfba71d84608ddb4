"""The JSON report's schema (``afdb-report/1``) and the validator every report reader uses.

The schema is plain JSON Schema (draft 2020-12), shipped as ``harness/report_schema.json``.
The validator here implements the subset of keywords the schema uses (an unknown keyword
is an error, so the schema cannot silently say more than is checked) and names the path
of the offending field: ``cases[3].status: 'passed' is not one of 'pass', 'fail', ...``.

After the schema, a report is checked for what a schema cannot say: unique case ids and
a summary that agrees with the cases.
"""

from __future__ import annotations

import functools
import json
import re
from collections import Counter
from importlib import resources
from pathlib import Path
from typing import Any

from harness.core.errors import UsageError
from harness.core.results import BAD_STATUSES, SCHEMA, RunResult

SCHEMA_FILE = "report_schema.json"

#: Keywords that carry no constraint.
_ANNOTATIONS = frozenset({"$schema", "$id", "$defs", "$comment", "title", "description"})
_TYPES: dict[str, Any] = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}


class ReportError(UsageError):
    """A file that is not a valid report of the version this suite reads."""


@functools.lru_cache(maxsize=1)
def report_schema() -> dict[str, Any]:
    text = resources.files("harness").joinpath(SCHEMA_FILE).read_text(encoding="utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


def _join(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    name = key if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key) else json.dumps(key)
    return f"{path}.{name}" if path else name


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


class Validator:
    """Validate an instance against a schema; ``errors`` lists ``path: problem`` strings."""

    def __init__(self, schema: dict[str, Any], *, max_errors: int = 20) -> None:
        self.root = schema
        self.max_errors = max_errors

    def errors(self, instance: Any) -> list[str]:
        out: list[str] = []
        self._validate(instance, self.root, "", out)
        return out[: self.max_errors]

    def _resolve(self, ref: str) -> dict[str, Any]:
        if not ref.startswith("#/"):
            raise ValueError(f"schema: only local $ref is supported, got {ref!r}")
        node: Any = self.root
        for part in ref[2:].split("/"):
            node = node[part]
        return node

    def _validate(self, v: Any, s: dict[str, Any], path: str, out: list[str]) -> None:
        if len(out) >= self.max_errors:
            return
        where = path or "(top level)"
        for kw in s:
            if kw not in _ANNOTATIONS and kw not in _KEYWORDS:
                raise ValueError(f"schema at {where}: unsupported keyword {kw!r}")
        if "$ref" in s:
            self._validate(v, self._resolve(s["$ref"]), path, out)
        if "type" in s:
            types = s["type"] if isinstance(s["type"], list) else [s["type"]]
            if not any(_TYPES[t](v) for t in types):
                out.append(f"{where}: {_short(v)} is not of type {' or '.join(types)}")
                return
        if "const" in s and v != s["const"]:
            out.append(f"{where}: {_short(v)} is not {_short(s['const'])}")
        if "enum" in s and v not in s["enum"]:
            out.append(f"{where}: {_short(v)} is not one of {', '.join(map(repr, s['enum']))}")
        if "anyOf" in s:
            self._any_of(v, s["anyOf"], path, out)
        if isinstance(v, str):
            if len(v) < s.get("minLength", 0):
                out.append(f"{where}: {_short(v)} is shorter than {s['minLength']} characters")
            if "pattern" in s and not re.search(s["pattern"], v):
                out.append(f"{where}: {_short(v)} does not match {s['pattern']!r}")
        if (
            isinstance(v, (int, float))
            and not isinstance(v, bool)
            and "minimum" in s
            and v < s["minimum"]
        ):
            out.append(f"{where}: {v!r} is less than the minimum {s['minimum']}")
        if isinstance(v, list):
            if len(v) < s.get("minItems", 0):
                out.append(f"{where}: has {len(v)} items, needs at least {s['minItems']}")
            if "items" in s:
                for i, item in enumerate(v):
                    self._validate(item, s["items"], _join(path, i), out)
        if isinstance(v, dict):
            self._object(v, s, path, out)

    def _object(self, v: dict[str, Any], s: dict[str, Any], path: str, out: list[str]) -> None:
        for key in s.get("required", ()):
            if key not in v:
                out.append(f"{_join(path, key)}: missing (a required field)")
        props = s.get("properties", {})
        extra = s.get("additionalProperties", True)
        for key, value in v.items():
            if "propertyNames" in s:
                self._validate(key, s["propertyNames"], f"{_join(path, key)} (key)", out)
            if key in props:
                self._validate(value, props[key], _join(path, key), out)
            elif extra is False:
                out.append(f"{_join(path, key)}: unexpected field")
            elif isinstance(extra, dict):
                self._validate(value, extra, _join(path, key), out)

    def _any_of(self, v: Any, options: list[dict[str, Any]], path: str, out: list[str]) -> None:
        attempts = []
        for option in options:
            errs: list[str] = []
            self._validate(v, option, path, errs)
            if not errs:
                return
            attempts.append(errs)
        # Report the option that got furthest: the one whose errors are not a type mismatch here.
        where = path or "(top level)"
        typed = [
            e for e in attempts if not e[0].startswith(f"{where}: ") or "not of type" not in e[0]
        ]
        out.extend((typed or attempts)[0])


_KEYWORDS = frozenset(
    {
        "$ref",
        "type",
        "const",
        "enum",
        "anyOf",
        "minLength",
        "pattern",
        "minimum",
        "minItems",
        "items",
        "required",
        "properties",
        "additionalProperties",
        "propertyNames",
    }
)


def schema_errors(data: Any) -> list[str]:
    """Schema violations of a report dict, then the checks a schema cannot express."""
    errors = Validator(report_schema()).errors(data)
    if errors:
        return errors
    cases = data["cases"]
    seen: dict[str, int] = {}
    for i, case in enumerate(cases):
        if case["id"] in seen:
            errors.append(
                f"cases[{i}].id: {case['id']!r} repeats cases[{seen[case['id']]}].id; ids must be unique"
            )
        seen.setdefault(case["id"], i)
    summary = data["summary"]
    if summary["total"] != len(cases):
        errors.append(f"summary.total: {summary['total']} but the report has {len(cases)} cases")
    counts = Counter(c["status"] for c in cases)
    for status in sorted(set(counts) | set(summary["counts"])):
        if summary["counts"].get(status, 0) != counts.get(status, 0):
            errors.append(
                f"summary.counts.{status}: {summary['counts'].get(status, 0)} but "
                f"{counts.get(status, 0)} cases have that status"
            )
    ok = not any(c["status"] in BAD_STATUSES for c in cases)
    if summary["ok"] != ok:
        errors.append(f"summary.ok: {summary['ok']} but the cases say {ok}")
    return errors


def schema_version(data: Any) -> str | None:
    return data.get("schema") if isinstance(data, dict) else None


def check_version(data: Any, path: str) -> None:
    version = schema_version(data)
    if version == SCHEMA:
        return
    if not isinstance(version, str) or not version.startswith("afdb-report/"):
        raise ReportError(
            f'{path}: not an afdb report (no "schema": "afdb-report/N" field at the top level)'
        )
    raise ReportError(
        f"{path}: schema {version!r}, but this afdb reads {SCHEMA!r}; use the afdb version that "
        "wrote it, or re-run the suite"
    )


def read_json(path: str | Path) -> Any:
    """The parsed JSON of a file, or ReportError with a one-line reason."""
    from harness.core.safe_io import InputError, parse_json, read_text

    try:  # a FIFO, invalid UTF-8 or nesting deeper than a report: one line, never a hang
        text = read_text(path)
        return parse_json(text, str(path))
    except InputError as e:
        message = str(e)
        if "not valid JSON" in message:
            message += "; a truncated file is not a report"
        raise ReportError(message) from None


def check_report(data: Any, path: str) -> None:
    """Refuse (ReportError) a report of another version or one that does not validate."""
    check_version(data, path)
    errors = schema_errors(data)
    if errors:
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise ReportError(f"{path}: invalid report: {errors[0]}{more}")


def read_report(path: str | Path) -> dict[str, Any]:
    """Load and validate a JSON report; refuse (ReportError) with the offending field's path."""
    data = read_json(path)
    check_report(data, str(path))
    result: dict[str, Any] = data
    return result


def load_report(path: str | Path) -> RunResult:
    return RunResult.from_json_dict(read_report(path))
