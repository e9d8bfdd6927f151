"""Affine coefficients and offsets from Python scope (seed 001: OCANNL splices `stride` and
`dilation` into a spec): inside @op/@cd bodies the rewriter hands a spec literal's candidate
identifiers, with their runtime values, to `substitute`.

The rule (multi-character mode only): an identifier is replaced by the int it names when it
stands where the grammar admits only an integer --
- a coefficient: directly before `*` (`stride*o`, `dil*k`);
- an offset between two `+` (`s*o+off+k`, `s*o<+off+k`);
- a trailing `+name` of an affine axis (not after `<`/`=`) whose name is used nowhere else in
  the spec: a kernel label must index an axis, so such a name cannot be a kernel.
Everywhere else an identifier is a label, whatever Python binds to the same name.

Input: the spec text and name -> value. Output: the spec text with the values spliced in.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping

from ..errors import SpecError
from .spec_parser import _lex, _Tok, is_multichar

__all__ = ["scope_candidates", "substitute"]


def _positions(toks: list[_Tok]) -> list[tuple[int, str]]:
    """(token index, role) of every identifier in a coefficient or offset position."""
    uses: dict[str, int] = {}
    for t in toks:
        if t.kind == "IDENT":
            uses[t.text] = uses.get(t.text, 0) + 1
    out: list[tuple[int, str]] = []
    for n, t in enumerate(toks):
        if t.kind != "IDENT":
            continue
        nxt = toks[n + 1].kind
        prev = toks[n - 1].kind if n > 0 else ""
        marker = toks[n - 2].kind if n > 1 else ""
        between_plus = prev == "PLUS" and nxt == "PLUS"
        trailing = prev == "PLUS" and marker not in ("LT", "EQ") and uses[t.text] == 1
        if nxt == "STAR":
            out.append((n, "coefficient"))
        elif between_plus or trailing:
            out.append((n, "offset"))
    return out


def _tokens(text: str) -> list[_Tok]:
    if not is_multichar(text):
        return []
    try:
        return _lex(text, True)
    except SpecError:
        return []  # the builder reports the malformed spec


def scope_candidates(text: str) -> tuple[str, ...]:
    """Identifiers of `text` that a Python int in scope would replace, in order, unique.

    Example: ``scope_candidates("s*o<+k; k => o")`` is ``("s",)``.
    """
    toks = _tokens(text)
    return tuple(dict.fromkeys(toks[n].text for n, _ in _positions(toks)))


def _as_int(name: str, role: str, value: object, text: str, col: int) -> int:
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise SpecError(f"'{name}' is in an affine {role} position, so it must name a Python "
                        f"int, but it names a {type(value).__name__}", text, col)
    n = operator.index(value)  # type: ignore[call-overload]
    low = 1 if role == "coefficient" else 0
    if n < low:
        raise SpecError(f"'{name}' = {n}: an affine {role} must be "
                        f"{'positive' if low else 'non-negative'}", text, col)
    return n


def substitute(text: str, values: Mapping[str, object]) -> str:
    """`text` with each candidate identifier bound in `values` replaced by its int; a
    candidate bound to a non-int (float, tensor, bool) is a SpecError at its column.

    Example: ``substitute("s*o<+k; k => o", {"s": 2})`` is ``"2*o<+k; k => o"``.
    """
    toks = _tokens(text)
    out, last = [], 0
    for n, role in _positions(toks):
        tok = toks[n]
        if tok.text not in values:
            continue
        out += [text[last:tok.col], str(_as_int(tok.text, role, values[tok.text], text, tok.col))]
        last = tok.col + len(tok.text)
    return "".join(out) + text[last:]
