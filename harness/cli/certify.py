"""``afdb certify``: the database on a backend -> a verifiable certificate; ``--verify``.

    afdb certify --device D [--import MODULE ...]
    afdb certify --subclass module:Class
    afdb certify --compile BACKEND [--mode M]
    afdb certify --verify CERT.json

Exit status: 0 the backend conforms (or, with --verify, every status matches), 1 it
does not (or statuses differ, or the certificate was edited), 2 bad input.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import platform
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from harness.core.errors import UsageError
from harness.core.locations import portable_path
from harness.core.paths import PACKAGE_DIR, SUITE_ROOT
from harness.core.signals import deferred_signals

#: Expectations for torch bugs that only a backend exposes: harness/known_failures/backends/
#: SLUG.json, package data like the sources' own files.
BACKEND_EXPECTATIONS = PACKAGE_DIR / "known_failures" / "backends"


def add_parsers(sub: Any) -> None:
    from harness.cli.common import add_common_options

    p = sub.add_parser(
        "certify",
        help="run the database on a backend (device, tensor subclass, torch.compile) -> certificate",
        description="Run the database on a backend and write a certificate (--json, with "
        "--markdown/--html renderings) that anyone can re-check with --verify. Exit status: "
        "0 conforms / statuses match, 1 does not / statuses differ or the certificate was "
        "edited, 2 bad input.",
    )
    p.add_argument(
        "names",
        nargs="*",
        metavar="SELECT",
        help="entry names, tag:TAG, or case id prefixes such as NumpyMul/vmap (default: all)",
    )
    add_common_options(p)
    p.set_defaults(device=None)
    p.add_argument("--subclass", metavar="MODULE:CLASS", help="a tensor-subclass backend")
    p.add_argument(
        "--compile",
        metavar="BACKEND",
        help="a torch.compile backend (eager, aot_eager, inductor, ...)",
    )
    p.add_argument("--mode", help="torch.compile mode (with --compile)")
    p.add_argument(
        "--import",
        dest="imports",
        action="append",
        default=[],
        metavar="MODULE",
        help="import MODULE first (registers a PrivateUse1 device or a compile backend); repeatable",
    )
    p.add_argument(
        "--verify",
        metavar="CERT.json",
        help="re-run what a certificate covers and compare; imports only what you name "
        "(--subclass, --compile, --import: the certificate's backend, after reading it)",
    )
    p.add_argument("--source", default="afdb", help="entry source: afdb (default) or pytorch")
    p.add_argument(
        "--no-expectations", action="store_true", help="ignore the committed expectations files"
    )
    p.set_defaults(func=cmd_certify)


# --- building the run ------------------------------------------------------------------------


def backend_from_args(args: argparse.Namespace) -> Any:
    from harness.certify.backends import COMPILE, DEVICE, SUBCLASS, Backend, BackendError

    if args.verify:  # the backend is the certificate's, checked against what is named
        return None
    given = [f for f in ("device", "subclass", "compile") if getattr(args, f)]
    if len(given) != 1:
        raise BackendError(
            "give exactly one of --device D, --subclass module:Class, --compile BACKEND or "
            f"--verify CERT.json (got {', '.join('--' + g for g in given) or 'none'})"
        )
    if args.mode and not args.compile:
        raise BackendError("--mode goes with --compile BACKEND")
    kind = {"device": DEVICE, "subclass": SUBCLASS, "compile": COMPILE}[given[0]]
    name = getattr(args, given[0])
    options = {"mode": args.mode} if args.mode else {}
    return Backend(kind, name, options, tuple(args.imports))


def parse_checks(text: str | None, backend: Any) -> list[str]:
    """The checks of a certification: the catalogue's (or --checks) plus the backend's areas.

    For a compile backend, --checks names transforms (``vmap`` gives ``compiled_vmap`` and
    ``vmap_of_compiled``) or compile checks themselves.
    """
    from harness.certify.checks import (
        COMPILE_CHECKS,
        COMPILE_TRANSFORMS,
        extra_checks,
        inside_name,
        outside_name,
    )
    from harness.checks.catalogue import check_names

    extra = extra_checks(backend)
    catalogue = check_names() if backend.runs_catalogue() else []
    if not text:
        return catalogue + extra
    chosen: list[str] = []
    for c in (c.strip() for c in text.split(",")):
        if not c:
            continue
        if backend.kind == "compile" and c in COMPILE_TRANSFORMS:
            names = [outside_name(c), inside_name(c)]
        elif c in catalogue or c in extra:
            names = [c]
        else:
            known = ", ".join(COMPILE_TRANSFORMS) + " or " + ", ".join(COMPILE_CHECKS[:2]) + ", ..."
            if backend.kind != "compile":
                known = ", ".join(catalogue + extra)
            raise UsageError(f"unknown check {c!r} for a {backend.kind} backend; known: {known}")
        chosen += [n for n in names if n not in chosen]
    return chosen


def environment(backend: Any, imports: dict[str, str]) -> dict[str, Any]:
    import torch

    from harness.certify.backends import DEVICE, cpu_name, device_info, subclass_adapter
    from harness.engine.metadata import SUITE_VERSION, suite_revision

    env: dict[str, Any] = {
        "torch_version": torch.__version__,
        "torch_git_version": str(getattr(torch.version, "git_version", "")),
        "python": platform.python_version(),
        "os": platform.platform(),
        "cpu": cpu_name(),
        "suite_version": SUITE_VERSION,
        "suite_revision": suite_revision(),
        "imports": imports,
    }
    if backend.kind == DEVICE:
        env.update({k: str(v) for k, v in device_info(backend.name).items() if k != "device_type"})
    elif backend.kind == "subclass":
        env["subclass_wrap"] = subclass_adapter(backend.name).how
    return env


PLAN_NOTE = {
    "compile": (
        "representative subset: transforms vmap, vmap_nested, jvp, vjp, grad_of_vmap, "
        "vmap_of_vjp, vmap_of_jvp, jvp_of_vjp, vjp_of_vjp (chunked vmap and jacrev/jacfwd "
        "trace the same graphs); per check and sample one plan (every tensor argument batched "
        "at 0; the first nested plan); the transforms without vmap have no plan; each with "
        "compile outside (compiled_X) and inside (X_of_compiled)"
    ),
}


def area_notes(backend: Any) -> dict[str, str]:
    from harness.certify.certificate import AREAS

    if backend.kind == "compile":
        notes = {
            name: "not run for a compile backend: the compile area compares each transform "
            "under torch.compile with eager; eager itself is what the CPU certificate covers"
            for name, _ in AREAS
        }
        return notes
    if backend.kind == "device" and backend.name == "cpu":
        return {"cross-backend": "the CPU is the reference of every cross-backend comparison"}
    return {}


def expectations_for(
    args: argparse.Namespace, backend: Any, folder: str
) -> tuple[str | None, list[str]]:
    """The expectations file the run uses (merged from the committed ones) and its sources."""
    from harness import expectations as ex
    from harness.sources.database import DatabaseSource

    if args.no_expectations:
        return None, []
    if args.expectations:
        return args.expectations, [args.expectations]
    paths: list[str] = list(getattr(args, "expectation_sources", None) or [])
    if not paths:  # the committed ones: the source's, and the backend's when there is one
        committed = DatabaseSource(args.source).expectations()
        if committed is not None:
            paths.append(str(committed))
        own = BACKEND_EXPECTATIONS / f"{backend_slug(backend)}.json"
        if own.exists():
            paths.append(str(own))
    if len(paths) <= 1:
        return (paths[0] if paths else None), paths
    items: list[Any] = []
    for path in paths:
        try:
            items.extend(ex.load(path).items)
        except ex.ExpectationsError as e:
            raise UsageError(str(e)) from None
    merged = os.path.join(folder, "expectations.json")
    with open(merged, "w") as f:
        f.write(ex.Expectations(tuple(items)).to_json())
    return merged, paths


def backend_slug(backend: Any) -> str:
    name = backend.name.replace(":", "-").replace(".", "-").replace("/", "-")
    mode = f"-{backend.options['mode']}" if backend.options.get("mode") else ""
    return f"{backend.kind}-{name}{mode}"


def repro_command(backend: Any, entry: str, check: str, options: Any) -> str:
    """The ``afdb certify`` command that re-runs one entry's check on the backend (a case
    of a backend is not a standalone script: it needs the backend around it)."""
    import shlex

    flag = {"device": "--device", "subclass": "--subclass", "compile": "--compile"}[backend.kind]
    cmd = ["afdb", "certify", flag, backend.name]
    if backend.options.get("mode"):
        cmd += ["--mode", backend.options["mode"]]
    for module in backend.imports:
        cmd += ["--import", module]
    cmd += [entry] + (["--checks", check] if check != "samples" else [])
    cmd += ["--seed", str(options.seed)]
    cmd += ["--dtype", str(options.dtype).replace("torch.", ""), "--no-expectations"]
    return " ".join(shlex.quote(c) for c in cmd)


def _sha256(path: str | None) -> str | None:
    if not path:
        return None
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def certify(
    args: argparse.Namespace, backend: Any, *, quiet_summary: bool = False
) -> tuple[dict[str, Any], Any]:
    """Run the certification described by ``args`` on ``backend``; (certificate, result)."""
    from harness.certify.backends import BackendEntry, import_modules, reclassify
    from harness.certify.certificate import build
    from harness.session.execute import execute
    from harness.session.progress import print_summary
    from harness.session.settings import options_from_args
    from harness.sources.database import DatabaseSource
    from harness.sources.select import case_prefixes, select_entries

    if backend.kind == "compile":  # compiled autograd is what it certifies: torch's own path
        from harness.core import shims

        shims.forbid()
    imports = import_modules(backend.imports)
    backend.validate()
    checks = parse_checks(args.checks, backend)
    args.checks = None
    args.device = backend.device
    options = options_from_args(args).replace(checks=tuple(checks))
    source = DatabaseSource(args.source)
    everything = source.entries()
    entries = select_entries(everything, args.names)
    args.case_prefixes = case_prefixes(entries, args.names)
    options = source.options(entries, options)
    from harness.certify.checks import adapt

    adapted: list[BackendEntry] = adapt(backend, entries)
    folder = ""
    try:
        with deferred_signals():  # once made, the folder is removed however the run ends
            folder = tempfile.mkdtemp(prefix="afdb-certify-")
        exp_path, exp_sources = expectations_for(args, backend, folder)
        exp_sha = _sha256(exp_path)  # before the folder (and a merged file in it) goes
        args.expectations = exp_path
        # the report names the files the expectations came from, never the merged copy
        args.expectations_label = " + ".join(portable_path(p) for p in exp_sources) or None
        args.backend_spec = backend.spec()
        report_args = argparse.Namespace(**vars(args))
        for flag in ("json", "markdown", "html", "junit"):
            setattr(report_args, flag, None)  # the certificate's, written below
        result = execute(
            adapted,
            options,
            report_args,
            source=args.source,
            known_entries={e.name for e in everything},
            summary=lambda r: None,
            # the progress lines count a case as the certificate will: torch's limits on
            # the backend are unsupported, not errors
            adjust=lambda r: reclassify([r], backend),
        )
    finally:
        if folder:
            with deferred_signals():
                shutil.rmtree(folder, ignore_errors=True)
    reclassify(result.cases, backend)
    for r in result.cases:
        if r.repro:
            r.repro = repro_command(backend, r.entry, r.check, options)
    if not quiet_summary and not args.quiet:
        print_summary(result)
    if getattr(args, "junit", None):
        from harness.reports.junit import write_junit

        write_junit(result, args.junit)
    scope = {
        "source": args.source,
        "entries": list(args.names) if args.names else "all",
        "checks": checks,
        "dtype": str(options.dtype).replace("torch.", ""),
        "seed": options.seed,
        "options": options.to_dict(),
        "plans": PLAN_NOTE.get(backend.kind, str(result.metadata.get("plan_strategy", ""))),
        "expectations": args.expectations_label,
        "expectations_sha256": exp_sha,
    }
    cert = build(
        result,
        backend=backend.spec(),
        environment=environment(backend, imports),
        scope=scope,
        notes=area_notes(backend),
    )
    return cert, result


def write_certificate(cert: dict[str, Any], args: argparse.Namespace) -> None:
    from harness.certify import certificate

    if args.json:
        certificate.write_json(cert, args.json)
    if args.markdown:
        certificate.write_markdown(cert, args.markdown)
    if args.html:
        certificate.write_html(cert, args.html)


def print_areas(cert: dict[str, Any], out: Any = None, *, quiet: bool = False) -> None:
    """The certificate's areas, then its verdict line (``quiet``: the verdict line only)."""
    out = out or sys.stdout
    from harness.certify.certificate import backend_title, verdict_line

    if not quiet:
        print(f"\ncertificate for {backend_title(cert)}:", file=out)
        for a in cert["areas"]:
            counts = ", ".join(f"{n} {s}" for s, n in a["counts"].items()) or "no cases"
            print(f"  {a['name']:<26} {a['verdict']:<17} {counts}", file=out)
    print(f"verdict: {verdict_line(cert)} (digest {cert['digest'][:19]}...)", file=out)


# --- afdb certify ----------------------------------------------------------------------------


def cmd_certify(args: argparse.Namespace) -> int:
    from harness.session.outputs import check_output_paths

    backend = backend_from_args(args)
    if backend is None:
        return cmd_verify(args)
    check_output_paths(args)
    cert, result = certify(args, backend)
    write_certificate(cert, args)
    print_areas(cert, quiet=args.quiet)
    shown = getattr(args, "paths_as_given", None) or {}
    written = [
        shown.get(p, p) for f in ("json", "markdown", "html", "junit") if (p := getattr(args, f))
    ]
    if written and not args.quiet:
        print(f"wrote {', '.join(written)}")
    if result.metadata.get("interrupted"):
        return 130
    if cert["verdict"] in ("conforms", "not applicable"):
        return 0
    if not args.quiet:
        print(
            "next: each non-conforming root cause above ends with the `reproduce:` command that "
            "re-runs its entry and check on this backend"
        )
    return 1


def cmd_verify(args: argparse.Namespace) -> int:
    from harness.certify.backends import Backend
    from harness.certify.certificate import edits, read_certificate

    cert = read_certificate(args.verify)
    found = edits(cert)
    if found:
        print(
            f"afdb certify --verify {args.verify}: the certificate was edited ({'; '.join(found)})"
        )
        return 1
    from harness.certify.trust import verified_backend

    backend = verified_backend(  # nothing the certificate names is imported unless named
        Backend.from_spec(cert["backend"]),
        device=args.device,
        subclass=args.subclass,
        compile=args.compile,
        mode=args.mode,
        imports=args.imports,
    )
    scope = cert["scope"]
    opts = scope["options"]
    rerun = argparse.Namespace(**vars(args))
    rerun.names = [] if scope["entries"] == "all" else list(scope["entries"])
    rerun.source = scope["source"]
    rerun.checks = ",".join(scope["checks"])
    rerun.dtype = scope["dtype"]
    rerun.seed = scope["seed"]
    rerun.plan_cap = opts.get("plan_cap", 16)
    rerun.timeout = opts.get("timeout_s")
    rerun.batch_size = ",".join(map(str, opts.get("batch_sizes", [2])))
    rerun.nested_batch_sizes = ",".join(map(str, opts.get("nested_batch_sizes", [2, 3])))
    rerun.imports = list(backend.imports)
    if not args.expectations:  # the expectations the certificate was made with
        if scope.get("expectations") is None:
            rerun.no_expectations = True
        else:
            from harness.certify.trust import recorded_expectations

            rerun.expectation_sources = recorded_expectations(scope["expectations"], SUITE_ROOT)
            missing = [p for p in rerun.expectation_sources if not os.path.exists(p)]
            if missing:
                raise UsageError(
                    f"the certificate was made with the expectations {portable_path(missing[0])}, "
                    "which is not here; give the file with --expectations"
                )
    rerun.json = rerun.markdown = rerun.html = None
    if not args.quiet:
        print(f"re-running {cert['cases']['summary']['total']} cases of {args.verify} ...")
    rerun.quiet = True
    new, _ = certify(rerun, backend, quiet_summary=True)
    old_status = {c["id"]: c["status"] for c in cert["cases"]["cases"]}
    new_status = {c["id"]: c["status"] for c in new["cases"]["cases"]}
    differing = [
        f"{cid}: certificate {old_status.get(cid, 'absent')}, this machine {new_status.get(cid, 'absent')}"
        for cid in sorted(set(old_status) | set(new_status))
        if old_status.get(cid) != new_status.get(cid)
    ]
    env_old, env_new = cert["environment"], new["environment"]
    changed_env = [
        f"{k}: {env_old.get(k)!r} -> {env_new.get(k)!r}"
        for k in ("torch_version", "torch_git_version", "device_name")
        if env_old.get(k) != env_new.get(k)
    ]
    if changed_env:
        print("note: the environment differs from the certificate's: " + "; ".join(changed_env))
    if differing:
        print(f"{len(differing)} of {len(old_status)} cases differ from the certificate:")
        from harness.core.textsafe import visible

        for line in differing[:50]:  # ids from the certificate file: shown, never acted on
            print(f"  {visible(line, keep_newlines=False)}")
        if len(differing) > 50:
            print(f"  ... {len(differing) - 50} more")
        return 1
    print(
        f"verified: all {len(old_status)} case statuses match the certificate ({cert['verdict']})"
    )
    return 0
