"""The JSON Schemas of every file the suite reads back, and the one way they are validated.

The schemas are plain JSON Schema (draft 2020-12), shipped as package data in
``harness/schemas/``: ``report.json`` (``afdb-report/1``, shard metadata included),
``certificate.json`` (``afdb-certificate/1``, whose ``cases`` is a report),
``expectations.json`` (``afdb-expectations/1``), ``durations.json`` (what
``--shard-durations`` reads of a report) and ``recording.json`` (``afdb-recording/1``,
the index of a recording of Function calls). Validation is the ``jsonschema`` library's,
imported on the first validation only (the pytest plugin and ``afdb list`` never pay
for it). Its errors are written as one line naming the place of the offending field:
``cases[3].status: 'passed' is not one of 'pass', 'fail', ...``.

Two choices are stricter than plain JSON Schema, because afdb reads these values back
as Python numbers: an ``integer`` is an int (``2.0`` is not one) and a ``number`` is
finite (``Infinity`` and ``NaN``, which Python's json module accepts, are not numbers).

After the schema, a report is checked for what a schema cannot say: unique case ids and
a summary that agrees with the cases.
"""

from __future__ import annotations

import functools
import itertools
import json
import math
import re
from collections import Counter
from importlib import resources
from pathlib import Path
from typing import Any, NamedTuple

from harness.core.errors import UsageError
from harness.core.results import BAD_STATUSES, SCHEMA, RunResult

#: The shipped schemas, by the name of their file in harness/schemas/ (without .json).
SCHEMA_NAMES = ("report", "certificate", "expectations", "durations", "recording")


class ReportError(UsageError):
    """A file that is not a valid report of the version this suite reads."""


@functools.cache
def load_schema(name: str) -> dict[str, Any]:
    """The shipped schema ``harness/schemas/NAME.json``."""
    text = resources.files("harness").joinpath("schemas", f"{name}.json").read_text("utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


def report_schema() -> dict[str, Any]:
    return load_schema("report")


@functools.cache
def _validator(name: str) -> Any:
    """A jsonschema validator for ``name``, the other shipped schemas registered for ``$ref``."""
    import jsonschema
    from referencing import Registry
    from referencing.jsonschema import DRAFT202012

    registry: Registry[Any] = Registry().with_resources(
        (load_schema(n)["$id"], DRAFT202012.create_resource(load_schema(n))) for n in SCHEMA_NAMES
    )
    base = jsonschema.Draft202012Validator

    def is_integer(_: Any, value: Any) -> bool:
        return type(value) is int

    def is_number(_: Any, value: Any) -> bool:
        return type(value) is int or (type(value) is float and math.isfinite(value))

    checker = base.TYPE_CHECKER.redefine_many({"integer": is_integer, "number": is_number})
    strict = jsonschema.validators.extend(base, type_checker=checker)
    return strict(load_schema(name), registry=registry)


def _join(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    name = key if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key) else json.dumps(key)
    return f"{path}.{name}" if path else name


def place(parts: Any, prefix: str = "") -> str:
    """``cases[3].status`` for the JSON path ``["cases", 3, "status"]``."""
    path = prefix
    for part in parts:
        path = _join(path, part)
    return path


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _types(value: Any) -> str:
    return " or ".join(value) if isinstance(value, list) else str(value)


class Violation(NamedTuple):
    """One way a file breaks its schema: the JSON path, that path written out, the problem."""

    path: tuple[str | int, ...]
    place: str
    problem: str


def _problems(error: Any, prefix: str) -> list[Violation]:
    """The violations one jsonschema error stands for (``required`` and
    ``additionalProperties`` name each field; ``anyOf`` the branch that got furthest)."""
    import jsonschema

    v, kw, arg = error.instance, error.validator, error.validator_value
    parts = tuple(error.absolute_path)
    where = place(parts, prefix)
    if kw == "required":
        missing = [k for k in arg if isinstance(v, dict) and k not in v]
        return [
            Violation((*parts, k), _join(where, k), "missing (a required field)") for k in missing
        ]
    if kw == "additionalProperties" and arg is False:
        known = error.schema.get("properties", {})
        extra = [k for k in v if k not in known]
        return [Violation((*parts, k), _join(where, k), "unexpected field") for k in extra]
    if kw in ("anyOf", "oneOf") and error.context:
        # The branch whose errors are not a type mismatch right here got furthest.
        deeper = [e for e in error.context if e.validator != "type" or e.relative_path]
        return _problems(jsonschema.exceptions.best_match(deeper or error.context), prefix)
    if "propertyNames" in error.absolute_schema_path:  # the instance is the key itself
        parts, where = (*parts, v), f"{_join(where, v)} (key)"
    text = {
        "type": lambda: f"{_short(v)} is not of type {_types(arg)}",
        "const": lambda: f"{_short(v)} is not {_short(arg)}",
        "enum": lambda: f"{_short(v)} is not one of {', '.join(map(repr, arg))}",
        "minLength": lambda: f"{_short(v)} is shorter than {arg} characters",
        "maxLength": lambda: f"{_short(v)} is longer than {arg} characters",
        "pattern": lambda: f"{_short(v)} does not match {arg!r}",
        "minimum": lambda: f"{_short(v)} is less than the minimum {arg}",
        "maximum": lambda: f"{_short(v)} is more than the maximum {arg}",
        "exclusiveMinimum": lambda: f"{_short(v)} is not more than {arg}",
        "minItems": lambda: f"has {len(v)} items, needs at least {arg}",
        "maxItems": lambda: f"has {len(v)} items, at most {arg} allowed",
    }.get(kw)
    return [Violation(parts, where or "(top level)", text() if text else error.message)]


def violations(name: str, data: Any, *, prefix: str = "", limit: int = 20) -> list[Violation]:
    """Each way ``data`` breaks the shipped schema ``name`` (at most ``limit``), in the
    order jsonschema finds them."""
    out: dict[tuple[str, str], Violation] = {}  # jsonschema says "required" once per field
    for error in itertools.islice(_validator(name).iter_errors(data), limit):
        for found in _problems(error, prefix):
            out.setdefault((found.place, found.problem), found)
    return list(out.values())[:limit]


def errors(name: str, data: Any, *, prefix: str = "", limit: int = 20) -> list[str]:
    """``place: problem`` for each way ``data`` breaks the shipped schema ``name``."""
    return [f"{v.place}: {v.problem}" for v in violations(name, data, prefix=prefix, limit=limit)]


def report_consistency(data: dict[str, Any], prefix: str = "") -> list[str]:
    """What a schema cannot say of a schema-valid report: unique ids, a summary that agrees."""
    out: list[str] = []
    cases = data["cases"]
    seen: dict[str, int] = {}
    for i, case in enumerate(cases):
        if case["id"] in seen:
            out.append(
                f"{prefix}cases[{i}].id: {case['id']!r} repeats {prefix}cases[{seen[case['id']]}].id; "
                "ids must be unique"
            )
        seen.setdefault(case["id"], i)
    summary = data["summary"]
    if summary["total"] != len(cases):
        out.append(
            f"{prefix}summary.total: {summary['total']} but the report has {len(cases)} cases"
        )
    counts = Counter(c["status"] for c in cases)
    for status in sorted(set(counts) | set(summary["counts"])):
        if summary["counts"].get(status, 0) != counts.get(status, 0):
            out.append(
                f"{prefix}summary.counts.{status}: {summary['counts'].get(status, 0)} but "
                f"{counts.get(status, 0)} cases have that status"
            )
    ok = not any(c["status"] in BAD_STATUSES for c in cases)
    if summary["ok"] != ok:
        out.append(f"{prefix}summary.ok: {summary['ok']} but the cases say {ok}")
    return out


def schema_errors(data: Any) -> list[str]:
    """Schema violations of a report dict, then the checks a schema cannot express."""
    found = errors("report", data)
    return found or report_consistency(data)


def one_line(path: str, what: str, found: list[str]) -> str:
    """``PATH: invalid WHAT: the first problem (and N more)``."""
    more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
    return f"{path}: invalid {what}: {found[0]}{more}"


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


def read_json(path: str | Path, what: str = "") -> Any:
    """The parsed JSON of a file, or ReportError with a one-line reason."""
    from harness.core.safe_io import InputError, parse_json, read_text

    try:  # a FIFO, invalid UTF-8 or nesting deeper than a report: one line, never a hang
        text = read_text(path, what)
        return parse_json(text, f"{what} {path}" if what else str(path))
    except InputError as e:
        message = str(e)
        if "not valid JSON" in message:
            message += "; a truncated file is not a report"
        raise ReportError(message) from None


def check_report(data: Any, path: str) -> None:
    """Refuse (ReportError) a report of another version or one that does not validate."""
    check_version(data, path)
    found = schema_errors(data)
    if found:
        raise ReportError(one_line(path, "report", found))


def read_report(path: str | Path) -> dict[str, Any]:
    """Load and validate a JSON report; refuse (ReportError) with the offending field's path."""
    data = read_json(path)
    check_report(data, str(path))
    result: dict[str, Any] = data
    return result


def load_report(path: str | Path) -> RunResult:
    return RunResult.from_json_dict(read_report(path))
