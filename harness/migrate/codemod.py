"""The rewrite of a legacy Function on libcst's concrete syntax tree.

``forward(ctx, *args)`` becomes ``forward(*args)``; what ``forward`` did to ``ctx`` (save,
mark, set attributes) moves, statement for statement and in its order, into a new
``@staticmethod setup_context(ctx, inputs, output)`` that reads the inputs and the outputs
by their names in ``forward``. A value ``ctx`` keeps that is neither an input nor an output
(an intermediate) is recomputed there from what it was computed from when that is exact and
cheap (views, shapes, comparisons, elementwise arithmetic); otherwise the class is refused
with one line. Only the class's ``forward`` and the new method change: every other byte of
the file (comments, formatting, other code) is kept.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from harness.migrate.names import names_of, root_name
from harness.migrate.statements import (
    PASSES,
    Returns,
    is_ctx_small,
    is_ctx_statement,
    mentions,
    passes,
    recomputable,
)


class Refused(Exception):
    """The class cannot be migrated automatically; the message is the one line saying why."""


@dataclass(frozen=True)
class FunctionClass:
    """A class in the file that defines ``forward`` as a staticmethod (a Function candidate)."""

    name: str
    line: int
    legacy: bool  # forward(ctx, ...) and no setup_context of its own
    has_vmap: bool  # a vmap staticmethod or generate_vmap_rule already


@dataclass(frozen=True)
class Migration:
    """One class rewritten: what the verification and the torch.func checks need to know."""

    name: str
    line: int
    #: Positions of inputs given to mark_dirty (modified in place), for the torch.func checks.
    inplace_args: tuple[int, ...] = ()
    #: Output positions given to mark_non_differentiable.
    nondiff_outputs: tuple[int, ...] = ()
    #: Intermediates recomputed in setup_context (name, line in the original).
    recomputed: tuple[tuple[str, int], ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)


def parse(source: bytes | str, label: str) -> cst.Module:
    """The file's concrete syntax tree; Refused (one line) when it does not parse."""
    try:
        return cst.parse_module(source)
    except cst.ParserSyntaxError as e:
        raise Refused(
            f"{label} does not parse as Python (line {e.raw_line}, column {e.raw_column}): "
            "fix the syntax first"
        ) from None


def _decorator_names(fn: cst.FunctionDef) -> set[str]:
    out = set()
    for d in fn.decorators:
        expr = d.decorator.func if isinstance(d.decorator, cst.Call) else d.decorator
        if isinstance(expr, cst.Name):
            out.add(expr.value)
        elif isinstance(expr, cst.Attribute):
            out.add(expr.attr.value)
    return out


def _methods(cls: cst.ClassDef) -> dict[str, cst.FunctionDef]:
    body = cls.body.body if isinstance(cls.body, cst.IndentedBlock) else ()
    return {s.name.value: s for s in body if isinstance(s, cst.FunctionDef)}


def _assigns(cls: cst.ClassDef, name: str) -> bool:
    body = cls.body.body if isinstance(cls.body, cst.IndentedBlock) else ()
    for s in body:
        if isinstance(s, cst.SimpleStatementLine):
            for small in s.body:
                if isinstance(small, cst.Assign) and any(
                    isinstance(t.target, cst.Name) and t.target.value == name for t in small.targets
                ):
                    return True
    return False


def function_classes(module: cst.Module) -> list[FunctionClass]:
    """The module's top-level classes that define a staticmethod ``forward``."""
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
    positions = wrapper.resolve(PositionProvider)
    out = []
    for stmt in module.body:
        if not isinstance(stmt, cst.ClassDef):
            continue
        methods = _methods(stmt)
        forward = methods.get("forward")
        kind = _decorator_names(forward) & {"staticmethod", "classmethod"} if forward else set()
        if forward is None or not kind:
            continue
        skip = 1 if "classmethod" in kind else 0  # forward(cls, ctx, ...)
        given = forward.params.params
        first = given[skip].name.value if len(given) > skip else ""
        legacy = "setup_context" not in methods and first in ("ctx", "self", "context", "_ctx")
        if "setup_context" not in methods and first and not legacy:
            legacy = first.lower().endswith("ctx")
        has_vmap = "vmap" in methods or _assigns(stmt, "generate_vmap_rule")
        out.append(FunctionClass(stmt.name.value, positions[stmt].start.line, legacy, has_vmap))
    return out


# --- the rewrite ----------------------------------------------------------------------------

_PARAM = -1  # a definition that is forward's parameter


@dataclass
class _Plan:
    ctx: str
    params: list[str]
    star: str | None
    body: Sequence[cst.BaseStatement]
    lines: list[int]
    defs_before: list[dict[str, int]]
    output_names: dict[tuple[str, int], int | None]  # (name, def) -> output index (None: whole)
    needed: set[int] = field(default_factory=set)  # statements recomputed
    bound: dict[int, list[tuple[str, int | None]]] = field(default_factory=dict)
    owner: str | None = None  # cls, for a classmethod forward


def _refuse(cls: str, line: int, what: str) -> Refused:
    return Refused(f"{cls} (line {line}): {what}")


def _forward_signature(
    cls: str, fn: cst.FunctionDef, line: int
) -> tuple[str, list[str], str | None, str | None]:
    """ctx's name, the inputs' names, the *args name, and cls's for a classmethod forward."""
    p = fn.params
    skip = 1 if "classmethod" in _decorator_names(fn) else 0
    if len(p.params) <= skip:
        raise _refuse(cls, line, "forward has no ctx parameter")
    if p.kwonly_params or isinstance(p.star_kwarg, cst.Param) or p.posonly_params:
        raise _refuse(
            cls, line, "forward takes keyword-only or **kwargs parameters, which apply() cannot "
            "pass; not handled, migrate it by hand (docs/migrating.md)"
        )  # fmt: skip
    ctx = p.params[skip].name.value
    star = p.star_arg.name.value if isinstance(p.star_arg, cst.Param) else None
    owner = p.params[0].name.value if skip else None
    return ctx, [q.name.value for q in p.params[skip + 1 :]], star, owner


def migrate_class(module: cst.Module, name: str) -> tuple[cst.Module, Migration]:
    """The module with class ``name`` migrated, and what changed; Refused with one line."""
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
    positions = wrapper.resolve(PositionProvider)
    cls_node = next(
        (s for s in module.body if isinstance(s, cst.ClassDef) and s.name.value == name), None
    )
    if cls_node is None:
        raise Refused(f"no top-level class {name} in the file")
    cls_line = positions[cls_node].start.line
    fn = _methods(cls_node).get("forward")
    if fn is None:
        raise _refuse(name, cls_line, "defines no forward")
    others = _decorator_names(fn) - {"staticmethod", "classmethod"}
    if others:
        raise _refuse(
            name, positions[fn].start.line, f"forward is decorated with @{sorted(others)[0]}, "
            "which may expect ctx as its first argument (torch.amp.custom_fwd does); not handled: "
            "migrate by hand (docs/migrating.md)"
        )  # fmt: skip
    ctx, params, star, owner = _forward_signature(name, fn, positions[fn].start.line)
    if not isinstance(fn.body, cst.IndentedBlock):
        raise _refuse(name, positions[fn].start.line, "forward on one line: not handled")
    body = list(fn.body.body)
    lines = [positions[s].start.line for s in body]
    plan = _analyse(name, ctx, params, star, body, lines, fn)
    plan.owner = owner
    new_forward, setup = _build(module, plan, fn)
    new_body: list[Any] = []
    for s in cls_node.body.body:  # type: ignore[union-attr]
        if s is fn:
            new_body += [new_forward, setup]
        else:
            new_body.append(s)
    new_cls = cls_node.with_changes(body=cls_node.body.with_changes(body=new_body))
    new_module = module.with_changes(body=[new_cls if s is cls_node else s for s in module.body])
    return new_module, _describe(name, cls_line, plan)


def _analyse(
    cls: str,
    ctx: str,
    params: list[str],
    star: str | None,
    body: list[cst.BaseStatement],
    lines: list[int],
    fn: cst.FunctionDef,
) -> _Plan:
    returns = Returns()
    fn.body.visit(returns)
    last = body[-1] if body else None
    final = (
        last.body[0]
        if isinstance(last, cst.SimpleStatementLine)
        and len(last.body) == 1
        and isinstance(last.body[0], cst.Return)
        else None
    )
    if final is None or len(returns.returns) != 1:
        where = lines[-1] if body else 0
        raise _refuse(
            cls, where, "forward must end in its only return statement (an early return inside "
            "a block is not handled); give forward a single final return, then migrate"
        )  # fmt: skip
    first = fn.params.params[0].name.value
    owner = [first] if first != ctx else []  # cls of a classmethod: the same in setup_context
    defs: dict[str, int] = {p: _PARAM for p in [*owner, *params, *([star] if star else [])]}
    defs_before: list[dict[str, int]] = []
    for i, stmt in enumerate(body):
        defs_before.append(dict(defs))
        if i == len(body) - 1 or is_ctx_statement(stmt, ctx):
            continue
        if mentions(stmt, ctx):
            if isinstance(stmt, cst.SimpleStatementLine) and any(
                is_ctx_small(s, ctx) for s in stmt.body
            ):
                what = "a line mixes ctx work with forward's own; put each on its own line"
            elif passes(stmt, ctx):
                what = PASSES
            elif isinstance(stmt, cst.SimpleStatementLine):
                what = "forward reads ctx in its own computation; compute the value without ctx"
            else:
                what = (
                    f"forward uses ctx inside a `{type(stmt).__name__.lower()}` block with other "
                    "work; move the ctx work out of it, to its own top-level statements"
                )
            raise _refuse(
                cls, lines[i], f"not handled: {what} (or migrate by hand, docs/migrating.md)"
            )
        for n in names_of(stmt).binds:
            defs[n] = i
    value = final.value
    if value is not None and mentions(value, ctx):
        what = PASSES if passes(value, ctx) else "forward reads ctx in what it returns"
        raise _refuse(
            cls, lines[-1], f"not handled: {what} (or migrate by hand, docs/migrating.md)"
        )
    outputs: dict[tuple[str, int], int | None] = {}
    at_return = defs_before[-1]
    if isinstance(value, cst.Name) and value.value in at_return:
        outputs[(value.value, at_return[value.value])] = None
    elif isinstance(value, (cst.Tuple, cst.List)):
        for k, el in enumerate(value.elements):
            if isinstance(el, cst.StarredElement):
                break
            v = el.value
            if isinstance(v, cst.Name) and v.value in at_return:
                outputs.setdefault((v.value, at_return[v.value]), k)
    plan = _Plan(ctx, params, star, body, lines, defs_before, outputs)
    for i, stmt in enumerate(body[:-1]):
        if is_ctx_statement(stmt, ctx):
            for n in sorted(names_of(stmt).reads - {ctx}):
                _need(cls, plan, n, defs_before[i].get(n), i)
    return plan


def _need(cls: str, plan: _Plan, name: str, d: int | None, at: int) -> None:
    """Make ``name`` (as defined by ``d``) available in setup_context at statement ``at``."""
    if d is None or d == _PARAM:
        return  # a global, a builtin, or an input
    if (name, d) in plan.output_names:
        pair = (name, plan.output_names[(name, d)])
        if pair not in plan.bound.setdefault(d, []):
            plan.bound[d].append(pair)
        return
    if d in plan.needed:
        return
    stmt = plan.body[d]
    mutated_later = any(
        name in names_of(s).mutates
        for s in plan.body[d + 1 : at]
        if not is_ctx_statement(s, plan.ctx)
    )
    if not recomputable(stmt) or mutated_later:
        why = "changed in place after it is computed" if mutated_later else "not exact and cheap"
        raise _refuse(
            cls, plan.lines[d], f"forward's intermediate `{name}` is kept on ctx and cannot be "
            f"recomputed in setup_context ({why}); either return it as an extra output marked "
            "with ctx.mark_non_differentiable and read it from `output` in setup_context, or "
            "recompute it in backward from the saved inputs"
        )  # fmt: skip
    plan.needed.add(d)
    for n in sorted(names_of(stmt).reads):
        _need(cls, plan, n, plan.defs_before[d].get(n), d)


def _fresh(base: str, taken: set[str]) -> str:
    name = base
    while name in taken:
        name += "_"
    return name


def _build(
    module: cst.Module, plan: _Plan, fn: cst.FunctionDef
) -> tuple[cst.FunctionDef, cst.FunctionDef]:
    config = module.config_for_parsing
    ctx = plan.ctx
    taken = set(plan.params) | {plan.star or ""} | names_of(fn.body).binds | names_of(fn.body).reads
    inputs = _fresh("inputs", taken)
    output = _fresh("output", taken)
    moved = [i for i, s in enumerate(plan.body[:-1]) if is_ctx_statement(s, ctx)]
    keep = [s for i, s in enumerate(plan.body) if i not in moved]
    first_left = keep[0] if keep else None
    if moved and moved[0] == 0 and first_left is not None:
        # The first statement went: the next one keeps no blank line at the block's start.
        lead = [ln for ln in getattr(first_left, "leading_lines", ()) if ln.comment is not None]
        keep[0] = first_left.with_changes(leading_lines=lead)
    given = fn.params.params
    skip = 1 if plan.owner else 0
    new_params = fn.params.with_changes(params=[*given[:skip], *given[skip + 1 :]])
    new_forward = fn.with_changes(params=new_params, body=fn.body.with_changes(body=keep))

    unpack: list[str] = []
    names = list(plan.params)
    if plan.star:
        names.append(f"*{plan.star}")
    if names == [f"*{plan.star}"]:
        unpack.append(f"{plan.star} = {inputs}")
    elif len(names) == 1:
        unpack.append(f"({names[0]},) = {inputs}")
    elif names:
        unpack.append(f"{', '.join(names)} = {inputs}")
    if not moved:
        unpack = []  # forward kept nothing on ctx: setup_context has nothing to read
    stmts: list[cst.BaseStatement] = [cst.parse_statement(u + "\n", config) for u in unpack]
    for i, s in enumerate(plan.body[:-1]):
        if i in plan.needed:
            stmts.append(s.with_changes(leading_lines=()))
        for n, k in plan.bound.get(i, []):
            ref = output if k is None else f"{output}[{k}]"
            stmts.append(cst.parse_statement(f"{n} = {ref}\n", config))
        if i in moved:
            inputs_here = {
                n: k for k, n in enumerate(plan.params) if plan.defs_before[i].get(n) == _PARAM
            }
            stmts.append(s.visit(_NeedsInputGrad(ctx, inputs_here)))  # type: ignore[arg-type]
    if not stmts:
        stmts.append(cst.parse_statement("pass\n", config))
    first: Any = stmts[0]
    if first.leading_lines and not plan.params and not plan.star:
        lead = [ln for ln in first.leading_lines if ln.comment is not None]
        stmts[0] = first.with_changes(leading_lines=lead)
    template = cst.parse_statement(
        f"@staticmethod\ndef setup_context({ctx}, {inputs}, {output}):\n    pass\n"
        if plan.owner is None
        else f"@classmethod\ndef setup_context({plan.owner}, {ctx}, {inputs}, {output}):\n    pass\n",
        config,
    )
    assert isinstance(template, cst.FunctionDef)
    setup = template.with_changes(
        body=template.body.with_changes(body=stmts), leading_lines=[cst.EmptyLine(indent=False)]
    )
    return new_forward, setup


class _NeedsInputGrad(cst.CSTTransformer):
    """``x.requires_grad`` of an input, read in what moves to setup_context, becomes
    ``ctx.needs_input_grad[i]``: the same in eager, and right under torch.func, where
    setup_context sees the inputs without their autograd wrappers."""

    def __init__(self, ctx: str, inputs: dict[str, int]) -> None:
        self.ctx = ctx
        self.inputs = inputs

    def leave_Attribute(
        self, original: cst.Attribute, updated: cst.Attribute
    ) -> cst.BaseExpression:
        v = updated.value
        name = v.value if isinstance(v, cst.Name) else ""
        if updated.attr.value == "requires_grad" and name in self.inputs:
            return cst.parse_expression(f"{self.ctx}.needs_input_grad[{self.inputs[name]}]")
        return updated


def _describe(name: str, line: int, plan: _Plan) -> Migration:
    inplace: list[int] = []
    nondiff: list[int] = []
    for stmt in plan.body[:-1]:
        if not isinstance(stmt, cst.SimpleStatementLine):
            continue
        for small in stmt.body:
            if not (isinstance(small, cst.Expr) and isinstance(small.value, cst.Call)):
                continue
            f = small.value.func
            if not isinstance(f, cst.Attribute) or root_name(f) != plan.ctx:
                continue
            for a in small.value.args:
                if not isinstance(a.value, cst.Name):
                    continue
                n = a.value.value
                if f.attr.value == "mark_dirty" and n in plan.params:
                    inplace.append(plan.params.index(n))
                if f.attr.value == "mark_non_differentiable":
                    for (out_name, _), k in plan.output_names.items():
                        if out_name == n and k is not None:
                            nondiff.append(k)
    recomputed = tuple(
        (min(names_of(plan.body[d]).binds, default="?"), plan.lines[d]) for d in sorted(plan.needed)
    )
    return Migration(
        name,
        line,
        inplace_args=tuple(sorted(set(inplace))),
        nondiff_outputs=tuple(sorted(set(nondiff))),
        recomputed=recomputed,
    )


def add_generated_rule(module: cst.Module, name: str) -> cst.Module:
    """The module with ``generate_vmap_rule = True`` added to class ``name``, just above its
    ``forward`` (the comments above forward stay with it)."""
    config = module.config_for_parsing
    out = []
    for s in module.body:
        if isinstance(s, cst.ClassDef) and s.name.value == name:
            fn = _methods(s)["forward"]
            rule = cst.parse_statement("generate_vmap_rule = True\n", config)
            blank = [ln for ln in fn.leading_lines if ln.comment is None]
            body = list(s.body.body)  # type: ignore[union-attr]
            at = body.index(fn)
            rule = rule.with_changes(leading_lines=blank if at else [])
            comments = [ln for ln in fn.leading_lines if ln.comment is not None]
            body[at : at + 1] = [
                rule,
                fn.with_changes(leading_lines=[cst.EmptyLine(indent=False), *comments]),
            ]
            s = s.with_changes(body=s.body.with_changes(body=body))
        out.append(s)
    return module.with_changes(body=out)
