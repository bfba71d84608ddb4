"""The ``reproduce:`` line of a recorded case: the case, its sub-check, one declaration.

After a recorded check, each non-conforming case's command is rewritten from the one the
runner made (which carries every ``--declare`` of the session):

* it names only the declaration of the case's own Function, if it has one;
* ``--sub-check 'input 1 alone, all outputs'`` when the case failed only some of its
  sub-checks (one input alone, one output alone, non-contiguous), so the script runs the
  call the case found failing, not the composite that passed;
* for a class made inside a function: ``--rebuild pkg.mod:make_fn --rebuild-args JSON``
  where ``harness.sources.rebuild`` can make the class again from its factory, else
  ``pytest --afdb -k TEST`` naming the test that reached it (the class exists only in a
  process that runs that test).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from harness.core.repro_scope import failing_sub_check
from harness.core.results import BAD_STATUSES, RunResult


def test_name(places: Sequence[str]) -> str:
    """The first pytest node id among ``places`` ('' if none)."""
    return next((p for p in places if "::" in p), "")


def _strip_declares(argv: list[str]) -> list[str]:
    out: list[str] = []
    skip = False
    for a in argv:
        if skip:
            skip = False
            continue
        if a == "--declare":
            skip = True
            continue
        out.append(a)
    return out


def recorded_repro(
    command: str,
    case: Any,
    declaration: str,
    *,
    rebuild: tuple[str, dict[str, Any]] | None = None,
    local_test: str | None = None,
) -> str:
    """``command`` (the runner's ``afdb repro ... --recorded DIR --declare ...``) with one
    declaration, the failing sub-check, and how to rebuild a local class."""
    if local_test is not None:
        if not local_test:
            return (
                f"# {case.id}: its class exists only in the recording process; rerun "
                "`pytest --afdb` and read this case there"
            )
        return f"pytest --afdb {shlex.quote(local_test)}  # then read case {case.id}"
    try:
        argv = shlex.split(command)
    except ValueError:
        return command
    if "--recorded" not in argv:
        return command
    argv = _strip_declares(argv)
    at = argv.index("--recorded") + 2
    extra: list[str] = []
    if declaration:
        extra += ["--declare", declaration]
    sub = failing_sub_check(case.message, case.check)
    if sub and "--sub-check" not in argv:  # the runner names it for the checks it covers
        extra += ["--sub-check", sub]
    if rebuild is not None:
        extra += ["--rebuild", rebuild[0], "--rebuild-args", json.dumps(rebuild[1])]
    argv[at:at] = extra
    return " ".join(shlex.quote(a) for a in argv)


def one_declaration_repros(
    result: RunResult,
    recorded: Sequence[Any],
    recording: Any = None,
    classes: Mapping[str, Any] | None = None,
) -> int:
    """Rewrite every non-conforming recorded case's ``repro`` (see the module docstring);
    returns how many."""
    from harness.sources.rebuild import factory_of

    by_target = {r.target: r for r in recorded}
    importable = {
        f.target: bool(f.importable) for f in (getattr(recording, "functions", None) or ())
    }
    rebuilds: dict[str, Any] = {}
    done = 0
    for case in result.cases:
        r = by_target.get(case.entry)
        if case.status not in BAD_STATUSES or not case.repro or r is None:
            continue
        decl = getattr(r.declaration, "text", "") if r.declaration is not None else ""
        if decl.startswith("*"):
            decl = ""  # the command line's own flags, for every Function (not a declaration)
        local: str | None = None
        rebuild = None
        if not importable.get(case.entry, True):
            if case.entry not in rebuilds:
                live = (classes or {}).get(case.entry)
                rebuilds[case.entry] = factory_of(live) if live is not None else None
            rebuild = rebuilds[case.entry]
            if rebuild is None:
                local = test_name(r.places)
        case.repro = recorded_repro(case.repro, case, decl, rebuild=rebuild, local_test=local)
        done += 1
    return done
