"""Which cases a running command runs, and when it stops: what ``afdb run`` and ``afdb check``
add to the entries they select.

* ``NumpyMul/vmap`` (a case id prefix, as an expectation's id): only the cases whose id is
  it or starts with it followed by ``/``; each prefix must match a case ("did you mean").
* ``--last-failed REPORT``: the non-conforming cases of a JSON report (``fail``, ``error``,
  ``timeout``, ``crash``, ``xpass``, ``internal``), run again under the report's own seed,
  dtype, batch sizes and source, so the ids are the same cases.
* ``--shard K/N``: one deterministic part of whatever the selection holds.
* ``-x`` / ``--maxfail N``: the run stops after N non-conforming cases (counted after the
  expectations, as the summary counts them); the report holds the cases done and says it
  stopped. In-process and with the fork engine the run stops at once; the xdist engine
  (``AFDB_WORKER_ENGINE=xdist``) hands its results back at the end, so there it runs all.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from harness.cli.common import CliError
from harness.core.dtype_names import DTYPE_NAMES
from harness.core.errors import RunStopped
from harness.core.results import BAD_STATUSES, CaseResult

if TYPE_CHECKING:
    from harness.core.options import Options

#: The run settings ``--last-failed`` takes from the report (a flag for any of them clashes).
REPORT_SETTINGS = (
    "--seed",
    "--dtype",
    "--batch-size",
    "--nested-batch-sizes",
    "--plan-cap",
    "--device",
    "--source",
    "--hazard-probe",
)


def add_selection_options(p: argparse.ArgumentParser, command: str) -> None:
    """``-x``, ``--maxfail N`` and ``--last-failed REPORT`` (``afdb run`` and ``afdb check``)."""
    p.add_argument(
        "-x",
        "--exitfirst",
        dest="maxfail",
        action="store_const",
        const=1,
        help="stop after the first non-conforming case (as --maxfail 1)",
    )
    p.add_argument(
        "--maxfail",
        type=int,
        metavar="N",
        help="stop after N non-conforming cases (after the expectations); the report holds "
        "the cases done and says the run stopped",
    )
    p.add_argument(
        "--last-failed",
        metavar="REPORT",
        help=f"rerun only the non-conforming cases of a JSON report (an earlier `afdb {command} "
        "--json REPORT`), with its seed, dtype and batch sizes",
    )


# --- --last-failed -------------------------------------------------------------------------


def _given(args: argparse.Namespace, flag: str) -> bool:
    argv = getattr(args, "argv", None) or []
    return any(a == flag or a.startswith(flag + "=") for a in argv)


def apply_last_failed(
    args: argparse.Namespace, *, user: bool, recorded: bool = False
) -> list[str] | None:
    """Read ``--last-failed REPORT`` into ``args``: the case ids to run (``args.case_ids``),
    the report's run settings, its checks; returns the entries those cases belong to (None
    without the flag). ``user``: the report of ``afdb check`` (its Function is the target
    given on the command line) rather than of a source; ``recorded``: of ``afdb check
    --recorded`` (its Functions come from the recording)."""
    path = getattr(args, "last_failed", None)
    if not path:
        return None
    from harness.cli.repro_settings import report_settings
    from harness.core.schema import read_report

    md = report_settings(path)  # the metadata a rerun uses, validated
    cases = read_report(path)["cases"]
    for flag in REPORT_SETTINGS:
        if _given(args, flag):
            raise CliError(
                f"--last-failed {path} reruns its cases with the report's own seed, dtype, batch "
                f"sizes and source; leave {flag} out (or run without --last-failed)"
            )
    source = md.get("source") or "afdb"
    wanted = "recorded" if recorded else ("user" if user else None)
    if (source != wanted) if wanted else source in ("user", "recorded"):
        where = {
            "user": "`afdb check TARGET --last-failed`",
            "recorded": "`afdb check --recorded DIR --last-failed`",
        }.get(source, "`afdb run`")
        raise CliError(f"--last-failed {path}: that report is of source {source!r}; use {where}")
    if not user:
        args.source = source
    bad = [c for c in cases if c.get("status") in BAD_STATUSES]
    args.case_ids = {c["id"] for c in bad}
    args.last_failed_count = len(bad)
    args.seed = md.get("seed", 0)
    dtype = md.get("dtype")
    args.dtype = dtype if dtype in DTYPE_NAMES else None
    args.device = md.get("device", "cpu")
    if md.get("batch_sizes"):
        args.batch_size = ",".join(map(str, md["batch_sizes"]))
    if md.get("nested_batch_sizes"):
        args.nested_batch_sizes = ",".join(map(str, md["nested_batch_sizes"]))
    if md.get("plan_cap"):
        args.plan_cap = md["plan_cap"]
    args.hazard_probe = bool(md.get("hazard_probe"))
    checks: list[str] = []  # in the report's order (the catalogue's)
    for c in bad:
        if c.get("check") != "samples" and c["check"] not in checks:
            checks.append(c["check"])
    if checks and not _given(args, "--checks"):
        args.checks = ",".join(checks)
    entries: list[str] = []
    for c in bad:
        if c["entry"] not in entries:
            entries.append(c["entry"])
    return entries


def last_failed_note(args: argparse.Namespace) -> str:
    n = getattr(args, "last_failed_count", 0)
    return (
        f"rerunning the {n} non-conforming case{'s' if n != 1 else ''} of {args.last_failed} "
        f"(seed {args.seed}, {args.dtype or 'the samples own dtypes'})"
    )


# --- the cases a run holds -----------------------------------------------------------------


def case_selection(
    entries: Sequence[Any], options: Options, args: argparse.Namespace, source: str
) -> tuple[set[str] | None, dict[str, Any] | None]:
    """The case ids to run (None: every case of the entries) and, for ``--shard``, what the
    report records about it."""
    prefixes: dict[str, list[str]] | None = getattr(args, "case_prefixes", None)
    wanted: set[str] | None = getattr(args, "case_ids", None)
    text = getattr(args, "shard", None)
    if not prefixes and wanted is None and not text:
        return None, None
    from harness.engine.parallel import enumerate_entries

    _, cases, early = enumerate_entries(entries, options)
    ids = [*early, *(c.id for c in cases)]
    if prefixes:
        ids = by_prefix(ids, prefixes)
    if wanted is not None:
        ids = [i for i in ids if i in wanted]
    if not text:
        return set(ids), None
    from harness.engine import shard

    spec = shard.Shard.parse(text)
    spec.check_count(len(ids))  # before anything is allocated per shard
    durations, baseline = shard.baseline_durations(getattr(args, "shard_durations", None), source)
    shard_of = shard.assign(ids, spec.count, durations)
    only = {i for i, s in zip(ids, shard_of) if s == spec.index - 1}
    note = {
        "index": spec.index,
        "count": spec.count,
        "balanced_by": f"durations in {baseline}" if baseline else "case counts",
        "total_cases": len(ids),
        # Each case's position in the whole run, so `afdb merge` restores the run's order.
        "positions": [n for n, s in enumerate(shard_of) if s == spec.index - 1],
        "fingerprint": shard.fingerprint(
            ids,
            shard_of,
            source=source,
            options=options.to_dict(),
            expectations=_expectations_text(getattr(args, "expectations", None)),
        ),
    }
    return only, note


def _expectations_text(path: str | None) -> str | None:
    if not path:
        return None
    from harness.core.safe_io import read_text

    return read_text(path, "--expectations")  # already read and validated: it is a file


def by_prefix(ids: list[str], prefixes: dict[str, list[str]]) -> list[str]:
    """The ids an entry's prefixes select (an entry without prefixes: all of its ids); a
    prefix that selects nothing is refused with the closest ids. An entry whose samples
    could not be built keeps its one ``samples`` record (its cases cannot be listed)."""
    from harness.sources import matches_prefix

    out: list[str] = []
    hit: set[str] = set()
    for i in ids:
        entry = i.split("/", 1)[0]
        mine = prefixes.get(entry)
        if mine is None or i == f"{entry}/samples":
            out.append(i)
            hit.update(p for p in mine or () if i == f"{entry}/samples")
            continue
        found = [p for p in mine if matches_prefix(i, p)]
        if found:
            out.append(i)
            hit.update(found)
    for entry, mine in prefixes.items():
        for p in mine:
            if p not in hit:
                theirs = [i for i in ids if i.startswith(entry + "/")]
                stems = sorted({"/".join(i.split("/")[: p.count("/") + 1]) for i in theirs})
                close = difflib.get_close_matches(p, stems, n=3, cutoff=0.5)
                hint = f"; did you mean {' or '.join(close)}?" if close else ""
                raise CliError(
                    f"{p!r} matches no case of {entry}{hint} (a case id reads "
                    "ENTRY/CHECK/SAMPLE/PLAN, as in a report)"
                )
    return out


# --- -x / --maxfail ------------------------------------------------------------------------


class MaxFail:
    """Raises ``RunStopped`` once ``limit`` cases do not conform (after the expectations)."""

    def __init__(self, limit: int, expectations: Any = None) -> None:
        self.limit = limit
        self.expectations = expectations
        self.seen = 0

    def __call__(self, r: CaseResult) -> None:
        status = r.status
        if self.expectations is not None:
            from harness.expectations import apply

            status = apply(self.expectations, dataclasses.replace(r)).status
        if status in BAD_STATUSES:
            self.seen += 1
            if self.seen >= self.limit:
                flag = "-x" if self.limit == 1 else f"--maxfail {self.limit}"
                raise RunStopped(
                    f"stopped after {self.seen} non-conforming case{'s' if self.seen > 1 else ''}"
                    f" ({flag}); the cases after it did not run"
                )


def max_fail(args: argparse.Namespace, expectations: Any) -> MaxFail | None:
    limit = getattr(args, "maxfail", None)
    if limit is None:
        return None
    if limit < 1:
        raise CliError("--maxfail must be >= 1")
    return MaxFail(limit, expectations)
