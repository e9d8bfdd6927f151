"""Fresh rewrite of one function: parse → whitelist → transform → compile (uses libcst).

Input: a function's `FunctionSource` (or source text), its dialect and qualname. Output: the
compiled code object positioned on the user's lines and the span table (`__oc_spans__`), or
the rewritten source text (`rewrite_source`). `decorator` imports this module only when the
rewrite cache (`cache`) misses, so that a warm `import ocannl_ast` never loads libcst.
"""

from __future__ import annotations

import types

import libcst as cst

from ocannl_ast.errors import Span
from ocannl_ast.rewrite.cd_transform import CdTransformer
from ocannl_ast.rewrite.codegen import Rewritten, class_of, compile_function
from ocannl_ast.rewrite.op_transform import OpTransformer
from ocannl_ast.rewrite.source import (
    FunctionSource,
    Locator,
    ParsedFunction,
    parse_function,
    unreadable,
)
from ocannl_ast.rewrite.whitelist import check_syntax

TRANSFORMERS = {"op": OpTransformer, "cd": CdTransformer}


def rewrite_parsed(parsed: ParsedFunction, kind: str, qualname: str) -> Rewritten:
    """Check and transform a parsed function (raises DslSyntaxError)."""
    loc = Locator(parsed)
    if parsed.funcdef.asynchronous is not None:
        raise loc.error(parsed.funcdef, f"@{kind} cannot rewrite an async function")
    check_syntax(parsed.funcdef, kind, loc)
    transformer = TRANSFORMERS[kind](parsed, loc, qualname)
    module = parsed.module.visit(transformer)
    stmt: cst.CSTNode = module.body[0]
    if parsed.indent:
        stmt = cst.ensure_type(cst.ensure_type(stmt, cst.If).body, cst.IndentedBlock).body[0]
    return Rewritten(parsed, cst.ensure_type(stmt, cst.FunctionDef), transformer.lines,
                     transformer.origins, tuple(transformer.spans))


def rewrite_source(
    src: str, kind: str, qualname: str, *, filename: str = "<string>", first_line: int = 1
) -> str:
    """The rewritten text of the one decorated `def` in `src` (pure; for golden tests)."""
    parsed = parse_function(FunctionSource(src, filename, first_line), kind)
    rewritten = rewrite_parsed(parsed, kind, qualname)
    module = cst.Module(body=[rewritten.funcdef], default_indent=parsed.module.default_indent)
    return module.code


def rewrite_function(
    fn: types.FunctionType, source: FunctionSource, kind: str
) -> tuple[types.CodeType, tuple[Span, ...]]:
    """The code object of `fn` rewritten from `source`, and its span table."""
    parsed = parse_function(source, kind)
    if parsed.funcdef.name.value != fn.__name__:
        raise unreadable(fn, f"the source found for {fn.__qualname__} defines another function")
    rewritten = rewrite_parsed(parsed, kind, fn.__qualname__)
    code = fn.__code__
    new_code = compile_function(
        rewritten, code.co_freevars, code.co_flags, class_of(fn.__qualname__)
    )
    return new_code, rewritten.spans
