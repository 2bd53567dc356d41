"""The package's import graph has one direction (issue 26): no cycle between modules, and none between
packages, counting the imports placed inside functions (which Python resolves late, so a cycle through
them imports fine and still ties the layers together). import-linter (`.importlinter`, run by .ci/run)
checks the layers; this test reads every import of the source itself (the AST, function bodies
included, `if TYPE_CHECKING:` blocks left out because they never run) and looks for any cycle.

Run it as a script (`python tests/ci/test_import_graph.py`) to print the cycles and the count of
function-level imports of the package's own modules.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "gpuadvisor"

# Imports against the direction, kept until their names move (the same exceptions as .importlinter).
# None left: the GPU peaks and the tensor-core verdict moved to gpuadvisor/hardware.py (issue 31).
ALLOWED: frozenset[tuple[str, str]] = frozenset()


@dataclass(frozen=True)
class Import:
    source: str  # the importing module
    target: str  # the imported module of the package
    line: int
    in_function: bool
    reason: str = ""  # a `# lazy: why` comment on the import's line or the line above it


def _comment(lines: list[str], line: int) -> str:
    for text in (lines[line - 1], lines[line - 2] if line >= 2 else ""):
        if "# lazy:" in text:
            return text.split("# lazy:", 1)[1].strip()
    return ""


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    found = {}
    for path in sorted((ROOT / PACKAGE).rglob("*.py")):
        found[_module_name(path)] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _walk(node: ast.AST, in_function: bool) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            for other in child.orelse:
                yield from _walk(other, in_function)
            continue
        if isinstance(child, ast.Import | ast.ImportFrom):
            yield child, in_function
        inner = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
        yield from _walk(child, inner)


def imports_of(name: str, path: Path, known: dict[str, Path]) -> list[Import]:
    is_package = path.name == "__init__.py"
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    tree = ast.parse(text)
    found: list[Import] = []
    for node, in_function in _walk(tree, False):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            if node.level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            for alias in node.names:
                sub = f"{module}.{alias.name}"
                targets.append(sub if sub in known else module)
        for target in targets:
            # `import a.b.c` binds the innermost module that exists
            while target and target not in known and "." in target:
                target = target.rsplit(".", 1)[0]
            if target in known and target != name:
                reason = _comment(lines, node.lineno) if in_function else ""
                found.append(Import(name, target, node.lineno, in_function, reason))
    return found


@functools.cache  # parsing every module takes ~1 s; the six tests read one graph (the files do not change)
def all_imports() -> list[Import]:
    known = modules()
    return [imp for name, path in known.items() for imp in imports_of(name, path, known)]


def layer_of(module: str) -> str:
    """A subpackage (gpuadvisor.trace) or a top-level module (gpuadvisor.metrics) is one node."""
    return ".".join(module.split(".")[:2])


def cycles(edges: set[tuple[str, str]]) -> list[list[str]]:
    """The strongly connected components with more than one node (Tarjan's algorithm)."""
    graph: dict[str, set[str]] = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
        graph.setdefault(b, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def _explain(component: list[str], imports: list[Import], layered: bool) -> str:
    members = set(component)
    key = layer_of if layered else (lambda m: m)
    lines = [" <-> ".join(component)]
    for imp in imports:
        a, b = key(imp.source), key(imp.target)
        if a != b and a in members and b in members:
            where = "in a function" if imp.in_function else "module level"
            lines.append(f"    {imp.source}:{imp.line} imports {imp.target} ({where})")
    return "\n".join(lines)


def _edges(imports: list[Import]) -> set[tuple[str, str]]:
    return {(i.source, i.target) for i in imports if (i.source, i.target) not in ALLOWED}


def test_no_module_cycle() -> None:
    imports = all_imports()
    found = cycles(_edges(imports))
    assert not found, "import cycles between modules:\n" + "\n".join(
        _explain(c, imports, layered=False) for c in found
    )


def test_no_package_cycle() -> None:
    imports = all_imports()
    edges = {(layer_of(a), layer_of(b)) for a, b in _edges(imports)}
    found = cycles({(a, b) for a, b in edges if a != b})
    assert not found, "import cycles between packages:\n" + "\n".join(
        _explain(c, imports, layered=True) for c in found
    )


def test_function_level_imports_say_why() -> None:
    """An import of the package's own modules inside a function is there only to keep a heavy module
    (torch, pandas, plotly...) out of a light entry point, and says so (`# lazy: why`)."""
    silent = sorted(f"{i.source}:{i.line} -> {i.target}" for i in all_imports() if i.in_function and not i.reason)
    assert not silent, "function-level imports without a reason comment:\n" + "\n".join(silent)


def test_the_allowed_exception_is_still_needed() -> None:
    # an exception that is no longer used must go (ALLOWED and .importlinter shrink together)
    edges = {(i.source, i.target) for i in all_imports()}
    assert edges >= ALLOWED


def test_hardware_is_a_leaf() -> None:
    # the peaks and the tensor-core verdict are read by every stage: gpuadvisor/hardware.py imports none
    assert not [i for i in all_imports() if i.source == "gpuadvisor.hardware"]


def test_the_graph_is_read() -> None:
    # the walk finds imports at both levels, or the two tests above pass for nothing
    imports = all_imports()
    assert any(i.source == "gpuadvisor.cli" and not i.in_function for i in imports)
    assert any(i.in_function for i in imports)
    edges = {(i.source, i.target) for i in imports}
    assert cycles({*edges, ("gpuadvisor.errors", "gpuadvisor.cli")}), "a planted cycle is found"


if __name__ == "__main__":
    imports = all_imports()
    inner = {(i.source, i.line): i for i in imports if i.in_function}
    for i in inner.values():
        print(f"function-level: {i.source}:{i.line} -> {i.target}  # {i.reason}")
    print(f"{len(inner)} function-level import statements of the package's own modules")
    for c in cycles(_edges(imports)):
        print("module cycle:", _explain(c, imports, layered=False))
    layered = {(layer_of(a), layer_of(b)) for a, b in _edges(imports)}
    for c in cycles({(a, b) for a, b in layered if a != b}):
        print("package cycle:", _explain(c, imports, layered=True))
