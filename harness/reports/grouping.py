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

from harness.core.repro_scope import has_minimal_script
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
    #: Failures folded in because they follow from this group's (``join_dependents``), in
    #: words: ``the float32 leg``, ``jacrev``; the headline says they fail where it does.
    follows: tuple[str, ...] = ()

    @property
    def follows_text(self) -> str:
        """``the float32 leg and jacrev fail where vjp does`` ("" when nothing was folded)."""
        if not self.follows:
            return ""
        parts = list(self.follows)
        words = parts[0] if len(parts) == 1 else f"{', '.join(parts[:-1])} and {parts[-1]}"
        verb = "fails" if len(parts) == 1 and not parts[0].endswith("legs") else "fail"
        return f"{words} {verb} where {self.first.check} does"

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
        """The reproducer of one of them: the first whose case has a short script
        (``harness.core.repro_scope``), else the first that has one."""
        with_repro = [c for c in self.cases if c.repro]
        short = [c for c in with_repro if has_minimal_script(c.check, c.plan)]
        return (short or with_repro)[0].repro if with_repro else ""

    def ids(self, shown: int = 3) -> tuple[list[str], int]:
        """The first ``shown`` case ids and how many more there are."""
        ids = [c.id for c in self.cases]
        return ids[:shown], max(0, len(ids) - shown)


def group_cases(cases: Iterable[CaseResult]) -> list[Group]:
    """Groups in the order of their first case; consequences of a broken vmap rule joined
    to the ``contract`` failures that name it (see ``join_rule_consequences``), failures
    that follow from another check's joined to its group (``join_dependents``)."""
    buckets: dict[tuple[str, str, str], list[CaseResult]] = {}
    position: dict[int, int] = {}
    for n, c in enumerate(cases):
        position[id(c)] = n
        buckets.setdefault((c.entry, c.status, root_cause(c)), []).append(c)
    groups = [Group(e, s, k, tuple(cs)) for (e, s, k), cs in buckets.items()]
    return join_dependents(join_rule_consequences(groups, position), position)


#: Checks whose result follows from another's: the transform that builds them from it
#: (``jacrev`` is ``vjp`` against each output's basis, ``jacfwd`` is ``jvp`` along each
#: input's), so where both fail at one sample, the first is a consequence of the second.
DEPENDS_ON = {"jacrev": "vjp", "jacfwd": "jvp"}
#: A dtype leg's id: its sample's case id and ``/dtype=float32`` (harness.checks.dtype_leg).
_LEG = re.compile(r"/dtype=(\w+)$")


def _depends_on(case: CaseResult) -> tuple[str, str] | None:
    """(the id of the case this one follows from, how to name this one), or None.

    A dtype leg follows from its check at the sample's own dtype (a float32 failure of a
    check that fails at float64 too is that failure, seen again); ``jacrev`` and
    ``jacfwd`` follow from ``vjp`` and ``jvp`` at the same sample (``DEPENDS_ON``)."""
    leg = _LEG.search(case.id)
    if leg:
        return case.id[: leg.start()], f"the {leg.group(1)} leg of {case.check}"
    base = DEPENDS_ON.get(case.check)
    if base and case.id.startswith(f"{case.entry}/{case.check}/") and not case.plan:
        return f"{case.entry}/{base}/{case.id[len(case.entry) + len(case.check) + 2 :]}", case.check
    return None


def join_dependents(groups: list[Group], position: dict[int, int] | None = None) -> list[Group]:
    """Groups whose every case follows from a failing case of one other group (``_depends_on``)
    joined to it, which lists them in ``follows``. A group with a case that follows from
    nothing failing (jacrev failing where vjp passes) is a bug of its own and stays apart."""
    group_of_id = {c.id: g for g in groups for c in g.cases}
    home: dict[int, tuple[Group, str]] = {}
    for g in groups:
        if g.status not in _JOINABLE:
            continue
        found = [_depends_on(c) for c in g.cases]
        if not found or any(f is None for f in found):
            continue
        targets = {id(group_of_id[f[0]]) for f in found if f and f[0] in group_of_id}
        if len(targets) != 1 or any(f and f[0] not in group_of_id for f in found):
            continue
        target = group_of_id[next(f for f in found if f)[0]]
        if target is g or target.status not in _JOINABLE:
            continue
        names = list(dict.fromkeys(f[1] for f in found if f))
        home[id(g)] = (target, ", ".join(names))
    if not home:
        return groups

    def root(g: Group) -> Group:
        seen = {id(g)}
        while id(g) in home and id(home[id(g)][0]) not in seen:
            g = home[id(g)][0]
            seen.add(id(g))
        return g

    place = position or {id(c): n for n, c in enumerate(c for g in groups for c in g.cases)}
    parts: dict[int, list[Group]] = {}
    for g in groups:
        if id(g) in home:
            parts.setdefault(id(root(g)), []).append(g)
    out: list[Group] = []
    for g in groups:
        if id(g) in home:
            continue
        joined = parts.get(id(g))
        if not joined:
            out.append(g)
            continue
        rest = sorted((c for p in joined for c in p.cases), key=lambda c: place[id(c)])
        follows = [*g.follows]
        for p in joined:
            for word in (home[id(p)][1], *p.follows):
                if word not in follows:
                    follows.append(word)
        anchor_check = g.first.check
        words = tuple(w.replace(f" of {anchor_check}", "") for w in follows)
        out.append(Group(g.entry, g.status, g.key, (*g.cases, *rest), words))
    return out


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


#: A console headline's length: a message's first line is shown as its first parts (split at
#: "; ") that fit, never cut inside one; the full text stays in the reports.
HEADLINE_CHARS = 200
#: Past this a single part is cut (at a sentence end, else between words) all the same.
_PART_CHARS = 300
#: What a headline that left parts out ends with.
MORE_IN_REPORTS = "\u2026 (the rest in the reports)"


def _clip_sentence(text: str, limit: int) -> str:
    """``text`` cut after its last sentence (or clause) that ends within ``limit``, else
    between words: never inside a word."""
    if len(text) <= limit:
        return text
    for mark in (". ", ": ", ", "):
        end = text.rfind(mark, 0, limit)
        if end > limit // 3:
            return text[: end + 1].rstrip(",:") + " " + MORE_IN_REPORTS
    clipped = clip_words(text, limit)
    return clipped[:-2] + " " + MORE_IN_REPORTS if clipped.endswith(" \u2026") else clipped


def message_headline(text: str, limit: int = HEADLINE_CHARS) -> str:
    """The console's form of a message's first line: its parts (split at "; ") that fit in
    ``limit`` characters, each part once (a sub-check that says the same again is left
    out), ending with ``MORE_IN_REPORTS`` when a part that says more was left out."""
    parts: list[str] = []
    seen: set[str] = set()
    cut = False
    for part in text.strip().split("; "):
        if part.strip() in seen:
            continue
        seen.add(part.strip())
        if parts and len("; ".join([*parts, part])) > limit:
            cut = True
            break
        parts.append(part)
    line = "; ".join(parts)
    if len(line) > _PART_CHARS:
        return _clip_sentence(line, limit)
    return f"{line}; {MORE_IN_REPORTS}" if cut else line


def shown_groups(groups: list[Group], limit: int) -> tuple[list[Group], list[Group]]:
    """The groups a bounded list shows, and the ones it folds: every entry's first group
    (its first with a reproducer, where it has one) whatever ``limit`` says, then the
    others in order while fewer than ``limit`` are shown; both in the groups' order. A long
    list folds root causes of Functions it shows, never a Function."""
    first: dict[str, Group] = {}
    for g in groups:
        held = first.get(g.entry)
        if held is None or (not held.repro and g.repro):
            first[g.entry] = g
    chosen = {id(g) for g in first.values()}
    for g in groups:
        if len(chosen) >= limit:
            break
        chosen.add(id(g))
    return [g for g in groups if id(g) in chosen], [g for g in groups if id(g) not in chosen]


def folded_text(folded: list[Group]) -> str:
    """``3 more root causes (24 cases) of mylib:A and mylib:B, shown above``."""
    entries = list(dict.fromkeys(g.entry for g in folded))
    whose = (
        " and ".join(visible(e, keep_newlines=False) for e in entries)
        if len(entries) <= 2
        else f"{len(entries)} Functions"
    )
    cases = sum(g.count for g in folded)
    return (
        f"{plural(len(folded), 'more root cause')} ({plural(cases, 'case')}) of {whose}, "
        "shown above"
    )


def terminal_lines(
    groups: list[Group], *, limit: int, message_chars: int = 800, message_lines: int = 12
) -> list[str]:
    """The terminal's failure blocks: one per root cause, at most ``limit`` of them, but
    one at least for every entry (``shown_groups``: cases are folded, never an entry).

    A group of one case reads as the case itself; a larger one gives its count and checks,
    the headline of its first case's message (``message_headline``; the message's further
    lines, each clipped between words, at most ``message_lines`` and ``message_chars`` in
    all), the first few ids and the repro of the first.
    """
    lines: list[str] = []
    blocks, folded = shown_groups(groups, limit)
    for g in blocks:
        first = g.first
        if g.count == 1:
            lines.append(f"  {g.status.upper()} {visible(first.id, keep_newlines=False)}")
        else:
            cause = f"one root cause; {g.follows_text}" if g.follows else "one root cause"
            lines.append(
                f"  {g.status.upper()} {visible(headline(g), keep_newlines=False)} ({cause})"
            )
        head, *rest = first.message.splitlines() or [""]
        shown = [message_headline(head)]
        budget = message_chars - len(shown[0])
        for line in rest[: message_lines - 1]:
            line = clip_words(line, min(HEADLINE_CHARS, max(budget, 0)))
            if budget <= 0 or not line:
                break
            budget -= len(line)
            shown.append(line)
        # text from a Function: control characters shown, never sent to the terminal
        lines.extend(f"    {visible(line)}" for line in shown)
        if g.count > 1:
            lines.append(f"    cases: {visible(ids_text(g), keep_newlines=False)}")
        if g.repro:
            lines.append(f"    reproduce: {visible(g.repro, keep_newlines=False)}")
    if folded:
        lines.append(f"  ... {folded_text(folded)}; in the reports (--json, --markdown)")
    return lines
