"""The certificate of a backend run (``afdb-certificate/1``): areas, verdict, digest.

A certificate holds the backend, the environment that defines it, the scope of the
run, one verdict per area, the full report (``afdb-report/1``) and a digest. The
digest is a SHA-256 over the sorted (case id, status) pairs, the backend and the
environment fields that define it (``DIGEST_ENVIRONMENT``), so an edited status,
backend or torch build is detected; areas and the verdict are recomputed from the
cases on read, so an edited verdict is detected too.

The JSON Schema is package data (``harness/schemas/certificate.json``, whose ``cases`` is
the report's schema), checked on every read by ``harness.core.schema`` (jsonschema).
"""

from __future__ import annotations

import hashlib
import html
import json
from collections import Counter
from pathlib import Path
from typing import Any

from harness.core.errors import UsageError
from harness.core.results import BAD_STATUSES, SKIP, STATUSES, UNSUPPORTED, RunResult
from harness.reports.report import clip, code_span, md_escape, write_atomic

CERT_SCHEMA = "afdb-certificate/1"

CONFORMS = "conforms"
DOES_NOT_CONFORM = "does not conform"
NOT_APPLICABLE = "not applicable"
INCOMPLETE = "incomplete"

#: Areas in the order a certificate lists them, with the checks each covers.
AREAS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("vmap", ("vmap", "vmap_hazard", "vmap_fallback")),
    ("nested and chunked vmap", ("vmap_nested", "vmap_chunked")),
    ("rule contract", ("contract",)),
    ("first-order AD", ("jvp", "vjp", "jacrev", "jacfwd", "eager_vjp", "eager_jvp")),
    ("second-order AD", ("jvp_of_vjp", "vjp_of_vjp", "eager_vjp_of_vjp")),
    (
        "vmap/AD compositions",
        (
            "grad_of_vmap",
            "jvp_of_vmap",
            "vmap_of_vjp",
            "vmap_of_jvp",
            "vmap_of_vjp_of_vjp",
            "vmap_of_jvp_of_vjp",
            "vmap_of_autograd_grad",
        ),
    ),
    ("cross-backend", ("cross_backend",)),
    (
        "custom ops (opcheck)",
        (
            "opcheck_schema",
            "opcheck_autograd_registration",
            "opcheck_faketensor",
            "opcheck_aot_dispatch_static",
            "opcheck_aot_dispatch_dynamic",
        ),
    ),
)
COMPILE_AREA = "compile"
OTHER_AREA = "other"

#: Environment fields that define the backend (they enter the digest).
DIGEST_ENVIRONMENT = (
    "torch_version",
    "torch_git_version",
    "device",
    "device_name",
    "capability",
    "driver",
    "runtime",
    "imports",
)


class CertificateError(UsageError):
    """A file that is not a valid certificate of the version this suite reads."""


def area_of(check: str) -> str:
    for name, checks in AREAS:
        if check in checks:
            return name
    if check.startswith("compiled_") or check.endswith("_of_compiled"):
        return COMPILE_AREA
    return OTHER_AREA


def area_names(checks: list[str]) -> list[str]:
    """Every standard area, then compile and other where this run has such checks."""
    names = [name for name, _ in AREAS]
    extra = [a for a in (COMPILE_AREA, OTHER_AREA) if any(area_of(c) == a for c in checks)]
    return names + extra


def compute_areas(
    cases: list[dict[str, Any]], checks: list[str], notes: dict[str, str]
) -> list[dict[str, Any]]:
    """One record per area: its verdict, status counts and non-conforming case ids."""
    per: dict[str, list[dict[str, Any]]] = {}
    for c in cases:
        per.setdefault(area_of(c["check"]), []).append(c)
    present = {c["check"] for c in cases}
    out = []
    for name in area_names(sorted(set(checks) | present)):
        mine = per.get(name, [])
        counts = Counter(c["status"] for c in mine)
        bad = [c["id"] for c in mine if c["status"] in BAD_STATUSES]
        exercised = [c for c in mine if c["status"] not in (UNSUPPORTED, SKIP)]
        if bad:
            verdict = DOES_NOT_CONFORM
        elif exercised:
            verdict = CONFORMS
        else:
            verdict = NOT_APPLICABLE
        note = notes.get(name, "")
        if not mine and not note:
            note = "no check of this area ran"
        elif not exercised and not bad and not note:
            note = "every case is unsupported or skipped"
        out.append(
            {
                "name": name,
                "checks": sorted({c["check"] for c in mine}),
                "verdict": verdict,
                "counts": {s: counts[s] for s in STATUSES if counts[s]},
                "non_conforming": bad,
                "note": note,
            }
        )
    return out


def overall_verdict(areas: list[dict[str, Any]], interrupted: bool) -> str:
    if interrupted:
        return INCOMPLETE
    if any(a["verdict"] == DOES_NOT_CONFORM for a in areas):
        return DOES_NOT_CONFORM
    if not any(a["verdict"] == CONFORMS for a in areas):
        return NOT_APPLICABLE
    return CONFORMS


def coverage(areas: list[dict[str, Any]], verdict: str) -> str:
    """What a verdict rests on, per area, for the verdict line:

    ``conforms on 1,119 cases, 641 of them unsupported: vmap 300 (12 unsupported), ...``;
    when most cases are unsupported the line says so (``MOST CASES DID NOT RUN``)."""
    total = sum(sum(a["counts"].values()) for a in areas)
    unsupported = sum(a["counts"].get(UNSUPPORTED, 0) for a in areas)
    bad = sum(len(a["non_conforming"]) for a in areas)
    parts = []
    for a in areas:
        n = sum(a["counts"].values())
        if not n:
            continue
        u = a["counts"].get(UNSUPPORTED, 0)
        detail = [f"{len(a['non_conforming']):,} not conforming"] if a["non_conforming"] else []
        detail += [f"{u:,} unsupported"] if u else []
        parts.append(f"{a['name']} {n:,}" + (f" ({', '.join(detail)})" if detail else ""))
    if verdict == DOES_NOT_CONFORM:
        head = f"{verdict}: {bad:,} of {total:,} cases do not conform"
    elif verdict == NOT_APPLICABLE:
        head = f"{verdict}: none of {total:,} cases ran (all unsupported or skipped)"
    elif verdict == INCOMPLETE:
        head = f"{verdict}: the run was interrupted after {total:,} cases"
    else:
        head = f"{verdict} on {total:,} cases"
    if unsupported and verdict != NOT_APPLICABLE:
        share = round(100 * unsupported / total)
        head += f", {unsupported:,} of them unsupported"
        if 2 * unsupported > total:
            head += f" ({share}%: MOST CASES DID NOT RUN on this backend)"
    if verdict == NOT_APPLICABLE:
        return head
    return head + (": " + "; ".join(parts) if parts else "")


def verdict_line(cert: dict[str, Any]) -> str:
    """The certificate's verdict with the coverage it rests on (see ``coverage``)."""
    return coverage(cert["areas"], cert["verdict"])


def digest(cert: dict[str, Any]) -> str:
    env = cert["environment"]
    payload = {
        "cases": sorted([c["id"], c["status"]] for c in cert["cases"]["cases"]),
        "backend": cert["backend"],
        "environment": {k: env.get(k) for k in DIGEST_ENVIRONMENT},
    }
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def build(
    result: RunResult,
    *,
    backend: dict[str, Any],
    environment: dict[str, Any],
    scope: dict[str, Any],
    notes: dict[str, str],
) -> dict[str, Any]:
    report = result.to_json_dict()
    checks = list(scope.get("checks") or [])
    areas = compute_areas(report["cases"], checks, notes)
    cert: dict[str, Any] = {
        "schema": CERT_SCHEMA,
        "backend": backend,
        "environment": environment,
        "scope": scope,
        "area_notes": notes,
        "areas": areas,
        "verdict": overall_verdict(areas, bool(result.metadata.get("interrupted"))),
        "cases": report,
    }
    cert["digest"] = digest(cert)
    return cert


# --- reading ---------------------------------------------------------------------------------


def validation_errors(data: Any) -> list[str]:
    from harness.core.schema import errors, report_consistency

    return errors("certificate", data) or report_consistency(data["cases"], prefix="cases.")


def edits(cert: dict[str, Any]) -> list[str]:
    """What in a valid certificate disagrees with its own content (empty: untouched)."""
    found = []
    if digest(cert) != cert["digest"]:
        found.append("the digest does not match the cases, backend and environment")
    interrupted = bool(cert["cases"]["metadata"].get("interrupted"))
    areas = compute_areas(
        cert["cases"]["cases"], list(cert["scope"].get("checks") or []), cert["area_notes"]
    )
    if areas != cert["areas"]:
        found.append("the areas do not follow from the cases")
    if overall_verdict(areas, interrupted) != cert["verdict"]:
        found.append("the verdict does not follow from the areas")
    return found


def read_certificate(path: str | Path) -> dict[str, Any]:
    """Load and validate a certificate; CertificateError (one line) for anything else."""
    from harness.core.schema import ReportError, read_json

    try:
        data = read_json(path)
    except ReportError as e:
        raise CertificateError(str(e)) from None
    version = data.get("schema") if isinstance(data, dict) else None
    if version != CERT_SCHEMA:
        if isinstance(version, str) and version.startswith("afdb-certificate/"):
            raise CertificateError(
                f"{path}: schema {version!r}, but this afdb reads {CERT_SCHEMA!r}; use the afdb "
                "version that wrote it"
            )
        what = f"schema {version!r}" if isinstance(version, str) else "no schema field"
        raise CertificateError(
            f'{path}: not an afdb certificate ({what}; a certificate has "schema": '
            f'"{CERT_SCHEMA}"); write one with `afdb certify`'
        )
    found = validation_errors(data)
    if found:
        from harness.core.schema import one_line

        raise CertificateError(one_line(str(path), "certificate", found))
    cert: dict[str, Any] = data
    return cert


# --- renderings ------------------------------------------------------------------------------


def _env_rows(cert: dict[str, Any]) -> list[tuple[str, str]]:
    env = cert["environment"]
    rows = [
        ("torch", f"{env.get('torch_version')} ({str(env.get('torch_git_version'))[:12]})"),
        ("python", str(env.get("python"))),
        ("os", str(env.get("os"))),
        ("cpu", str(env.get("cpu"))),
        ("suite", f"{env.get('suite_version')} ({env.get('suite_revision') or 'no git revision'})"),
    ]
    for key in ("device", "device_name", "capability", "driver", "runtime"):
        if env.get(key):
            rows.append((key.replace("_", " "), str(env[key])))
    imports = env.get("imports") or {}
    if imports:
        rows.append(("--import", ", ".join(f"{m} {v}".strip() for m, v in imports.items())))
    return rows


def _scope_rows(cert: dict[str, Any]) -> list[tuple[str, str]]:
    s = cert["scope"]
    entries = s.get("entries")
    return [
        ("source", str(s.get("source"))),
        ("entries", "all" if entries in (None, "all") else ", ".join(entries)),
        ("dtype, seed", f"{s.get('dtype')}, {s.get('seed')}"),
        ("checks", ", ".join(s.get("checks") or [])),
        ("plans", str(s.get("plans", ""))),
        ("expectations", str(s.get("expectations") or "none")),
    ]


def backend_title(cert: dict[str, Any]) -> str:
    b = cert["backend"]
    opts = ", ".join(f"{k}={v}" for k, v in (b.get("options") or {}).items())
    return f"{b['kind']} {b['name']}" + (f" ({opts})" if opts else "")


def to_markdown(cert: dict[str, Any], *, max_ids: int = 30, max_unsupported: int = 150) -> str:
    report = RunResult.from_json_dict(cert["cases"])
    lines = [
        f"# afdb certificate: {md_escape(backend_title(cert))}",
        "",
        f"**Verdict: {md_escape(verdict_line(cert))}**",
        "",
        f"Cases: {report.summary_line()}.",
        "",
        f"Digest `{cert['digest']}`; re-check with `afdb certify --verify CERT.json`.",
        "",
        "| environment | |",
        "|---|---|",
    ]
    lines += [f"| {k} | {md_escape(v)} |" for k, v in _env_rows(cert)]
    lines += ["", "| scope | |", "|---|---|"]
    lines += [f"| {k} | {md_escape(v)} |" for k, v in _scope_rows(cert)]
    lines += ["", "## Areas", "", "| area | verdict | cases | note |", "|---|---|---|---|"]
    for a in cert["areas"]:
        counts = ", ".join(f"{n} {s}" for s, n in a["counts"].items()) or "-"
        lines.append(
            f"| {md_escape(a['name'])} | **{md_escape(a['verdict'])}** | {counts} "
            f"| {md_escape(clip(a['note'], 200))} |"
        )
    bad = [a for a in cert["areas"] if a["non_conforming"]]
    if bad:
        lines += ["", "## Non-conforming cases", ""]
        by_id = {c.id: c for c in report.cases}
        for a in bad:
            lines += [f"### {md_escape(a['name'])} ({len(a['non_conforming'])})", ""]
            for cid in a["non_conforming"][:max_ids]:
                c = by_id[cid]
                lines.append(
                    f"- {code_span(cid)} **{c.status}**: {md_escape(clip(c.message, 400))}"
                )
            if len(a["non_conforming"]) > max_ids:
                lines.append(f"- ... {len(a['non_conforming']) - max_ids} more in the JSON")
            lines.append("")
    unsupported: dict[tuple[str, str], tuple[str, int]] = {}
    for c in report.cases:
        if c.status == UNSUPPORTED:
            reason, n = unsupported.get((c.entry, c.check), (c.message, 0))
            unsupported[(c.entry, c.check)] = (reason, n + 1)
    if unsupported:
        lines += ["", f"## Unsupported ({len(unsupported)} entry x check; the first reason)", ""]
        for (entry, check), (reason, n) in list(unsupported.items())[:max_unsupported]:
            first = reason.splitlines()[0] if reason else ""
            lines.append(
                f"- {md_escape(entry)} / {md_escape(check)} ({n}): {md_escape(clip(first, 240))}"
            )
        if len(unsupported) > max_unsupported:
            lines.append(f"- ... {len(unsupported) - max_unsupported} more in the JSON")
    return "\n".join(lines) + "\n"


def to_html(cert: dict[str, Any], *, max_ids: int = 50) -> str:
    e = html.escape
    report = RunResult.from_json_dict(cert["cases"])
    colour = {CONFORMS: "#1a7f37", DOES_NOT_CONFORM: "#cf222e"}
    rows = "".join(f"<tr><th>{e(k)}</th><td>{e(v)}</td></tr>" for k, v in _env_rows(cert))
    scope = "".join(f"<tr><th>{e(k)}</th><td>{e(v)}</td></tr>" for k, v in _scope_rows(cert))
    areas = []
    for a in cert["areas"]:
        counts = ", ".join(f"{n} {s}" for s, n in a["counts"].items()) or "-"
        ids = "".join(f"<li><code>{e(i)}</code></li>" for i in a["non_conforming"][:max_ids])
        more = len(a["non_conforming"]) - max_ids
        if more > 0:
            ids += f"<li>... {more} more in the JSON</li>"
        areas.append(
            f"<tr><td>{e(a['name'])}</td>"
            f"<td style='color:{colour.get(a['verdict'], '#57606a')}'><b>{e(a['verdict'])}</b></td>"
            f"<td>{e(counts)}</td><td>{e(a['note'])}<ul>{ids}</ul></td></tr>"
        )
    return (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>afdb certificate: {e(backend_title(cert))}</title>"
        "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
        "td,th{border:1px solid #d0d7de;padding:4px 8px;text-align:left;vertical-align:top}"
        "</style></head><body>"
        f"<h1>afdb certificate: {e(backend_title(cert))}</h1>"
        f"<p><b style='color:{colour.get(cert['verdict'], '#57606a')}'>Verdict: "
        f"{e(verdict_line(cert))}</b></p><p>Cases: {e(report.summary_line())}.</p>"
        f"<p>Digest <code>{e(cert['digest'])}</code>; re-check with "
        "<code>afdb certify --verify CERT.json</code>.</p>"
        f"<h2>Environment</h2><table>{rows}</table><h2>Scope</h2><table>{scope}</table>"
        "<h2>Areas</h2><table><tr><th>area</th><th>verdict</th><th>cases</th><th>note</th></tr>"
        + "".join(areas)
        + "</table></body></html>\n"
    )


def write_json(cert: dict[str, Any], path: str | Path) -> None:
    write_atomic(path, json.dumps(cert, indent=1) + "\n")


def write_markdown(cert: dict[str, Any], path: str | Path) -> None:
    write_atomic(path, to_markdown(cert))


def write_html(cert: dict[str, Any], path: str | Path) -> None:
    write_atomic(path, to_html(cert))


__all__ = [
    "AREAS",
    "coverage",
    "verdict_line",
    "CERT_SCHEMA",
    "CONFORMS",
    "DOES_NOT_CONFORM",
    "NOT_APPLICABLE",
    "CertificateError",
    "area_of",
    "build",
    "compute_areas",
    "digest",
    "edits",
    "read_certificate",
    "to_html",
    "to_markdown",
]
