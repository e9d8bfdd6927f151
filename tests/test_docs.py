"""The user documentation runs: every ```python block of docs/*.md and README.md executes
against the current code, and every `# -> expected` comment matches what the statement
really produces.

Rules (also stated in docs/index.md, "About the examples"):
- The blocks of one page run in order in one namespace; each page gets a fresh namespace.
- A block directly preceded by the line `<!-- no-run -->` is skipped (only for code that
  genuinely cannot run here, e.g. it needs a GPU).
- `stmt  # -> text` on an expression statement, or a `# -> text` comment line right after
  it, gives the expected output; following lines that start with `#  ` continue it. The
  expected text is compared with what the statement prints, or with `str()` of its value when
  it prints nothing, after collapsing runs of whitespace. Every annotation must be checked.
- A fenced block (any language) directly preceded by the line `<!-- output -->` is the
  exact output of the python block before it: everything that block prints, compared after
  collapsing runs of whitespace.
- Code is compiled with the page's path and its real line numbers, so `@oc.op` / `@oc.cd`
  (which read their source) work and errors point at the page.

Run one page by hand: `python tests/test_docs.py docs/einsum.md`.
"""

from __future__ import annotations

import ast
import contextlib
import io
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGES = [*sorted(DOCS.glob("*.md")), ROOT / "README.md"]
NO_RUN = "<!-- no-run -->"
OUTPUT = "<!-- output -->"
_ARROW = re.compile(r"#\s?->\s?(.*)$")
_CONT = re.compile(r"^\s*#  (.*)$")


@dataclass
class Block:
    """One ```python block: its first code line (1-based, in the page) and its lines."""

    start: int
    lines: list[str]
    skipped: bool
    output: str | None = None  #: the `<!-- output -->` block after it, if any


@dataclass
class Expected:
    """The expected output annotated at a statement, and whether a run checked it."""

    text: str
    checked: bool = False
    failures: list[str] = field(default_factory=list)


def blocks_of(path: Path) -> list[Block]:
    """The python blocks of a markdown page, with their positions."""
    out: list[Block] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        if lines[i].startswith("```"):
            prev = next((x.strip() for x in reversed(lines[:i]) if x.strip()), "")
            j = i + 1
            while j < len(lines) and lines[j].strip() != "```":
                j += 1
            body = lines[i + 1:j]
            if lines[i].strip() == "```python":
                out.append(Block(i + 2, body, prev == NO_RUN))
            elif prev == OUTPUT:
                assert out and out[-1].output is None, f"line {i + 1}: output of what?"
                out[-1].output = "\n".join(body)
            i = j
        i += 1
    return out


def _normalize(text: str) -> str:
    return " ".join(text.split())


def expectations(block: Block, tree: ast.Module) -> dict[int, Expected]:
    """Expected outputs keyed by the (page) line of the statement they annotate."""
    out: dict[int, Expected] = {}
    stmts = [n for n in ast.walk(tree) if isinstance(n, ast.stmt)]
    ends = {n.end_lineno: n for n in stmts if n.end_lineno is not None}
    for k, line in enumerate(block.lines):
        m = _ARROW.search(line)
        if m is None or "#" not in line:
            continue
        lineno = block.start + k
        inline = not line.lstrip().startswith("#")
        target = lineno if inline else lineno - 1
        parts = [m.group(1)]
        for nxt in block.lines[k + 1:]:
            c = _CONT.match(nxt)
            if c is None or _ARROW.search(nxt):
                break
            parts.append(c.group(1))
        stmt = ends.get(target)
        assert isinstance(stmt, ast.Expr), (f"line {lineno}: '# ->' must annotate an "
                                            "expression statement (on its line or the next)")
        out[stmt.lineno] = Expected(_normalize("\n".join(parts)))
    return out


class _Checks(ast.NodeTransformer):
    """Wrap each annotated expression statement in a call to the checker."""

    def __init__(self, lines: set[int]) -> None:
        self.lines = lines

    def visit_Expr(self, node: ast.Expr) -> Any:
        if node.lineno not in self.lines:
            return node
        thunk = ast.Lambda(ast.arguments([], [], None, [], [], None, []), node.value)
        call = ast.Call(ast.Name("__doc_check__", ast.Load()),
                        [ast.Constant(node.lineno), thunk], [])
        return ast.copy_location(ast.Expr(call), node)


def _checker(expected: dict[int, Expected]) -> Callable[[int, Callable[[], Any]], None]:
    def check(lineno: int, thunk: Callable[[], Any]) -> None:
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            value = thunk()
        shown = buf.getvalue() if value is None else str(value)
        sys.stdout.write(buf.getvalue())
        exp = expected[lineno]
        exp.checked = True
        if _normalize(shown) != exp.text:
            exp.failures.append(f"line {lineno}: expected\n    {exp.text}\ngot\n    "
                                f"{_normalize(shown)}")

    return check


def run_page(path: Path) -> tuple[int, int]:
    """Run a page's blocks; returns (blocks run, expectations checked). Raises on failure."""
    ns: dict[str, Any] = {"__name__": f"docs_{path.stem}"}
    ran = checked = 0
    for block in blocks_of(path):
        if block.skipped:
            continue
        src = "\n" * (block.start - 1) + "\n".join(block.lines) + "\n"
        tree = ast.parse(src, filename=str(path))
        expected = expectations(block, tree)
        tree = ast.fix_missing_locations(_Checks(set(expected)).visit(tree))
        ns["__doc_check__"] = _checker(expected)
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            exec(compile(tree, str(path), "exec"), ns)  # noqa: S102 - the docs are ours
        sys.stdout.write(printed.getvalue())
        ran += 1
        if block.output is not None:
            assert _normalize(printed.getvalue()) == _normalize(block.output), (
                f"{path.name}:{block.start}: printed\n{printed.getvalue()}\nbut the page "
                f"shows\n{block.output}")
        for lineno, exp in sorted(expected.items()):
            assert exp.checked, f"{path.name}:{lineno}: annotated statement never ran"
            assert not exp.failures, f"{path.name}: " + "\n".join(exp.failures)
            checked += 1
    return ran, checked


def test_docs_exist() -> None:
    names = {p.name for p in PAGES}
    assert {"index.md", "einsum.md", "shapes.md", "dialect.md", "generated_code.md",
            "training.md"} <= names


_RUN_IN_CHILD = """
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
import test_docs
ran, _ = test_docs.run_page(Path(sys.argv[2]))
print("RAN", ran)
"""


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_page_runs(page: Path) -> None:
    # each page in a fresh interpreter, as a reader runs it: what ran before in this process
    # (param names numbered per process, hence their random init) must not change its numbers
    proc = subprocess.run([sys.executable, "-c", _RUN_IN_CHILD, str(Path(__file__).parent),
                           str(page)], capture_output=True, text=True, cwd=ROOT, timeout=600,
                          check=False)
    assert proc.returncode == 0, f"{page.name} failed:\n{proc.stdout[-4000:]}{proc.stderr[-8000:]}"
    ran = int(proc.stdout.strip().splitlines()[-1].removeprefix("RAN "))
    runnable = [b for b in blocks_of(page) if not b.skipped]
    assert ran == len(runnable)


def test_checker_catches_a_wrong_expectation(tmp_path: Path) -> None:
    page = tmp_path / "wrong.md"
    page.write_text("```python\n1 + 1  # -> 3\n```\n", encoding="utf-8")
    with pytest.raises(AssertionError, match="expected"):
        run_page(page)


def test_checker_reads_multiline_expectations(tmp_path: Path) -> None:
    page = tmp_path / "multi.md"
    page.write_text("```python\nprint('a\\nb')\n# -> a\n#  b\nx = 2\nx * 3  # -> 6\n```\n",
                    encoding="utf-8")
    assert run_page(page) == (1, 2)


def test_checker_rejects_unrun_annotation(tmp_path: Path) -> None:
    page = tmp_path / "dead.md"
    page.write_text("```python\nif False:\n    print(1)  # -> 1\n```\n", encoding="utf-8")
    with pytest.raises(AssertionError, match="never ran"):
        run_page(page)


def test_output_block_is_compared(tmp_path: Path) -> None:
    page = tmp_path / "out.md"
    page.write_text("```python\nprint('x  y')\n```\n\n<!-- output -->\n```text\nx y\n```\n",
                    encoding="utf-8")
    assert run_page(page) == (1, 0)
    page.write_text("```python\nprint('x')\n```\n<!-- output -->\n```text\nz\n```\n",
                    encoding="utf-8")
    with pytest.raises(AssertionError, match="the page shows"):
        run_page(page)


def test_no_run_marker_skips_a_block(tmp_path: Path) -> None:
    page = tmp_path / "skip.md"
    page.write_text("<!-- no-run -->\n```python\nraise SystemExit\n```\n"
                    "```python\n2 + 2  # -> 4\n```\n", encoding="utf-8")
    assert run_page(page) == (1, 1)


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        print(arg, run_page(Path(arg).resolve()))


def test_api_reference_lists_every_public_name() -> None:
    """docs/api.md names every public name, so a new one cannot go undocumented; its
    statement about `spec=` holds."""
    import inspect

    import ocannl_ast as oc
    import ocannl_ast.distributed as ocd
    from ocannl_ast import init, nn

    text = (DOCS / "api.md").read_text()
    missing = [f"oc.{n}" for n in oc.__all__ if f"oc.{n}" not in text]
    layers = [n for n, v in vars(nn).items()
              if not n.startswith("_") and callable(v)
              and getattr(v, "__module__", "") in ("ocannl_ast.nn", "ocannl_ast.layers_norm",
                                   "ocannl_ast.layers_positions", "ocannl_ast.layer_mode")]
    missing += [f"oc.nn.{n}" for n in layers if f"oc.nn.{n}" not in text]
    missing += [f"oc.init.{n}" for n in dir(init)
                if not n.startswith("_") and callable(getattr(init, n))
                and getattr(getattr(init, n), "__module__", "").startswith("ocannl_ast")
                and f"oc.init.{n}" not in text]
    missing += [f"ocd.{n}" for n in ocd.__all__ if f"ocd.{n}" not in text]
    assert not missing, f"docs/api.md lacks {missing}"
    no_spec = {n for n in ("add", "sub", "mul", "div", "neg", "recip", "sqrt", "recip_sqrt",
                           "exp", "log", "exp2", "log2", "sin", "cos", "tanh", "relu",
                           "sigmoid", "abs", "sign", "floor", "round", "mod", "clamp",
                           "fma_pointwise", "relu_gate", "eq", "ne", "lt", "le", "where")
               if "spec" not in inspect.signature(getattr(oc, n)).parameters}
    assert no_spec == {"sigmoid", "abs", "round", "clamp"}
