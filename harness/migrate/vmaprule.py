"""What in ``forward`` keeps ``generate_vmap_rule = True`` from working: lines that leave
torch (numpy), read a tensor's value in Python (``.item()``, ``.tolist()``, ``bool()``),
branch on tensor data, or make a data-dependent shape. A generated rule runs ``forward``
on batched tensors, so each of these either fails or silently computes one slice's answer.
The vmap checks decide whether the generated rule is kept; this only says which line to
look at when it is not.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from harness.migrate.names import names_of

_VALUE_CALLS = {"item": ".item()", "tolist": ".tolist()", "numpy": ".numpy() (numpy)"}
_SHAPE_CALLS = {"nonzero", "masked_select", "unique", "unique_consecutive", "argwhere"}
_METADATA = {"shape", "ndim", "dtype", "device", "requires_grad", "is_cuda", "layout"}
_METADATA_CALLS = {"dim", "size", "numel", "ndimension", "is_contiguous", "isinstance", "len"}


@dataclass(frozen=True)
class Blocker:
    line: int
    code: str
    why: str

    def __str__(self) -> str:
        return f"line {self.line} `{self.code}` ({self.why})"


class _Scan(cst.CSTVisitor):
    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, module: cst.Module, tensors: set[str]) -> None:
        self.module = module
        self.tensors = tensors
        self.found: list[tuple[cst.CSTNode, str]] = []

    def visit_Call(self, node: cst.Call) -> bool:
        f = node.func
        if isinstance(f, cst.Attribute):
            name = f.attr.value
            if name in _VALUE_CALLS:
                self.found.append((node, _VALUE_CALLS[name]))
            elif name in _SHAPE_CALLS:
                self.found.append((node, f"{name}: a data-dependent shape"))
        return True

    def visit_Name(self, node: cst.Name) -> bool:
        if node.value in ("np", "numpy"):
            self.found.append((node, "numpy"))
        return False

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        node.value.visit(self)
        return False

    def _branch(self, node: cst.CSTNode, test: cst.BaseExpression) -> None:
        if _data_dependent(test, self.tensors):
            self.found.append((node, "control flow on tensor data"))

    def visit_If(self, node: cst.If) -> bool:
        self._branch(node, node.test)
        return True

    def visit_While(self, node: cst.While) -> bool:
        self._branch(node, node.test)
        return True

    def visit_IfExp(self, node: cst.IfExp) -> bool:
        self._branch(node, node.test)
        return True


def _data_dependent(test: cst.BaseExpression, tensors: set[str]) -> bool:
    """A test reading a tensor's values (not its shape, dtype or whether it is None)."""

    class V(cst.CSTVisitor):
        hit = False

        def visit_Attribute(self, node: cst.Attribute) -> bool:
            return node.attr.value not in _METADATA

        def visit_Call(self, node: cst.Call) -> bool:
            f = node.func
            name = f.attr.value if isinstance(f, cst.Attribute) else getattr(f, "value", "")
            return name not in _METADATA_CALLS

        def visit_Comparison(self, node: cst.Comparison) -> bool:
            none = all(
                isinstance(c.operator, (cst.Is, cst.IsNot))
                or (isinstance(c.comparator, cst.Name) and c.comparator.value == "None")
                for c in node.comparisons
            )
            return not none

        def visit_Name(self, node: cst.Name) -> bool:
            if node.value in tensors:
                V.hit = True
            return False

    v = V()
    V.hit = False
    test.visit(v)
    return V.hit


def blockers(source: str, class_name: str) -> list[Blocker]:
    """The lines of class ``class_name``'s ``forward`` (in ``source``) that a generated vmap
    rule cannot run correctly, in order."""
    module = cst.parse_module(source)
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
    positions = wrapper.resolve(PositionProvider)
    for stmt in module.body:
        if isinstance(stmt, cst.ClassDef) and stmt.name.value == class_name:
            body = stmt.body.body if isinstance(stmt.body, cst.IndentedBlock) else ()
            for fn in body:
                if isinstance(fn, cst.FunctionDef) and fn.name.value == "forward":
                    given = [p.name.value for p in fn.params.params]
                    legacy = not any(
                        isinstance(m, cst.FunctionDef) and m.name.value == "setup_context"
                        for m in body
                    )
                    if legacy and given:  # forward(ctx, ...) or forward(cls, ctx, ...)
                        ctx_at = 1 if given[0] == "cls" and len(given) > 1 else 0
                        given = given[:ctx_at] + given[ctx_at + 1 :]
                    params = set(given)
                    if isinstance(fn.params.star_arg, cst.Param):
                        params.add(fn.params.star_arg.name.value)
                    tensors = params | names_of(fn.body).binds
                    scan = _Scan(module, tensors)
                    fn.body.visit(scan)
                    out = []
                    for node, why in scan.found:
                        line = positions[node].start.line
                        text = source.splitlines()[line - 1].strip()
                        out.append(Blocker(line, text[:80], why))
                    first: dict[int, Blocker] = {}
                    for b in out:
                        first.setdefault(b.line, b)  # one reason a line
                    return [first[k] for k in sorted(first)]
    return []
