"""Which names a statement reads, binds and mutates: the codemod's data flow over ``forward``.

Attribute names (``x.shape``'s ``shape``) and keyword names are not variables; names bound
inside the statement itself (comprehension targets, lambda parameters) are not reads of
``forward``'s variables.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst


@dataclass(frozen=True)
class Names:
    reads: frozenset[str]
    binds: frozenset[str]
    #: Names whose object is changed in place (``x[i] = v``, ``x.attr = v``, ``x.add_(1)``).
    mutates: frozenset[str]


class _Collector(cst.CSTVisitor):
    def __init__(self) -> None:
        self.reads: set[str] = set()
        self.binds: set[str] = set()
        self.local: set[str] = set()
        self.mutates: set[str] = set()

    # --- targets ------------------------------------------------------------------------
    def _target(self, node: cst.BaseExpression) -> None:
        if isinstance(node, cst.Name):
            self.binds.add(node.value)
        elif isinstance(node, (cst.Tuple, cst.List)):
            for el in node.elements:
                self._target(el.value)
        elif isinstance(node, cst.StarredElement):
            self._target(node.value)
        elif isinstance(node, (cst.Attribute, cst.Subscript)):
            root = root_name(node)
            if root is not None:
                self.mutates.add(root)
            node.visit(self)  # the object and the index are read
        else:
            node.visit(self)

    def visit_Assign(self, node: cst.Assign) -> bool:
        for t in node.targets:
            self._target(t.target)
        node.value.visit(self)
        return False

    def visit_AnnAssign(self, node: cst.AnnAssign) -> bool:
        self._target(node.target)
        if node.value is not None:
            node.value.visit(self)
        return False

    def visit_AugAssign(self, node: cst.AugAssign) -> bool:
        node.target.visit(self)  # read, then bound again
        self._target(node.target)
        node.value.visit(self)
        return False

    def visit_For(self, node: cst.For) -> bool:
        self._target(node.target)
        node.iter.visit(self)
        node.body.visit(self)
        if node.orelse is not None:
            node.orelse.visit(self)
        return False

    def visit_WithItem(self, node: cst.WithItem) -> bool:
        node.item.visit(self)
        if node.asname is not None:
            self._target(node.asname.name)
        return False

    def visit_NamedExpr(self, node: cst.NamedExpr) -> bool:
        self._target(node.target)
        node.value.visit(self)
        return False

    def visit_ImportAlias(self, node: cst.ImportAlias) -> bool:
        name = node.asname.name if node.asname is not None else node.name
        if isinstance(name, cst.Name):
            self.binds.add(name.value)
        else:  # import a.b binds a
            first = cst.Module([]).code_for_node(name).split(".")[0]
            self.binds.add(first)
        return False

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        self.binds.add(node.name.value)
        for d in node.decorators:
            d.visit(self)
        return False  # its body is its own scope

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        self.binds.add(node.name.value)
        return False

    def visit_ExceptHandler(self, node: cst.ExceptHandler) -> bool:
        if node.type is not None:
            node.type.visit(self)
        if node.name is not None:
            self._target(node.name.name)
        node.body.visit(self)
        return False

    # --- nested scopes and non-variable names ------------------------------------------------
    def visit_CompFor(self, node: cst.CompFor) -> bool:
        sub = _Collector()
        sub._target(node.target)
        self.local |= sub.binds
        return True

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        for p in node.params.params:
            self.local.add(p.name.value)
        return True

    def visit_Param(self, node: cst.Param) -> bool:
        if node.default is not None:
            node.default.visit(self)
        return False

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        node.value.visit(self)
        return False

    def visit_Arg(self, node: cst.Arg) -> bool:
        node.value.visit(self)
        return False

    def visit_Call(self, node: cst.Call) -> bool:
        func = node.func
        attr = func.attr.value if isinstance(func, cst.Attribute) else ""
        if attr.endswith("_") and not attr.startswith("_"):
            root = root_name(func.value)  # type: ignore[attr-defined]
            if root is not None:
                self.mutates.add(root)  # x.add_(1), x.grad.zero_()
        for a in node.args:
            if a.keyword is not None and a.keyword.value == "out":
                root = root_name(a.value)
                if root is not None:
                    self.mutates.add(root)
        return True

    def visit_Name(self, node: cst.Name) -> bool:
        self.reads.add(node.value)
        return False


def names_of(node: cst.CSTNode) -> Names:
    c = _Collector()
    node.visit(c)
    return Names(frozenset(c.reads - c.local), frozenset(c.binds), frozenset(c.mutates))


def root_name(node: cst.BaseExpression) -> str | None:
    """``ctx`` for ``ctx.a.b[0]`` or ``ctx.f(x).g``; None when the chain starts elsewhere."""
    while True:
        if isinstance(node, cst.Name):
            return node.value
        if isinstance(node, (cst.Attribute, cst.Subscript)):
            node = node.value
        elif isinstance(node, cst.Call):
            node = node.func
        else:
            return None
