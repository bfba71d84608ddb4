"""Failures grouped by root cause, so a bug hit by 25 plans and 8 checks reads as one problem.

Two cases share a root cause when they belong to the same entry, have the same status,
and their messages are the same once the plan (``in_dims=(0,1),B=4`` and the rule's
``in_dims=(0, 1)``), the case's own id and check name, and every number or run of numbers
(sizes, shapes, line numbers) are taken out. An exception the Function raised is its own
cause whichever check or sub-check met it: the key is what was raised and where (the text
after ``the Function raised``), so a vmap rule that raises for one layout of its inputs is
one group over ``vmap``, ``vmap_nested``, ``contract``, ``grad_of_vmap``... Other messages
group across checks only when their text agrees: one wrong ``out_dims`` says ``Function
under vmap`` in ``vmap`` and in ``vmap_nested`` alike. The rule lines that built the
operands of a numpy broadcast error (``harness.core.shape_origin``) are taken out too:
which of the rule's locals match numpy's shapes differs from plan to plan, and the message
keeps them.
A timeout's cause is its check (``timeout in CHECK``): the frame a timer or a watchdog
happened to stop it in says nothing about why it hangs, so the timeouts of one (entry,
check) are one group.

Every report writer (terminal, Markdown, HTML, ``assert_conforms``, ``afdb diff``) uses
these groups; the JUnit report keeps one testcase per case, as CI histories follow case ids.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from harness.core.results import BAD_STATUSES, TIMEOUT, CaseResult, internal_first
from harness.core.shape_origin import without_rule_lines
from harness.core.textsafe import visible

#: Plan text inside a message: ``in_dims=(0, None)``, ``out_dims=-1``, ``B=4``, ``chunk=3``...
_PLAN_PARTS = re.compile(
    r"\b(in_dims|out_dims|tangents|cotangents|chunk|chunk_size|B|batch_size)="
    r"(\([^()]*\)|\[[^\[\]]*\]|[^\s,:;)|]+)"
)
_NUMBER = re.compile(r"(?<![A-Za-z_])[-+]?\d+(\.\d+)?([eE][-+]?\d+)?")
#: Numbers left after ``_NUMBER`` with what joins them in a shape or a list: ``(#, #, #)``.
_NUMBER_RUN = re.compile(r"[(\[]*#(?:[\s,x*()\[\]\->]*#)*[)\]]*")
_SPACES = re.compile(r"\s+")
#: Where the message of an exception the Function raised begins (see harness.engine.blame).
RAISED = "the Function raised "


def cause_text(message: str, *, case_id: str = "", check: str = "", plan_id: str = "") -> str:
    """``message`` with its check, plan, ids and numbers taken out (see the module docstring)."""
    text = without_rule_lines(message)
    if case_id:
        text = text.replace(case_id, "<case>")
    if plan_id:
        text = text.replace(f"{check} {plan_id}", "<case>").replace(plan_id, "<plan>")
    at = text.find(RAISED)
    if at >= 0 and not text.startswith("expected failure ("):
        text = text[at:]  # what was raised and where, not the (sub-)check that met it
    elif check and text.startswith(check + " "):
        text = "<check>" + text[len(check) :]
    text = _PLAN_PARTS.sub(lambda m: f"{m.group(1)}=<plan>", text)
    text = _NUMBER_RUN.sub("#", _NUMBER.sub("#", text))
    return _SPACES.sub(" ", text).strip()


def root_cause(case: CaseResult) -> str:
    """The case's message with its plan, ids and numbers taken out.

    A timeout's cause is its check: the message says where the case happened to be
    stopped (the timer, the watchdog, a worker killed in some frame), not why it hangs,
    so the timeouts of one (entry, check) are one group.
    """
    if case.status == TIMEOUT:
        return f"timeout in {case.check}"
    plan_id = str((case.plan or {}).get("id", ""))
    return cause_text(case.message, case_id=case.id, check=case.check, plan_id=plan_id)


@dataclass(frozen=True)
class Group:
    """Cases of one entry with one status and one root cause, in report order."""

    entry: str
    status: str
    key: str
    cases: tuple[CaseResult, ...]

    @property
    def first(self) -> CaseResult:
        return self.cases[0]

    @property
    def count(self) -> int:
        return len(self.cases)

    @property
    def checks(self) -> list[str]:
        out: list[str] = []
        for c in self.cases:
            if c.check not in out:
                out.append(c.check)
        return out

    @property
    def repro(self) -> str:
        """The reproducer of one of them (the first that has one)."""
        return next((c.repro for c in self.cases if c.repro), "")

    def ids(self, shown: int = 3) -> tuple[list[str], int]:
        """The first ``shown`` case ids and how many more there are."""
        ids = [c.id for c in self.cases]
        return ids[:shown], max(0, len(ids) - shown)


def group_cases(cases: Iterable[CaseResult]) -> list[Group]:
    """Groups in the order of their first case; consequences of a broken vmap rule joined
    to the ``contract`` failures that name it (see ``join_rule_consequences``)."""
    buckets: dict[tuple[str, str, str], list[CaseResult]] = {}
    position: dict[int, int] = {}
    for n, c in enumerate(cases):
        position[id(c)] = n
        buckets.setdefault((c.entry, c.status, root_cause(c)), []).append(c)
    groups = [Group(e, s, k, tuple(cs)) for (e, s, k), cs in buckets.items()]
    return join_rule_consequences(groups, position)


#: The check that tests a vmap rule's own outputs (harness.checks.contract): its failure at
#: a plan names the rule, which every other vmap check at that plan runs through.
CONTRACT = "contract"
#: Statuses whose groups may join a contract group (never the suite's own ``internal``).
_JOINABLE = frozenset({"fail", "error"})


def _plan_key(case: CaseResult) -> tuple[str, str] | None:
    """The sample and the in_dims of every vmap level of the case's plan (not the batch
    sizes, chunks, tangents or cotangents), or None for a case without vmap."""
    levels = (case.plan or {}).get("levels") or []
    if not levels:
        return None
    dims = [level.get("in_dims") if isinstance(level, dict) else None for level in levels]
    return f"{case.entry}/{case.sample}", repr(dims)


#: A second-order failure that names the first-order case it follows from
#: (harness.checks.second_order): it joins that case's group.
_FOLLOWS = re.compile(r"follows from the first-order failure of (\S+) \(")


def join_rule_consequences(
    groups: list[Group], position: dict[int, int] | None = None
) -> list[Group]:
    """Groups that are consequences of another group's cause, joined to it.

    * Each failing group whose every case is at a plan where one ``contract`` group failed
      joins that group: the rule is wrong for those in_dims (the contract check says how),
      and ``vmap``, ``grad_of_vmap``, ... failing at the same plans are what that does to
      them. A group with a case at any other plan (a bug of its own) stays apart.
    * A group whose every case says it follows from the first-order failure of one case
      (``vjp_of_vjp`` after a wrong ``backward``) joins that case's group.

    A joined group keeps its anchor's status and message, sits where its earliest part
    was, and lists the anchor's cases first, then the others in report order
    (``position``: each case's place by ``id``; default: the order of ``groups``)."""
    home: dict[int, Group] = {}  # id(group) -> the group it joins
    anchors: list[tuple[Group, set[tuple[str, str]]]] = []
    for g in groups:
        found = {k for c in g.cases if c.check == CONTRACT for k in [_plan_key(c)] if k}
        if found and g.status in _JOINABLE:
            anchors.append((g, found))
    group_of_id = {c.id: g for g in groups for c in g.cases}
    for g in groups:
        if g.status not in _JOINABLE or any(g is a for a, _ in anchors):
            continue
        keys = [_plan_key(c) for c in g.cases]
        for a, anchor_keys in anchors:
            if a.entry == g.entry and all(k is not None and k in anchor_keys for k in keys):
                home[id(g)] = a
                break
        else:
            named = {m.group(1) if m else "" for m in map(_FOLLOWS.search, _messages(g))}
            target = group_of_id.get(named.pop()) if len(named) == 1 else None
            if target is not None and target is not g and target.status in _JOINABLE:
                home[id(g)] = target
    if not home:
        return groups

    def root(g: Group) -> Group:
        seen = {id(g)}
        while id(g) in home and id(home[id(g)]) not in seen:
            g = home[id(g)]
            seen.add(id(g))
        return g

    place = position or {id(c): n for n, c in enumerate(c for g in groups for c in g.cases)}
    parts: dict[int, list[Group]] = {}
    for g in groups:
        if id(g) in home:
            parts.setdefault(id(root(g)), []).append(g)
    out: list[Group] = []
    placed: set[int] = set()
    for g in groups:
        anchor = root(g)
        if id(anchor) in placed:
            continue
        placed.add(id(anchor))
        joined = parts.get(id(anchor))
        if not joined:
            out.append(anchor)
            continue
        rest = sorted((c for p in joined for c in p.cases), key=lambda c: place[id(c)])
        out.append(Group(anchor.entry, anchor.status, anchor.key, (*anchor.cases, *rest)))
    return out


def _messages(group: Group) -> list[str]:
    return [c.message for c in group.cases]


def failure_groups(cases: Iterable[CaseResult]) -> list[Group]:
    """Root-cause groups of the cases that make a run non-conforming (the suite's own
    internal errors first)."""
    return group_cases(internal_first([c for c in cases if c.status in BAD_STATUSES]))


def ids_text(group: Group, shown: int = 3, quote: str = "") -> str:
    """``a, b, c and 5 more`` (each id wrapped in ``quote``)."""
    ids, more = group.ids(shown)
    text = ", ".join(f"{quote}{i}{quote}" for i in ids)
    return text + (f" and {more} more" if more else "")


def plural(n: int, word: str) -> str:
    """``1 case``, ``2 cases``; ``1 root cause``, ``3 root causes``."""
    return f"{n} {word}" + ("" if n == 1 else "s")


def headline(group: Group) -> str:
    """``8 cases in vmap, vmap_nested`` (what the group is, before its message);
    ``25 cases (17 fail, 8 error) in contract, vmap`` when its statuses are mixed."""
    statuses = Counter(c.status for c in group.cases)
    mix = ""
    if len(statuses) > 1:
        mix = " (" + ", ".join(f"{n} {s}" for s, n in statuses.items()) + ")"
    return f"{plural(group.count, 'case')}{mix} in {', '.join(group.checks)}"


def clip_words(text: str, limit: int) -> str:
    """``text`` cut to about ``limit`` characters at a word boundary (never mid-word)."""
    if len(text) <= limit:
        return text
    space = text.rfind(" ", 0, limit + 1)
    if space <= 0:
        return text  # one long word: whole, rather than cut inside it
    return text[:space].rstrip(" ,;:") + " \u2026"


def terminal_lines(
    groups: list[Group], *, limit: int, message_chars: int = 800, message_lines: int = 12
) -> list[str]:
    """The terminal's failure blocks: one per root cause, at most ``limit`` of them.

    A group of one case reads as the case itself; a larger one gives its count and checks,
    the message of its first case, the first few ids and the repro of the first.
    """
    lines: list[str] = []
    for g in groups[:limit]:
        first = g.first
        if g.count == 1:
            lines.append(f"  {g.status.upper()} {visible(first.id, keep_newlines=False)}")
        else:
            lines.append(
                f"  {g.status.upper()} {visible(headline(g), keep_newlines=False)} (one root cause)"
            )
        message = first.message
        if len(message) > message_chars:
            message = message[:message_chars] + " ..."
        # text from a Function: control characters shown, never sent to the terminal
        lines.extend(f"    {visible(line)}" for line in message.splitlines()[:message_lines])
        if g.count > 1:
            lines.append(f"    cases: {visible(ids_text(g), keep_newlines=False)}")
        if g.repro:
            lines.append(f"    reproduce: {visible(g.repro, keep_newlines=False)}")
    if len(groups) > limit:
        more = groups[limit:]
        cases = sum(g.count for g in more)
        lines.append(
            f"  ... {plural(len(more), 'more root cause')} ({plural(cases, 'case')}) in the "
            "reports (--json, --markdown)"
        )
    return lines
