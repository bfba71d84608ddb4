"""``afdb merge S1.json ... SN.json -o ALL.json``: the shard reports of one run, put together.

A merge is of one whole run. Each input is validated as a report and must be a shard
report (``metadata.shard``, written by ``afdb run --shard K/N``). Refused with one line
and exit 2: reports that overlap (a case id in two of them), that ran under different
conditions (torch, device, dtype, seed, source), or whose fingerprints differ (the run's
case ids, options, expectations file or split: see ``harness.engine.shard.fingerprint``),
and a merge that lacks a shard or whose cases do not add up to the run's recorded total
(an interrupted shard). ``--partial`` merges what is there; the merged report then
records what is missing in ``metadata.partial`` and its verdict is ``PARTIAL`` in every
format. The merged report lists the cases in the order of the whole run and records its
shards in ``metadata.shards``.
"""

from __future__ import annotations

import argparse
from typing import Any

from harness.core.errors import CliError
from harness.core.locations import portable_path
from harness.core.results import CaseResult, RunResult

#: Metadata that must agree for shard reports to be one run.
SAME_RUN = ("torch_version", "torch_git_version", "device", "dtype", "seed", "source")


def add_parsers(sub: Any) -> None:
    p = sub.add_parser(
        "merge",
        help="merge the JSON reports of `afdb run --shard K/N` into one report",
        description="Validate each shard report; refuse overlapping case ids, shards of "
        "different runs, a missing shard or cases that do not add up to the run's total "
        "(one line, exit 2); write one report. Exit status: 0 when the merged run conforms, "
        "1 when it does not (or is partial or interrupted), 2 bad input, 5 when no case of "
        "it was checked (all unsupported or skipped).",
    )
    p.add_argument("reports", nargs="+", metavar="REPORT.json")
    p.add_argument("-o", "--output", "--json", dest="json", required=True, help="merged JSON")
    p.add_argument("--markdown", help="also write the merged Markdown report here")
    p.add_argument("--html", help="also write the merged HTML report here")
    p.add_argument("--junit", help="also write merged JUnit XML here")
    p.add_argument(
        "--partial",
        action="store_true",
        help="merge even when shards or cases are missing; the verdict is then PARTIAL",
    )
    p.add_argument("-q", "--quiet", action="store_true", help="print only the summary line")
    p.set_defaults(func=cmd_merge)


def _same_run(reports: list[tuple[str, dict[str, Any]]]) -> None:
    """Refuse reports that are not shards of one run (CliError naming the file and field)."""
    from harness.engine.shard import FINGERPRINT_PARTS

    first_path, first = reports[0]
    base = first["metadata"]
    for path, data in reports:
        md = data["metadata"]
        shard = md.get("shard")
        if shard is None:
            raise CliError(
                f"{path}: not a shard report (no metadata.shard); afdb merge puts together "
                "the reports of `afdb run --shard K/N`"
            )
        if "fingerprint" not in shard:
            raise CliError(
                f"{path}: metadata.shard has no fingerprint (written by an older afdb); run "
                "the shards again with this afdb"
            )
        for key in SAME_RUN:
            if md.get(key) != base.get(key):
                raise CliError(
                    f"{path}: {key} is {md.get(key)!r} but {first_path} has {base.get(key)!r}; "
                    "shards of one run share torch, device, dtype, seed and source"
                )
        ours, theirs = shard, base["shard"]
        if ours["count"] != theirs["count"]:
            raise CliError(
                f"{path}: shard {ours['index']}/{ours['count']} but {first_path} is shard "
                f"{theirs['index']}/{theirs['count']}; the shards of one run share N"
            )
        for part, what in FINGERPRINT_PARTS.items():
            if ours["fingerprint"][part] != theirs["fingerprint"][part]:
                raise CliError(
                    f"{path}: another run than {first_path}: its {what} differ "
                    f"(metadata.shard.fingerprint.{part}); merge the shards of one run"
                )
        if ours["fingerprint"]["run"] != theirs["fingerprint"]["run"]:
            raise CliError(
                f"{path}: another run than {first_path} (metadata.shard.fingerprint.run "
                "differs); merge the shards of one run"
            )


def _missing(reports: list[tuple[str, dict[str, Any]]]) -> dict[str, Any] | None:
    """What the shards lack of their run (None: nothing); CliError for shards given twice."""
    count = reports[0][1]["metadata"]["shard"]["count"]
    total = reports[0][1]["metadata"]["shard"]["total_cases"]
    seen: dict[int, str] = {}
    interrupted = []
    for path, data in reports:
        shard = data["metadata"]["shard"]
        if shard["index"] in seen:
            raise CliError(
                f"{path}: shard {shard['index']}/{count} is also {seen[shard['index']]}; give "
                "each shard's report once"
            )
        seen[shard["index"]] = path
        if data["metadata"].get("interrupted"):
            interrupted.append(f"{shard['index']}/{count}")
    held = sum(len(data["cases"]) for _, data in reports)
    missing_shards = [f"{k}/{count}" for k in range(1, count + 1) if k not in seen]
    if not missing_shards and held == total:
        return None
    return {
        "missing_shards": missing_shards,
        "missing_cases": total - held,
        "total_cases": total,
        "interrupted_shards": interrupted,
    }


def describe_missing(partial: dict[str, Any]) -> str:
    """``shard 3/3 missing; 12 of the run's 40 cases missing`` (for messages and reports)."""
    parts = []
    shards = partial["missing_shards"]
    if shards:
        parts.append(f"shard{'s' if len(shards) > 1 else ''} {', '.join(shards)} missing")
    if partial.get("interrupted_shards"):
        parts.append(f"shard {', '.join(partial['interrupted_shards'])} interrupted")
    parts.append(f"{partial['missing_cases']} of the run's {partial['total_cases']} cases missing")
    return "; ".join(parts)


def merge(reports: list[tuple[str, dict[str, Any]]], *, partial: bool = False) -> RunResult:
    """One run from validated shard reports ``(path, data)``; CliError names what conflicts."""
    _same_run(reports)
    base = reports[0][1]["metadata"]
    total = base["shard"]["total_cases"]
    owner: dict[str, str] = {}
    at: dict[int, str] = {}
    placed: list[tuple[int, dict[str, Any]]] = []
    shards: list[dict[str, Any]] = []
    for path, data in reports:
        md = data["metadata"]
        shard = md["shard"]
        positions = shard["positions"]
        if len(positions) != len(data["cases"]):
            raise CliError(
                f"{path}: metadata.shard.positions has {len(positions)} places for "
                f"{len(data['cases'])} cases; not a report afdb wrote"
            )
        for i, c in enumerate(data["cases"]):
            if c["id"] in owner:
                raise CliError(
                    f"{path}: case {c['id']!r} is also in {owner[c['id']]}; shards must not "
                    "overlap (were they run with the same --shard K/N?)"
                )
            owner[c["id"]] = path
            position = positions[i]
            if position >= total or position in at:
                raise CliError(
                    f"{path}: metadata.shard.positions[{i}]: {position} is "
                    + ("past the run's total" if position >= total else f"also {at[position]}'s")
                    + "; not a report afdb wrote"
                )
            at[position] = path
            placed.append((position, c))
        shards.append(
            {
                "report": portable_path(path),
                "shard": f"{shard['index']}/{shard['count']}" if shard else None,
                "cases": len(data["cases"]),
                "wall_s": md.get("wall_s"),
                "interrupted": bool(md.get("interrupted")),
            }
        )
    lacking = _missing(reports)
    if lacking is not None and not partial:
        raise CliError(
            f"the merge is not the whole run: {describe_missing(lacking)}; give every shard's "
            "report, or --partial to merge what is there (verdict PARTIAL)"
        )
    placed.sort(key=lambda t: t[0])
    cases = [CaseResult.from_dict(c) for _, c in placed]
    metadata = {k: v for k, v in base.items() if k != "shard"}
    metadata["shards"] = sorted(shards, key=lambda s: int(s["shard"].split("/")[0]))
    metadata["interrupted"] = any(s["interrupted"] for s in shards)
    if lacking is not None:
        metadata["partial"] = {**lacking, "note": describe_missing(lacking)}
    starts = [r[1]["metadata"]["started"] for r in reports]
    ends = [r[1]["metadata"]["finished"] for r in reports]
    metadata["started"], metadata["finished"] = min(starts), max(ends)
    walls = [s["wall_s"] for s in shards if isinstance(s["wall_s"], (int, float))]
    if walls:
        metadata["wall_s"] = max(walls)  # the shards ran side by side
    return RunResult(cases, metadata)


def cmd_merge(args: argparse.Namespace) -> int:
    from harness.core.results import NOTHING_CHECKED_EXIT
    from harness.core.schema import read_report
    from harness.session.outputs import check_output_paths, report_write_failures, write_reports
    from harness.session.progress import print_summary

    check_output_paths(args)
    reports = [(path, read_report(path)) for path in args.reports]
    result = merge(reports, partial=args.partial)
    failed = write_reports(result, args)
    partial = result.metadata.get("partial")
    if args.quiet:
        print(f"{result.verdict}: {result.summary_line()}")
    else:
        print(f"merged {len(reports)} reports ({len(result.cases)} cases)")
        if partial:
            print(f"partial: {partial['note']}")
        print_summary(result)
        if args.written:
            print(f"wrote {', '.join(args.written)}")
    if failed:
        report_write_failures(args, failed)
        return 2  # the summary was printed; a report the user asked for is missing
    if result.ok and not result.metadata["interrupted"] and not partial:
        return NOTHING_CHECKED_EXIT if result.nothing_checked else 0
    if not args.quiet and not partial:
        print(
            "next: the `reproduce:` command of a root cause above writes a script for one of "
            f"its cases; `afdb run --last-failed {args.paths_as_given.get(args.json, args.json)}` "
            "reruns only them"
        )
    return 1
