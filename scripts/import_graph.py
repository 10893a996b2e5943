"""The project's import graph, read from the source (``ast``, nothing imported): its packages and their
arrows, any import circle, any arrow that points up the layering of docs/ARCHITECTURE.md, and the imports of
project modules made inside functions (each must say why: ``# lazy: ...`` on its line or in the comments and
imports right above it).

    python scripts/import_graph.py [--root DIR] [--modules]    # exit 1 when a rule is broken
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

ROOTS = ("problem", "kernel", "storage", "dashboard", "ci")
# The rooms, lowest first, and the rooms each may import besides its own: arrows point down only
# (docs/ARCHITECTURE.md). The dashboard and the verdict both read storage and never import each other.
ALLOWED: dict[str, frozenset[str]] = {
    "problem": frozenset(),
    "kernel": frozenset({"problem"}),
    "storage": frozenset({"problem"}),
    "ci.harness": frozenset({"problem", "kernel", "storage"}),
    "ci.verdict": frozenset({"problem", "storage"}),
    "dashboard": frozenset({"problem", "storage"}),
    "ci.service": frozenset({"problem", "storage", "ci.harness", "ci.verdict"}),
    "ci.cli": frozenset({"problem", "kernel", "storage", "ci.harness", "ci.verdict", "ci.service", "dashboard"}),
    "ci.hooks": frozenset({"storage", "ci.service", "ci.cli"}),
    "ci": frozenset(),
}
LAZY_MARK = "# lazy:"


@dataclass
class Import:
    source: str  # importing module
    target: str  # imported project module
    line: int
    top: bool  # at module level (not inside a function or class body)
    marked: bool  # a lazy import that says why


@dataclass
class Graph:
    modules: dict[str, Path] = field(default_factory=dict)
    imports: list[Import] = field(default_factory=list)


def room(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "ci" and len(parts) > 1 else parts[0]


def module_name(root: Path, path: Path) -> str:
    rel = path.relative_to(root).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve(graph: Graph, name: str) -> str | None:
    while name and name not in graph.modules:
        name = name.rpartition(".")[0]
    return name or None


def _targets(graph: Graph, node: ast.Import | ast.ImportFrom, package: str) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    base = node.module or ""
    if node.level:
        parts = package.split(".")
        base = ".".join([*parts[: len(parts) - node.level + 1], base]).strip(".")
    return [f"{base}.{a.name}" if f"{base}.{a.name}" in graph.modules else base for a in node.names]


class _Reader:
    """Collects one module's imports of project modules, noting which are inside a function."""

    def __init__(self, graph: Graph, name: str, path: Path) -> None:
        self.graph, self.name = graph, name
        self.package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        text = path.read_text(encoding="utf-8")
        self.lines = text.splitlines()
        self.seen: set[tuple[str, int]] = set()
        self.visit(ast.parse(text, filename=str(path)), top=True)

    def says_why(self, lineno: int) -> bool:
        """A ``# lazy:`` reason on the import's line or in the block of comments and imports right above it."""
        i = lineno - 1
        if LAZY_MARK in self.lines[i]:
            return True
        while i > 0:
            i -= 1
            line = self.lines[i].strip()
            if LAZY_MARK in line:
                return True
            if not line.startswith(("#", "import ", "from ")) and line:
                return False
        return False

    def visit(self, node: ast.AST, top: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                for sub in child.orelse:
                    self.visit_one(sub, top)
                continue  # imports for type annotations only
            self.visit_one(child, top)

    def visit_one(self, child: ast.AST, top: bool) -> None:
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            marked = self.says_why(child.lineno)
            for t in dict.fromkeys(_targets(self.graph, child, self.package)):
                target = _resolve(self.graph, t)
                if target and target != self.name and (target, child.lineno) not in self.seen:
                    self.seen.add((target, child.lineno))
                    self.graph.imports.append(Import(self.name, target, child.lineno, top, marked))
        elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            self.visit(child, False)
        else:
            self.visit(child, top)


def read(root: Path) -> Graph:
    graph = Graph()
    for top in ROOTS:
        for path in sorted((root / top).rglob("*.py")):
            graph.modules[module_name(root, path)] = path
    for name, path in graph.modules.items():
        _Reader(graph, name, path)
    return graph


def upward(graph: Graph) -> list[Import]:
    """Imports of a room the importer's room may not import (one at its own level or above)."""
    return [
        i
        for i in graph.imports
        if room(i.source) != room(i.target) and room(i.target) not in ALLOWED.get(room(i.source), frozenset())
    ]


def cycles(graph: Graph) -> list[list[str]]:
    """Import circles between modules (Tarjan's strongly connected components of more than one module)."""
    edges: dict[str, set[str]] = defaultdict(set)
    for i in graph.imports:
        if not i.source.startswith(i.target + "."):  # a module importing its own package's __init__
            edges[i.source].add(i.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def strong(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10_000)
    for v in sorted(graph.modules):
        if v not in index:
            strong(v)
    return out


def unmarked_lazy(graph: Graph) -> list[Import]:
    return [i for i in graph.imports if not i.top and not i.marked]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1], help="the project's root")
    parser.add_argument("--modules", action="store_true", help="also list every module-to-module arrow")
    args = parser.parse_args(argv)
    graph = read(args.root)
    arrows = Counter((room(i.source), room(i.target)) for i in graph.imports if room(i.source) != room(i.target))
    modules = Counter(room(m) for m in graph.modules)
    print("rooms (modules) and their arrows (imports of another room's modules):")
    for r in [r for r in ALLOWED if r in modules]:
        outs = ", ".join(f"{t} ({n})" for (s, t), n in sorted(arrows.items()) if s == r)
        print(f"  {r} ({modules[r]}) -> {outs or 'nothing'}")
    if args.modules:
        for i in sorted(graph.imports, key=lambda i: (i.source, i.target)):
            print(f"    {i.source} -> {i.target}{'' if i.top else ' (in a function)'}")
    ups, circles, lazy = upward(graph), cycles(graph), unmarked_lazy(graph)
    inner = [i for i in graph.imports if not i.top]
    print(f"upward arrows: {len(ups)}")
    for i in ups:
        print(f"  {i.source}:{i.line} -> {i.target}")
    print(f"import circles: {len(circles)}")
    for c in circles:
        print("  " + " <-> ".join(c))
    print(f"imports of project modules inside functions: {len(inner)} ({len(lazy)} without a '{LAZY_MARK}' reason)")
    for i in lazy:
        print(f"  {i.source}:{i.line} -> {i.target}")
    return 1 if ups or circles or lazy else 0


if __name__ == "__main__":
    sys.exit(main())
