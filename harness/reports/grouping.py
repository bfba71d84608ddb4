"""Failures grouped by root cause, so a bug hit by 25 plans reads as one problem, not 25.

Two cases share a root cause when they belong to the same entry, have the same status,
and (timeouts: belong to the same check) their messages are the same once the plan (``in_dims=(0,1),B=4`` and the rule's
``in_dims=(0, 1)``), the case's own id and check name, and every number (sizes, shapes,
line numbers, errors) are taken out. The checks stay listed per group: one wrong
``out_dims`` shows in ``vmap`` and in ``vmap_nested`` alike, but their messages say
``Function under vmap`` in both, so they group only when the text agrees.

Every report writer (terminal, Markdown, HTML) uses ``group_cases``; the JUnit report
keeps one testcase per case, as CI histories follow case ids.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from harness.core.results import BAD_STATUSES, TIMEOUT, CaseResult, internal_first
from harness.core.textsafe import visible

#: Plan text inside a message: ``in_dims=(0, None)``, ``out_dims=-1``, ``B=4``, ``chunk=3``...
_PLAN_PARTS = re.compile(
    r"\b(in_dims|out_dims|tangents|cotangents|chunk|chunk_size|B|batch_size)="
    r"(\([^()]*\)|\[[^\[\]]*\]|[^\s,:;)|]+)"
)
_NUMBER = re.compile(r"(?<![A-Za-z_])[-+]?\d+(\.\d+)?([eE][-+]?\d+)?")
_SPACES = re.compile(r"\s+")


def root_cause(case: CaseResult) -> str:
    """The case's message with its plan, ids and numbers taken out.

    A timeout's cause is its check: the message says where the case happened to be
    stopped (the timer, the watchdog, a worker killed in some frame), not why it hangs,
    so the timeouts of one (entry, check) are one group.
    """
    if case.status == TIMEOUT:
        return f"timeout in {case.check}"
    text = case.message
    plan_id = str((case.plan or {}).get("id", ""))
    text = text.replace(case.id, "<case>")
    if plan_id:
        text = text.replace(f"{case.check} {plan_id}", "<case>").replace(plan_id, "<plan>")
    if text.startswith(case.check + " "):
        text = "<check>" + text[len(case.check) :]
    text = _PLAN_PARTS.sub(lambda m: f"{m.group(1)}=<plan>", text)
    text = _NUMBER.sub("#", text)
    return _SPACES.sub(" ", text).strip()


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
    """Groups in the order of their first case."""
    buckets: dict[tuple[str, str, str], list[CaseResult]] = {}
    for c in cases:
        buckets.setdefault((c.entry, c.status, root_cause(c)), []).append(c)
    return [Group(e, s, k, tuple(cs)) for (e, s, k), cs in buckets.items()]


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
    """``8 cases in vmap, vmap_nested`` (what the group is, before its message)."""
    return f"{plural(group.count, 'case')} in {', '.join(group.checks)}"


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
            lines.append(f"  {g.status.upper()} {headline(g)} (one root cause)")
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
