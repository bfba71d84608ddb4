"""Counts over a package's modules: import circles (function-level imports included),
modules past a line limit, private names imported from another module.

``python -m tests.architecture`` prints them for harness/ (the closing notes' numbers).
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass, field
from pathlib import Path

LINE_LIMIT = 600


@dataclass
class Counts:
    modules: int = 0
    lines: int = 0
    circles: list[list[str]] = field(default_factory=list)
    long_modules: list[tuple[str, int]] = field(default_factory=list)
    private_imports: list[tuple[str, str, str]] = field(default_factory=list)


def _modules(root: Path) -> dict[str, Path]:
    out: dict[str, Path] = {}
    for path in sorted(root.rglob("*.py")):
        parts = [root.name, *path.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _target(module: str, node: ast.ImportFrom, is_package: bool) -> str | None:
    if node.level == 0:
        return node.module
    base = module.split(".")
    if not is_package:
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's components of more than one module (iterative: no recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            advanced = False
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    advanced = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def count(root: Path) -> Counts:
    modules = _modules(root)
    graph: dict[str, set[str]] = {m: set() for m in modules}
    counts = Counts(modules=len(modules))
    for module, path in modules.items():
        text = path.read_text()
        n = len(text.splitlines())
        counts.lines += n
        if n > LINE_LIMIT:
            counts.long_modules.append((module, n))
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Import):
                graph[module].update(a.name for a in node.names if a.name in modules)
            elif isinstance(node, ast.ImportFrom):
                target = _target(module, node, is_package)
                if target is None:
                    continue
                for alias in node.names:
                    if f"{target}.{alias.name}" in modules:
                        graph[module].add(f"{target}.{alias.name}")
                    elif target in modules:
                        graph[module].add(target)
                        private = alias.name.startswith("_") and not alias.name.startswith("__")
                        if private and target != module:
                            counts.private_imports.append((module, target, alias.name))
    counts.circles = _strongly_connected(graph)
    return counts


def main() -> int:
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent.parent / "harness"
    c = count(root)
    print(f"modules: {c.modules} ({c.lines} lines)")
    print(f"circles: {len(c.circles)}", *(" <-> ".join(x) for x in c.circles), sep="\n  ")
    print(f"modules over {LINE_LIMIT} lines: {len(c.long_modules)}", *c.long_modules, sep="\n  ")
    print(f"private names imported across modules: {len(c.private_imports)}")
    for m, t, name in c.private_imports:
        print(f"  {m} <- {t}.{name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
