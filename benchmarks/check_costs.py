"""What each check costs: cases, CPU seconds and milliseconds per case, per source.

    python -m benchmarks.check_costs [--source afdb,pytorch] [--markdown] [--json FILE]

Runs each source's cases in this process (as ``afdb run`` does, with the committed
expectations' skips left out) and charges every case's CPU time (``time.process_time``
around ``run_case``: the check, its references and the per-case isolation) to its check.
torch's first uses (sympy, the JIT jvp decompositions) are taken before the run
(``harness.engine.warmup``), so they count for no check; sample drawing and case
enumeration count for none either (they are the "enumeration" row). The table shows
where a new check's cost lands and which check grows when coverage grows.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any


def costs(source: str) -> dict[str, Any]:
    import harness.engine.runner as runner
    from harness.core.options import Options
    from harness.engine import warmup
    from harness.sources.database import load_source
    from harness.sources.batch_sizes import options_for_source

    entries = list(load_source(source))
    options = options_for_source(source, entries, Options())
    from harness.checks.catalogue import check_names

    warmup.warm(warmup.needs(check_names()))
    per: dict[str, list[float]] = {}
    real = runner.run_case

    def timed(data: Any, case: Any, **kw: Any) -> Any:
        start = time.process_time()
        try:
            return real(data, case, **kw)
        finally:
            per.setdefault(case.check, []).append(time.process_time() - start)

    runner.run_case = timed  # type: ignore[assignment]
    try:
        start = time.process_time()
        results = runner.run_entries(entries, options)
        total = time.process_time() - start
    finally:
        runner.run_case = real  # type: ignore[assignment]
    in_cases = sum(sum(v) for v in per.values())
    rows = {
        check: {"cases": len(v), "cpu_s": sum(v), "ms_per_case": 1000 * sum(v) / len(v)}
        for check, v in per.items()
    }
    return {
        "source": source,
        "cases": len(results),
        "cpu_s": total,
        "enumeration_cpu_s": total - in_cases,
        "checks": rows,
    }


def markdown(result: dict[str, Any]) -> str:
    lines = [
        f"`{result['source']}`: {result['cases']} cases, {result['cpu_s']:.1f} s CPU",
        "",
        "| check | cases | CPU s | ms/case | share |",
        "|---|---:|---:|---:|---:|",
    ]
    whole = result["cpu_s"] or 1.0
    for check, row in sorted(result["checks"].items(), key=lambda kv: -kv[1]["cpu_s"]):
        lines.append(
            f"| {check} | {row['cases']} | {row['cpu_s']:.2f} | {row['ms_per_case']:.2f} | "
            f"{100 * row['cpu_s'] / whole:.1f} % |"
        )
    enum = result["enumeration_cpu_s"]
    lines.append(f"| (enumeration, samples) | | {enum:.2f} | | {100 * enum / whole:.1f} % |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--source", default="afdb,pytorch", help="comma-separated sources")
    p.add_argument("--markdown", action="store_true", help="print Markdown tables")
    p.add_argument("--json", help="write the figures here")
    args = p.parse_args()
    loads = ", ".join(f"{v:.1f}" for v in os.getloadavg())
    print(f"load average before: {loads}")
    results = [costs(s) for s in args.source.split(",")]
    for r in results:
        if args.markdown:
            print("\n" + markdown(r))
        else:
            print(json.dumps(r, indent=2))
    print(f"\nload average after: {', '.join(f'{v:.1f}' for v in os.getloadavg())}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
