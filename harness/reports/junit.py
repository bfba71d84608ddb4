"""JUnit XML: one ``<testcase>`` per case, one ``<testsuite>`` per entry, for CI systems.

Status mapping: ``fail`` and ``xpass`` are ``<failure>``; ``error``, ``timeout`` and
``crash`` (and ``internal``, the suite's own errors, listed first) are ``<error>``; ``unsupported``, ``skip`` and ``xfail`` are ``<skipped>``
with the reason. ``classname`` is ``afdb.ENTRY.CHECK`` and ``name`` the case id, so a
CI's test history follows the stable ids. Characters that XML 1.0 cannot carry
(NUL, most control characters) are written as ``\\xNN``.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

from harness.core.results import (
    CRASH,
    ERROR,
    FAIL,
    INTERNAL,
    SKIP,
    TIMEOUT,
    UNSUPPORTED,
    XFAIL,
    XPASS,
    RunResult,
    internal_first,
)
from harness.core.textsafe import visible
from harness.reports.report import write_atomic

FAILURE = frozenset({FAIL, XPASS})
ERRORS = frozenset({ERROR, TIMEOUT, CRASH, INTERNAL})
SKIPPED = frozenset({UNSUPPORTED, SKIP, XFAIL})

_INVALID_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def xml_text(text: object) -> str:
    text = visible(str(text))  # ANSI escapes, BEL, C1 controls, lone surrogates as \xNN
    return _INVALID_XML.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def _classname(entry: str, check: str) -> str:
    return f"afdb.{entry}.{check}"


def to_junit_element(result: RunResult) -> ET.Element:
    md = result.metadata
    root = ET.Element("testsuites", name="afdb")
    suites: dict[str, ET.Element] = {}
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    per_suite: dict[str, dict[str, float]] = {}
    for c in internal_first(result.cases):
        suite = suites.get(c.entry)
        if suite is None:
            suite = ET.SubElement(root, "testsuite", name=xml_text(f"afdb.{c.entry}"))
            props = ET.SubElement(suite, "properties")
            for key in ("torch_version", "torch_git_version", "device", "dtype", "seed"):
                ET.SubElement(props, "property", name=key, value=xml_text(md.get(key, "")))
            # The run's verdict: PASS, FAIL, PARTIAL (a merge lacking shards), INTERRUPTED.
            ET.SubElement(props, "property", name="verdict", value=result.verdict)
            if result.verdict_note():
                ET.SubElement(
                    props, "property", name="verdict_note", value=xml_text(result.verdict_note())
                )
            suites[c.entry] = suite
            per_suite[c.entry] = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0, "time": 0.0}
        counts = per_suite[c.entry]
        case = ET.SubElement(
            suite,
            "testcase",
            classname=xml_text(_classname(c.entry, c.check)),
            name=xml_text(c.id),
            time=f"{c.duration_s:.6f}",
        )
        detail = c.message + (f"\nreproduce: {c.repro}" if c.repro else "")
        first_line = c.message.splitlines()[0] if c.message else c.status
        if c.status in FAILURE:
            kind, key = "failure", "failures"
        elif c.status in ERRORS:
            kind, key = "error", "errors"
        elif c.status in SKIPPED:
            kind, key = "skipped", "skipped"
        else:
            kind, key = "", ""
        if kind:
            node = ET.SubElement(
                case, kind, message=xml_text(f"{c.status}: {first_line}"), type=c.status
            )
            if kind != "skipped":
                node.text = xml_text(detail)
            counts[key] += 1
        counts["tests"] += 1
        counts["time"] += round(c.duration_s, 6)  # as in the JSON, so re-rendering is exact
    for entry, suite in suites.items():
        counts = per_suite[entry]
        for key in totals:
            suite.set(key, str(int(counts[key])))
            totals[key] += int(counts[key])
        suite.set("time", f"{counts['time']:.6f}")
    for key, value in totals.items():
        root.set(key, str(value))
    root.set("time", str(md.get("wall_s", "")))
    return root


def to_junit(result: RunResult) -> str:
    root = to_junit_element(result)
    ET.indent(root, space=" ")
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def write_junit(result: RunResult, path: str | Path) -> None:
    write_atomic(path, to_junit(result))
