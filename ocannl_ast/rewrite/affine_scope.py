"""Spec literals whose affine coefficients/offsets name Python values (seed 001: OCANNL
splices `stride`, `dilation` from scope): `oc.einsum("stride*o<+k; k => o", x, w)` in a body
becomes `oc.einsum(__oc__.spec_scope("stride*o<+k; k => o", {"stride": lambda: stride}), x, w)`.

Values are known only when the body runs, so each candidate name (`infer.spec_scope`: the
identifiers standing where only an integer may) travels as a thunk; the builder substitutes
the ints and reports a non-int, or a name Python does not bind at run time, as a located
SpecError (every candidate position admits only an integer, so nothing valid is lost). A
variable of an enclosing function is visible only when the body also uses it outside spec
strings (Python keeps closure cells only for the names a function's code reads).

Input: a string literal in a spec position (first argument of einsum/einsum_max, a `logic=`
keyword). Output: the replacing call, or None when the literal has no candidate.
"""

from __future__ import annotations

import ast

import libcst as cst

from ocannl_ast.infer.spec_scope import scope_candidates
from ocannl_ast.rewrite import build

#: Calls (by final name) whose first positional argument is an einsum spec.
SPEC_FUNCTIONS = frozenset({"einsum", "einsum_max"})


def final_name(func: cst.BaseExpression) -> str | None:
    """`einsum` for `einsum`, `oc.einsum`, `a.b.einsum`."""
    if isinstance(func, cst.Name):
        return func.value
    if isinstance(func, cst.Attribute):
        return func.attr.value
    return None


def spec_literal_args(call: cst.Call) -> list[cst.Arg]:
    """The arguments of `call` that are spec string literals."""
    out = [a for a in call.args if a.keyword is not None and a.keyword.value == "logic"]
    first = call.args[0] if call.args else None
    if final_name(call.func) in SPEC_FUNCTIONS and first is not None and first.keyword is None:
        out.append(first)
    return [a for a in out if isinstance(a.value, cst.SimpleString)]


def _text(literal: cst.SimpleString) -> str | None:
    if "b" in literal.prefix.lower():
        return None
    value = ast.literal_eval(literal.value)
    return value if isinstance(value, str) else None


def wrap(literal: cst.SimpleString) -> cst.Call | None:
    """`__oc__.spec_scope(literal, {"name": lambda: name, ...})`, or None."""
    text = _text(literal)
    names = scope_candidates(text) if text is not None else ()
    if not names:
        return None
    thunks = cst.Dict([
        cst.DictElement(build.string(n), cst.Lambda(cst.Parameters(), cst.Name(n)))
        for n in names
    ])
    return build.oc_call("spec_scope", [literal, thunks])
