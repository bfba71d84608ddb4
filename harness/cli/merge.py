"""``afdb merge A.json B.json ... -o ALL.json``: put the reports of ``afdb run --shard`` together.

Each input is validated as a report; inputs that overlap (a case id in two of
them) or that ran under different conditions (torch, device, dtype, seed,
source) are refused with one line and exit 2, since their union would not be
one run. The merged report lists the cases in the order of the whole run (each
shard report records its cases' positions) and records its shards in
``metadata.shards``.
"""

from __future__ import annotations

import argparse
from typing import Any

from harness.cli.common import CliError
from harness.core.locations import portable_path
from harness.core.results import CaseResult, RunResult

#: Metadata that must agree for shard reports to be one run.
SAME_RUN = ("torch_version", "torch_git_version", "device", "dtype", "seed", "source")


def add_parsers(sub: Any) -> None:
    p = sub.add_parser(
        "merge",
        help="merge the JSON reports of `afdb run --shard K/N` into one report",
        description="Validate each shard report, refuse overlapping case ids or different "
        "torch/device/dtype/seed/source metadata (one line, exit 2), and write one report. "
        "Exit status: 0 when the merged run conforms, 1 when it does not, 2 bad input.",
    )
    p.add_argument("reports", nargs="+", metavar="REPORT.json")
    p.add_argument("-o", "--output", "--json", dest="json", required=True, help="merged JSON")
    p.add_argument("--markdown", help="also write the merged Markdown report here")
    p.add_argument("--html", help="also write the merged HTML report here")
    p.add_argument("--junit", help="also write merged JUnit XML here")
    p.add_argument("-q", "--quiet", action="store_true", help="print only the summary line")
    p.set_defaults(func=cmd_merge)


def merge(reports: list[tuple[str, dict[str, Any]]]) -> RunResult:
    """One run from validated shard reports ``(path, data)``; CliError names what conflicts."""
    first_path, first = reports[0]
    base = first["metadata"]
    owner: dict[str, str] = {}
    # (report has positions? 0 : 1, position in the whole run or report number, index, case)
    placed: list[tuple[int, int, int, dict[str, Any]]] = []
    shards: list[dict[str, Any]] = []
    for n, (path, data) in enumerate(reports):
        md = data["metadata"]
        for key in SAME_RUN:
            if md.get(key) != base.get(key):
                raise CliError(
                    f"{path}: {key} is {md.get(key)!r} but {first_path} has {base.get(key)!r}; "
                    "shards of one run share torch, device, dtype, seed and source"
                )
        shard = md.get("shard") if isinstance(md.get("shard"), dict) else None
        positions = shard.get("positions") if shard else None
        if not isinstance(positions, list) or len(positions) != len(data["cases"]):
            positions = None
        for i, c in enumerate(data["cases"]):
            if c["id"] in owner:
                raise CliError(
                    f"{path}: case {c['id']!r} is also in {owner[c['id']]}; shards must not "
                    "overlap (were they run with the same --shard K/N?)"
                )
            owner[c["id"]] = path
            if positions is not None:
                placed.append((0, int(positions[i]), i, c))
            else:  # not a shard report: its cases after the shards', in the order given
                placed.append((1, n, i, c))
        shards.append(
            {
                "report": portable_path(path),
                "shard": f"{shard['index']}/{shard['count']}" if shard else None,
                "cases": len(data["cases"]),
                "wall_s": md.get("wall_s"),
                "interrupted": bool(md.get("interrupted")),
            }
        )
    placed.sort(key=lambda t: (t[0], t[1], t[2]))
    cases = [CaseResult.from_dict(t[3]) for t in placed]
    metadata = {k: v for k, v in base.items() if k != "shard"}
    metadata["shards"] = shards
    metadata["interrupted"] = any(s["interrupted"] for s in shards)
    starts = [r[1]["metadata"].get("started") for r in reports]
    ends = [r[1]["metadata"].get("finished") for r in reports]
    if all(isinstance(s, str) for s in starts) and all(isinstance(e, str) for e in ends):
        metadata["started"], metadata["finished"] = min(starts), max(ends)
    walls = [s["wall_s"] for s in shards if isinstance(s["wall_s"], (int, float))]
    if walls:
        metadata["wall_s"] = max(walls)  # the shards ran side by side
    return RunResult(cases, metadata)


def cmd_merge(args: argparse.Namespace) -> int:
    from harness.cli.common import check_output_paths, write_reports
    from harness.cli.run import print_summary
    from harness.core.schema import read_report

    check_output_paths(args)
    reports = [(path, read_report(path)) for path in args.reports]
    result = merge(reports)
    write_reports(result, args)
    if args.quiet:
        print(f"{result.verdict}: {result.summary_line()}")
    else:
        print(f"merged {len(reports)} reports into {args.json}")
        print_summary(result)
    return 0 if result.ok and not result.metadata["interrupted"] else 1
