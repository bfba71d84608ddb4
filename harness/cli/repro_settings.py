"""What ``afdb repro --report R.json`` takes from a report, validated before any of it is used.

A report is data from elsewhere (a CI artifact, a colleague): it is read through the
schema (its version; the type and range of every metadata field the reproducer uses),
then what a schema cannot say is checked, naming the field: ``metadata.target_spec.target:
'os; rm -rf /:x' is not a module path``. The report's target is never imported on its word:
``afdb repro`` refuses a report of a user Function unless the user names TARGET (and
``--samples``) on the command line, and takes the report's settings only when what the user
named is the report's target (``harness.sources.target.same_spec``).
"""

from __future__ import annotations

from typing import Any

from harness.core.errors import UsageError


def _problem(md: dict[str, Any]) -> str:
    """The first problem a schema cannot see in the metadata a reproducer uses, as
    ``path: what`` (types, ranges and known fields are ``harness/schemas/report.json``'s)."""
    from harness.core.options import DTYPES, SAMPLE_DTYPES  # torch: not for --help
    from harness.repro.script import spec_problem
    from harness.sources.database import SOURCES

    if md.get("dtype") not in (*DTYPES, SAMPLE_DTYPES):
        return (
            f"metadata.dtype: {md.get('dtype')!r} is not one of {', '.join(DTYPES)} "
            f"or {SAMPLE_DTYPES!r}"
        )
    known = (*SOURCES, "user", "recorded")
    if md.get("source") is not None and md["source"] not in known:
        return f"metadata.source: {md['source']!r} is not one of {', '.join(known)}"
    spec = md.get("target_spec")
    if spec is None:
        return ""
    problem = spec_problem(spec["target"], "metadata.target_spec.target:")
    if not problem and spec.get("samples") is not None:
        problem = spec_problem(spec["samples"], "metadata.target_spec.samples:")
    if problem:
        return problem
    name = spec.get("name")
    if name is not None and (not name or len(name) > 200 or not name.isprintable() or "/" in name):
        return (
            f"metadata.target_spec.name: {name!r:.80} is not an entry name (printable, no '/', "
            "at most 200 characters)"
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


def add_repro_options(r: Any) -> None:
    """``afdb repro``'s options for a case of a recorded Function (its ``reproduce:`` line
    writes them): the failing sub-check, and how to rebuild a class made by a factory."""
    r.add_argument(
        "--sub-check",
        metavar="NAME",
        help="the sub-check the case failed, as its message names it ('input 1 alone, all "
        "outputs', 'non-contiguous inputs and cotangents'): the script makes that call",
    )
    r.add_argument(
        "--rebuild",
        metavar="MODULE:FACTORY",
        help="with --recorded: the module-level function that makes the Function's class",
    )
    r.add_argument(
        "--rebuild-args",
        metavar="JSON",
        default="{}",
        help="with --rebuild: the factory's keyword arguments, as a JSON object",
    )


def rebuild_spec(args: Any) -> tuple[str, dict[str, Any]] | None:
    """(factory, kwargs) from ``--rebuild``/``--rebuild-args``, or None; UsageError when wrong."""
    import json

    if not getattr(args, "rebuild", None):
        return None
    try:
        kwargs = json.loads(args.rebuild_args or "{}")
    except ValueError as e:
        raise UsageError(f"--rebuild-args: not JSON ({e})") from None
    if not isinstance(kwargs, dict):
        raise UsageError(
            "--rebuild-args: a JSON object of keyword arguments, e.g. '{\"alpha\": 2}'"
        )
    module, sep, name = str(args.rebuild).partition(":")
    if not sep or not all(p.isidentifier() for p in (*module.split("."), *name.split("."))):
        raise UsageError(f"--rebuild {args.rebuild!r}: write package.module:factory")
    return str(args.rebuild), kwargs
