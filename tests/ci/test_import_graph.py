"""The package's import graph has one direction (issue 26): no cycle between modules, and none between
packages, counting the imports placed inside functions (which Python resolves late, so a cycle through
them imports fine and still ties the layers together). import-linter (`.importlinter`, run by .ci/run)
checks the layers; this test reads every import of the source itself (the AST, function bodies
included, `if TYPE_CHECKING:` blocks left out because they never run) and looks for any cycle.

An import inside a function (any module: the package's own, third-party, standard library) says why
it is there, on its line or in the comment right above it (`# lazy: why`): it keeps a heavy module out
of a light entry point, or imports an optional extra (torch) or a module that exists on some systems
only (fcntl). Any other import belongs at module level. The light entry points are checked by running them: `gpuadvisor --help`, each command's
`--help` and `gpuadvisor rules` import none of torch, pandas, numpy, plotly.

Run it as a script (`python tests/ci/test_import_graph.py`) to print the cycles and the function-level
imports, counted by the module they import.
"""

from __future__ import annotations

import ast
import functools
import os
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "gpuadvisor"
# rules/ ships inside the wheel as gpuadvisor.builtin_rules (pyproject.toml): its imports count too
BUILTIN_RULES = "rules"
HEAVY = ("torch", "pandas", "numpy", "plotly")

# Imports against the direction, kept until their names move (the same exceptions as .importlinter).
# None left: the GPU peaks and the tensor-core verdict moved to gpuadvisor/hardware.py (issue 31).
ALLOWED: frozenset[tuple[str, str]] = frozenset()


@dataclass(frozen=True)
class Import:
    source: str  # the importing module
    target: str  # the imported module of the package
    line: int
    in_function: bool
    reason: str = ""  # a `# lazy: why` comment on the import's line or right above its run of imports


_IMPORT_LINE = re.compile(r"\s*(import|from)\s")


def _comment(lines: list[str], line: int) -> str:
    """The `# lazy:` reason of the import on `line` (1-based): on its own line, or in the comment lines
    right above the run of import lines it belongs to (one reason for `import numpy` + `import pandas`)."""
    at = line - 1
    if "# lazy:" in lines[at]:
        return lines[at].split("# lazy:", 1)[1].strip()
    while at > 0 and _IMPORT_LINE.match(lines[at - 1]) and "#" not in lines[at - 1]:
        at -= 1
    while at > 0 and lines[at - 1].lstrip().startswith("#"):
        at -= 1
        if "# lazy:" in lines[at]:
            return lines[at].split("# lazy:", 1)[1].strip()
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


@functools.cache  # read once for all the tests of this file
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


@dataclass(frozen=True)
class InnerImport:
    """An import statement inside a function, of any module."""

    path: str  # relative to the repository root
    line: int
    module: str  # as written: `numpy`, `torch.utils.data`, `.model`
    reason: str


def inner_imports(text: str, path: str) -> list[InnerImport]:
    lines = text.splitlines()
    found = []
    for node, in_function in _walk(ast.parse(text), False):
        if in_function:
            if isinstance(node, ast.Import):
                module = ", ".join(alias.name for alias in node.names)
            else:
                module = "." * node.level + (node.module or "")
            found.append(InnerImport(path, node.lineno, module, _comment(lines, node.lineno)))
    return found


def source_files() -> list[Path]:
    return sorted([*(ROOT / PACKAGE).rglob("*.py"), *(ROOT / BUILTIN_RULES).glob("*.py")])


@functools.cache
def all_inner_imports() -> list[InnerImport]:
    return [
        imp
        for path in source_files()
        for imp in inner_imports(path.read_text(encoding="utf-8"), path.relative_to(ROOT).as_posix())
    ]


def test_function_level_imports_say_why() -> None:
    """Every import inside a function (the package's own modules, third-party, standard library) says
    why it is not at module level (`# lazy: why`)."""
    silent = [f"{i.path}:{i.line}: import {i.module}" for i in all_inner_imports() if not i.reason]
    assert not silent, (
        "function-level imports without a `# lazy: why` comment (move them to module level, or say which "
        "light entry point they keep a heavy module out of, or why else they cannot be there):\n" + "\n".join(silent)
    )


def test_the_reason_is_read_where_it_is_written() -> None:
    # planted source: the checker finds the silent import and accepts the three placements of a reason
    text = (
        "import json\n"
        "def a():\n"
        "    import numpy as np  # lazy: on its line\n"
        "def b():\n"
        "    # lazy: above a run of imports, for all of them\n"
        "    # (a second comment line)\n"
        "    import numpy as np\n"
        "    import pandas as pd\n"
        "def c():\n"
        "    import gc\n"
        "    # lazy: this reason is for the next import only\n"
        "    import torch\n"
        "    f = lambda: __import__('x')\n"
        "    from . import model\n"
    )
    found = {(i.line, i.module): i.reason for i in inner_imports(text, "planted.py")}
    assert found == {
        (3, "numpy"): "on its line",
        (7, "numpy"): "above a run of imports, for all of them",
        (8, "pandas"): "above a run of imports, for all of them",
        (10, "gc"): "",
        (12, "torch"): "this reason is for the next import only",
        (14, "."): "",
    }


def _heavy_imports(*argv: str) -> list[str]:
    """The heavy top-level packages that `python -m gpuadvisor ARGV` imports (read from -X importtime)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", PACKAGE, *argv],
        capture_output=True, text=True, timeout=120, cwd=ROOT, env=env,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    names = {line.rsplit("|", 1)[1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    assert "gpuadvisor.cli" in names, "importtime was not read"
    return sorted(n for n in names if n in HEAVY)


@pytest.mark.parametrize(
    "argv",
    [("--help",), ("rules",), *((c, "--help") for c in ("analyze", "report", "diff", "profile", "verify"))],
    ids=" ".join,
)
def test_light_entry_points_import_no_heavy_module(argv: tuple[str, ...]) -> None:
    """`gpuadvisor --help`, each command's --help and `gpuadvisor rules` need none of torch, pandas, numpy
    or plotly: the modules they load import them inside the functions that use them. (The other light
    entry points have their tests: `import gpuadvisor.api` in tests/ci/test_ci_api.py, the trace-split
    worker in tests/trace/test_split.py, torch never imported by the analysis in tests/ci/test_packaging.py.)"""
    assert _heavy_imports(*argv) == []


def test_the_allowed_exception_is_still_needed() -> None:
    # an exception that is no longer used must go (ALLOWED and .importlinter shrink together)
    edges = {(i.source, i.target) for i in all_imports()}
    assert edges >= ALLOWED


def test_hardware_is_a_leaf() -> None:
    # the peaks and the tensor-core verdict are read by every stage: gpuadvisor/hardware.py imports none
    # of the package but the name-pattern helper, itself a leaf (the standard library only)
    assert {i.target for i in all_imports() if i.source == "gpuadvisor.hardware"} == {"gpuadvisor.namepattern"}
    assert not [i for i in all_imports() if i.source == "gpuadvisor.namepattern"]


def test_the_graph_is_read() -> None:
    # the walk finds imports at both levels, or the two tests above pass for nothing
    imports = all_imports()
    assert any(i.source == "gpuadvisor.cli" and not i.in_function for i in imports)
    assert any(i.in_function for i in imports)
    edges = {(i.source, i.target) for i in imports}
    assert cycles({*edges, ("gpuadvisor.errors", "gpuadvisor.cli")}), "a planted cycle is found"


if __name__ == "__main__":
    imports = all_imports()
    inner = all_inner_imports()
    for j in inner:
        print(f"function-level: {j.path}:{j.line} import {j.module}  # {j.reason or 'NO REASON'}")
    by_top = Counter("(package)" if j.module.startswith((".", PACKAGE)) else j.module.split(".")[0] for j in inner)
    print(f"{len(inner)} function-level import statements, {sum(not j.reason for j in inner)} without a reason:")
    print("  " + ", ".join(f"{name} {n}" for name, n in by_top.most_common()))
    for c in cycles(_edges(imports)):
        print("module cycle:", _explain(c, imports, layered=False))
    layered = {(layer_of(a), layer_of(b)) for a, b in _edges(imports)}
    for c in cycles({(a, b) for a, b in layered if a != b}):
        print("package cycle:", _explain(c, imports, layered=True))
