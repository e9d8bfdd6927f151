"""The package's import layering: no import cycles (imports inside functions included), and
the layer rules of DESIGN.md: `infer/` and `lowering/` import neither libcst nor `tensor/`
or `rewrite/`; `backends/` sees only loop-IR-level modules and errors; `rewrite/` never
imports `tensor/`. The cycle check runs twice: on the imports that run, and on all of them,
those under `if TYPE_CHECKING:` included (a cycle there is still two modules that each need
the other to be read). No module is longer than MAX_MODULE_LINES (STYLE.md, practice 14)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "ocannl_ast"
PKG = "ocannl_ast"


def _module_name(path: Path) -> str:
    parts = [PKG, *path.relative_to(ROOT).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    """ids of the import nodes inside `if TYPE_CHECKING:` blocks."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for stmt in node.body:
                out.update(id(n) for n in ast.walk(stmt))
    return out


def _imports(mod: str, *, runtime_only: bool) -> set[str]:
    """Every module `mod` imports (absolute names, ours and third-party), at any depth of
    the file: top level, inside functions, inside classes."""
    path = MODULES[mod]
    tree = ast.parse(path.read_text(), str(path))
    skip = _type_checking_nodes(tree) if runtime_only else set()
    package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] \
                if node.level else []
            target = ".".join([*base, node.module] if node.module else base)
            for a in node.names:  # `from . import validate` imports a module
                sub = f"{target}.{a.name}"
                out.add(sub if sub in MODULES else target)
    return out


def _graph(*, runtime_only: bool) -> dict[str, set[str]]:
    """Package-internal import edges (a module importing its own package's __init__ is
    the interpreter's doing, not an edge we count)."""
    return {m: {d for d in _imports(m, runtime_only=runtime_only) if d in MODULES and d != m}
            for m in MODULES}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Cycles, as [a, b, ..., a], covering every module of every strongly connected component
    of more than one module: the shortest one through the component's first module (by
    name) not yet on a cycle listed, until none is left (so fixing what is listed leaves no
    cycle hidden behind another)."""
    out: list[list[str]] = []
    for comp in _components(graph):
        left = set(comp) if len(comp) > 1 else set()
        while left:
            out.append(_shortest_cycle(graph, min(left), set(comp)))
            left -= set(out[-1])
    return out


def _components(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components (Tarjan), each sorted, in the order of their names."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(m: str) -> None:
        index[m] = low[m] = len(index)
        stack.append(m)
        on_stack.add(m)
        for d in sorted(graph[m]):
            if d not in index:
                visit(d)
                low[m] = min(low[m], low[d])
            elif d in on_stack:
                low[m] = min(low[m], index[d])
        if low[m] == index[m]:
            comp: list[str] = []
            while not comp or comp[-1] != m:
                comp.append(stack.pop())
                on_stack.discard(comp[-1])
            out.append(sorted(comp))

    for m in sorted(graph):
        if m not in index:
            visit(m)
    return sorted(out)


def _shortest_cycle(graph: dict[str, set[str]], start: str, members: set[str]) -> list[str]:
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:  # breadth first inside the component, back to `start`
        nxt: list[str] = []
        for m in frontier:
            for d in sorted(graph[m] & members):
                if d == start:
                    path = [m]
                    while path[-1] != start:
                        path.append(came_from[path[-1]])
                    return [*reversed(path), start]
                if d not in came_from:
                    came_from[d] = m
                    nxt.append(d)
        frontier = nxt
    raise AssertionError(f"no cycle through {start} in {sorted(members)}")


def _show_cycles(cycles: list[list[str]]) -> str:
    return "\n".join("  " + " -> ".join(c) for c in cycles)


def test_the_checker_sees_function_local_imports_and_cycles() -> None:
    """The checker itself: a function-local import is an edge; a TYPE_CHECKING import is
    one only when typing imports count; every module on a cycle is on a cycle reported."""
    edges = _imports("ocannl_ast.tensor.validate", runtime_only=True)
    assert "ocannl_ast.backends" in edges  # imported inside `backend()`
    assert "ocannl_ast.infer.state" not in _imports("ocannl_ast.infer.closing",
                                                    runtime_only=True)
    assert "ocannl_ast.infer.state" in _imports("ocannl_ast.infer.closing",
                                                runtime_only=False)
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c", "a"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []
    graph = {"a": {"b", "d"}, "b": {"c"}, "c": {"a", "b"}, "d": {"e"}, "e": {"d"}}
    assert _cycles(graph) == [["a", "b", "c", "a"], ["d", "e", "d"]]
    graph = {"a": {"b"}, "b": {"a", "c"}, "c": {"b"}}  # one component, two cycles
    assert _cycles(graph) == [["a", "b", "a"], ["c", "b", "c"]]


@pytest.mark.parametrize("runtime_only", [True, False], ids=["runtime", "with_typing_imports"])
def test_package_import_graph_is_acyclic(runtime_only: bool) -> None:
    cycles = _cycles(_graph(runtime_only=runtime_only))
    kind = "" if runtime_only else " (counting `if TYPE_CHECKING:` imports)"
    assert not cycles, f"{len(cycles)} import cycle(s){kind}:\n" + _show_cycles(cycles)


#: STYLE.md's module size limit, in lines
MAX_MODULE_LINES = 500


def test_no_module_is_over_the_size_limit() -> None:
    sizes = {m: len(p.read_text().splitlines()) for m, p in MODULES.items()}
    over = sorted((n, m) for m, n in sizes.items() if n > MAX_MODULE_LINES)
    assert not over, f"{len(over)} module(s) over {MAX_MODULE_LINES} lines:\n" + "\n".join(
        f"  {MODULES[m].relative_to(ROOT.parent)}: {n} lines" for n, m in reversed(over))


def test_tensor_node_is_a_leaf() -> None:
    """The graph node and its records import no sibling module of `tensor/`."""
    deps = _graph(runtime_only=False)["ocannl_ast.tensor.node"]
    assert not {d for d in deps if d.startswith("ocannl_ast.tensor")}


def _layer(prefix: str) -> dict[str, set[str]]:
    return {m: _imports(m, runtime_only=False) for m in MODULES
            if m == prefix or m.startswith(prefix + ".")}


def _offending(prefix: str, banned: tuple[str, ...]) -> list[str]:
    return sorted(f"{m} imports {d}" for m, deps in _layer(prefix).items() for d in deps
                  if any(d == b or d.startswith(b + ".") for b in banned))


@pytest.mark.parametrize("layer", ["ocannl_ast.infer", "ocannl_ast.lowering"])
def test_infer_and_lowering_import_neither_libcst_nor_tensor_nor_rewrite(layer: str) -> None:
    banned = ("libcst", "ocannl_ast.tensor", "ocannl_ast.rewrite", "ocannl_ast.backends")
    assert _offending(layer, banned) == []


def test_rewrite_never_imports_tensor() -> None:
    assert _offending("ocannl_ast.rewrite", ("ocannl_ast.tensor",)) == []


#: what a backend may see: the loop IR and what works on it alone, and the errors
BACKEND_MAY_IMPORT = frozenset({
    "ocannl_ast.config", "ocannl_ast.errors", "ocannl_ast.lowering.loop_ir", "ocannl_ast.lowering.loop_verify",
    "ocannl_ast.lowering.loop_print", "ocannl_ast.lowering.threefry",
    "ocannl_ast.lowering.walk", "ocannl_ast.lowering.nests",
    "ocannl_ast.lowering.gc_pause",  # a leaf: pauses the cyclic GC while rendering
    "ocannl_ast.lowering.unit_memo",  # a leaf: keeps loop-IR facts (nests) for one render
})


def test_backends_see_only_the_loop_ir() -> None:
    bad = sorted(f"{m} imports {d}" for m, deps in _layer("ocannl_ast.backends").items()
                 for d in deps if d.startswith(PKG) and d not in BACKEND_MAY_IMPORT
                 and not d.startswith("ocannl_ast.backends"))
    assert bad == []
    for name in BACKEND_MAY_IMPORT:
        assert name in MODULES, f"{name} no longer exists: update BACKEND_MAY_IMPORT"


def test_nn_and_testing_load_on_first_use() -> None:
    """`import ocannl_ast` leaves `oc.nn` / `oc.testing` for their first use (import time);
    every way of reaching them still works."""
    code = (
        "import sys, ocannl_ast as oc\n"
        "assert 'ocannl_ast.nn' not in sys.modules and 'ocannl_ast.testing' not in sys.modules\n"
        "assert 'nn' in dir(oc) and 'testing' in dir(oc)\n"
        "assert callable(oc.nn.linear) and callable(oc.testing.check_grads)\n"
        "from ocannl_ast import nn\n"
        "import ocannl_ast.testing as t\n"
        "assert nn is oc.nn and t is oc.testing\n"
        "try:\n    oc.no_such_name\nexcept AttributeError:\n    pass\n"
        "else:\n    raise SystemExit('no AttributeError')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 0, proc.stderr
