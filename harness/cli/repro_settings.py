"""What ``afdb repro --report R.json`` takes from a report, validated before any of it is used.

A report is data from elsewhere (a CI artifact, a colleague): it is read through the
schema validator (its version, its shape), then every metadata field the reproducer
uses is checked for type and syntax, naming the field: ``metadata.target_spec.target:
'os; rm -rf /:x' is not a module path``. Only then is a target imported.
"""

from __future__ import annotations

from typing import Any

from harness.core.errors import UsageError
from harness.core.options import DTYPES, SAMPLE_DTYPES

_SPEC_FIELDS = {
    "target": str,
    "samples": (str, type(None)),
    "gradient": str,
    "capabilities": dict,
    "name": (str, type(None)),
    "batch_size": (str, type(None)),
    "nested_batch_sizes": (str, type(None)),
    "base_dir": (str, type(None)),
}


def _int_list(value: Any, minimum: int) -> bool:
    return isinstance(value, list) and all(
        isinstance(v, int) and not isinstance(v, bool) and v >= minimum for v in value
    )


def _problem(md: dict[str, Any]) -> str:
    """The first problem with the metadata fields a reproducer uses, as ``path: what``."""
    from harness.repro.script import spec_problem
    from harness.sources import SOURCES

    if md.get("dtype") not in (*DTYPES, SAMPLE_DTYPES):
        return (
            f"metadata.dtype: {md.get('dtype')!r} is not one of {', '.join(DTYPES)} "
            f"or {SAMPLE_DTYPES!r}"
        )
    for key, minimum in (("batch_sizes", 2), ("nested_batch_sizes", 2), ("chunk", 1)):
        if key in md and not _int_list(md[key], minimum):
            return f"metadata.{key}: {md[key]!r} is not a list of integers >= {minimum}"
    if "chunk" in md and len(md["chunk"]) != 2:
        return f"metadata.chunk: {md['chunk']!r} is not [batch size, chunk size]"
    if "plan_cap" in md and (
        not isinstance(md["plan_cap"], int)
        or isinstance(md["plan_cap"], bool)
        or md["plan_cap"] < 1
    ):
        return f"metadata.plan_cap: {md['plan_cap']!r} is not an integer >= 1"
    known = (*SOURCES, "user")
    if md.get("source") is not None and md["source"] not in known:
        return f"metadata.source: {md['source']!r} is not one of {', '.join(known)}"
    spec = md.get("target_spec")
    if spec is None:
        return ""
    if not isinstance(spec, dict):
        return f"metadata.target_spec: a {type(spec).__name__}, not an object"
    for key, value in spec.items():
        kind = _SPEC_FIELDS.get(key)
        if kind is None:
            return f"metadata.target_spec.{key}: unexpected field"
        if not isinstance(value, kind):  # type: ignore[arg-type]
            return f"metadata.target_spec.{key}: {type(value).__name__} {value!r:.60} has the wrong type"
    problem = spec_problem(spec.get("target"), "metadata.target_spec.target:")
    if not problem and spec.get("samples") is not None:
        problem = spec_problem(spec["samples"], "metadata.target_spec.samples:")
    if problem:
        return problem
    if spec.get("gradient", "derivative") not in ("derivative", "custom"):
        return f"metadata.target_spec.gradient: {spec['gradient']!r} is not derivative or custom"
    name = spec.get("name")
    if name is not None and (not name or len(name) > 200 or not name.isprintable() or "/" in name):
        return (
            f"metadata.target_spec.name: {name!r:.80} is not an entry name (printable, no '/', "
            "at most 200 characters)"
        )
    for key, value in spec.get("capabilities", {}).items():
        path = f"metadata.target_spec.capabilities.{key}"
        if key in ("inplace_args", "nondiff_outputs", "nondiff_args"):
            if not _int_list(value, 0):
                return f"{path}: {value!r:.60} is not a list of argument indices"
        elif key in ("randomness", "double_backward"):
            if not isinstance(value, bool):
                return f"{path}: {value!r:.60} is not true or false"
        else:
            return (
                f"{path}: not a capability (inplace_args, nondiff_outputs, nondiff_args, "
                "randomness, double_backward)"
            )
    return ""


def report_settings(path: str) -> dict[str, Any]:
    """The metadata of the report at ``path``, or UsageError naming the field that is wrong."""
    from harness.core.schema import read_report

    data = read_report(path)  # refuses other versions, invalid JSON, deep nesting, FIFOs
    md: dict[str, Any] = data["metadata"]
    problem = _problem(md)
    if problem:
        raise UsageError(f"--report {path}: {problem}")
    return md
