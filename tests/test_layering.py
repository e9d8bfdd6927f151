"""The package's import layering: no import cycles (imports inside functions included), and
the layer rules of DESIGN.md: `infer/` and `lowering/` import neither libcst nor `tensor/`
or `rewrite/`; `backends/` sees only loop-IR-level modules and errors; `rewrite/` never
imports `tensor/`. Imports under `if TYPE_CHECKING:` are left out of the cycle check (they
never run), but they still count for the layer rules."""

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


def _find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the stack, 2: done
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for d in sorted(graph[m]):
            if state.get(d) == 1:
                return [*stack[stack.index(d):], d]
            if d not in state and (cycle := visit(d)) is not None:
                return cycle
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state and (cycle := visit(m)) is not None:
            return cycle
    return None


def test_the_checker_sees_function_local_imports_and_cycles() -> None:
    """The checker itself: a function-local import is an edge; a cycle is reported."""
    edges = _imports("ocannl_ast.tensor.validate", runtime_only=True)
    assert "ocannl_ast.backends" in edges  # imported inside `backend()`
    assert _find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _find_cycle({"a": {"b"}, "b": set()}) is None


def test_package_import_graph_is_acyclic() -> None:
    cycle = _find_cycle(_graph(runtime_only=True))
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


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
    "ocannl_ast.errors", "ocannl_ast.lowering.loop_ir", "ocannl_ast.lowering.loop_verify",
    "ocannl_ast.lowering.loop_print", "ocannl_ast.lowering.threefry",
    "ocannl_ast.lowering.walk", "ocannl_ast.lowering.nests",
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
