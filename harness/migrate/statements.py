"""Which statements of a legacy ``forward`` are ctx work (they move to ``setup_context``),
and which intermediates are exact and cheap enough to compute again there."""

from __future__ import annotations

import libcst as cst

from harness.migrate.names import names_of, root_name

#: Methods (and torch functions) whose result is exact and cheap to compute again in
#: setup_context: metadata, views, casts, comparisons, elementwise sign/abs. No reductions.
CHEAP_CALLS = frozenset(
    {
        "size", "dim", "ndimension", "numel", "stride", "is_contiguous", "get_device",
        "contiguous", "view", "view_as", "reshape", "reshape_as", "t", "transpose", "permute",
        "unsqueeze", "squeeze", "flatten", "expand", "expand_as", "movedim", "narrow",
        "detach", "clone", "float", "double", "half", "bfloat16", "to", "type_as", "bool",
        "gt", "lt", "ge", "le", "eq", "ne", "abs", "sign", "neg", "logical_not",
        "zeros_like", "ones_like", "broadcast_shapes", "Size",
    }
)  # fmt: skip

#: Python builtins, called by name (``len(xs)``, ``max(a, b)`` of sizes).
CHEAP_BUILTINS = frozenset(
    {"len", "int", "float", "bool", "tuple", "list", "range", "isinstance", "max", "min"}
)


def is_ctx_small(small: cst.BaseSmallStatement, ctx: str) -> bool:
    """``ctx.save_for_backward(...)``, ``ctx.a = v``, ``setattr(ctx, ...)``, ``ctx.l.append(v)``."""
    if isinstance(small, cst.Expr) and isinstance(small.value, cst.Call):
        call = small.value
        if root_name(call.func) == ctx and isinstance(call.func, cst.Attribute):
            return True
        return (
            isinstance(call.func, cst.Name)
            and call.func.value == "setattr"
            and bool(call.args)
            and isinstance(call.args[0].value, cst.Name)
            and call.args[0].value.value == ctx
        )
    if isinstance(small, cst.Assign):
        return all(_rooted_at(t.target, ctx) for t in small.targets)
    if isinstance(small, (cst.AugAssign, cst.AnnAssign)):
        return _rooted_at(small.target, ctx)
    return False


def _rooted_at(target: cst.BaseExpression, ctx: str) -> bool:
    if isinstance(target, (cst.Tuple, cst.List)):
        return bool(target.elements) and all(_rooted_at(e.value, ctx) for e in target.elements)
    return isinstance(target, (cst.Attribute, cst.Subscript)) and root_name(target) == ctx


def _only_ctx(block: cst.BaseSuite | None, ctx: str) -> bool:
    """Every statement of an ``if`` (and its elif/else) block does something to ctx only."""
    if block is None:
        return True
    stmts = block.body if isinstance(block, cst.IndentedBlock) else (block,)
    for s in stmts:
        if isinstance(s, (cst.SimpleStatementLine, cst.SimpleStatementSuite)):
            if not all(isinstance(x, cst.Pass) or is_ctx_small(x, ctx) for x in s.body):
                return False
        elif isinstance(s, cst.If):
            if not (_only_ctx(s.body, ctx) and _only_ctx_orelse(s.orelse, ctx)):
                return False
        else:
            return False
    return True


def _only_ctx_orelse(orelse: cst.If | cst.Else | None, ctx: str) -> bool:
    if orelse is None:
        return True
    if isinstance(orelse, cst.If):
        return _only_ctx(orelse.body, ctx) and _only_ctx_orelse(orelse.orelse, ctx)
    return _only_ctx(orelse.body, ctx)


def is_ctx_statement(stmt: cst.BaseStatement, ctx: str) -> bool:
    if isinstance(stmt, cst.SimpleStatementLine):
        return all(is_ctx_small(s, ctx) for s in stmt.body)
    if isinstance(stmt, cst.If):
        return _only_ctx(stmt.body, ctx) and _only_ctx_orelse(stmt.orelse, ctx)
    return False


def mentions(node: cst.CSTNode, name: str) -> bool:
    return name in names_of(node).reads or name in names_of(node).binds


class Returns(cst.CSTVisitor):
    def __init__(self) -> None:
        self.returns: list[cst.Return] = []

    def visit_Return(self, node: cst.Return) -> bool:
        self.returns.append(node)
        return False

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return False

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        return False


PASSES = (
    "forward passes ctx to another function (a helper, super().forward); migrate that one "
    "first so that it takes no ctx"
)


def passes(node: cst.CSTNode, ctx: str) -> bool:
    """Whether ``ctx`` itself is an argument of a call in ``node``."""

    class V(cst.CSTVisitor):
        hit = False

        def visit_Arg(self, arg: cst.Arg) -> bool:
            if isinstance(arg.value, cst.Name) and arg.value.value == ctx:
                V.hit = True
            return True

    node.visit(V())
    return V.hit


def cheap(expr: cst.BaseExpression) -> bool:
    """Exact and cheap to evaluate again: names, constants, metadata, views, casts, arithmetic."""
    if isinstance(expr, (cst.Name, cst.Integer, cst.Float, cst.SimpleString, cst.Ellipsis)):
        return True
    if isinstance(expr, cst.Attribute):
        return cheap(expr.value)
    if isinstance(expr, (cst.Tuple, cst.List)):
        return all(cheap(e.value) for e in expr.elements)
    if isinstance(expr, cst.Subscript):
        for el in expr.slice:
            s = el.slice
            if isinstance(s, cst.Index) and not cheap(s.value):
                return False
            if isinstance(s, cst.Slice):
                parts = (s.lower, s.upper, s.step)
                if not all(p is None or cheap(p) for p in parts):
                    return False
        return cheap(expr.value)
    if isinstance(expr, cst.BinaryOperation):
        if isinstance(expr.operator, cst.MatrixMultiply):
            return False
        return cheap(expr.left) and cheap(expr.right)
    if isinstance(expr, cst.UnaryOperation):
        return cheap(expr.expression)
    if isinstance(expr, cst.BooleanOperation):
        return cheap(expr.left) and cheap(expr.right)
    if isinstance(expr, cst.Comparison):
        return cheap(expr.left) and all(cheap(c.comparator) for c in expr.comparisons)
    if isinstance(expr, cst.IfExp):
        return cheap(expr.test) and cheap(expr.body) and cheap(expr.orelse)
    if isinstance(expr, cst.Call):
        f = expr.func
        if isinstance(f, cst.Attribute):
            if f.attr.value not in CHEAP_CALLS or not cheap(f.value):
                return False
        elif not (isinstance(f, cst.Name) and f.value in CHEAP_BUILTINS):
            return False
        return all(cheap(a.value) for a in expr.args)
    return False


def recomputable(stmt: cst.BaseStatement) -> bool:
    if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1:
        small = stmt.body[0]
        if isinstance(small, (cst.Import, cst.ImportFrom)):
            return True
        if isinstance(small, cst.Assign):
            return all(_plain_target(t.target) for t in small.targets) and cheap(small.value)
        if isinstance(small, cst.AnnAssign) and small.value is not None:
            return _plain_target(small.target) and cheap(small.value)
    return False


def _plain_target(t: cst.BaseExpression) -> bool:
    if isinstance(t, cst.Name):
        return True
    if isinstance(t, (cst.Tuple, cst.List)):
        return all(_plain_target(e.value) for e in t.elements)
    return False
