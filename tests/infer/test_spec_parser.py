"""Tests for the einsum spec parser: modes, rows, row variables, affine and concat axes,
column-accurate errors, and a fuzz test that only SpecError ever escapes."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ocannl_ast.errors import SpecError
from ocannl_ast.infer.spec_ast import (
    Affine,
    AxisSpec,
    Concat,
    Conv,
    FixedIndex,
    Label,
    RowSpec,
    ShapeSpec,
    Wildcard,
)
from ocannl_ast.infer.spec_parser import (
    is_multichar,
    parse_shape_spec,
    parse_spec,
    spec_labels,
    spec_row_vars,
)

L = Label


def out(*axes: AxisSpec) -> ShapeSpec:
    """An output-only shape with closed row."""
    return ShapeSpec(None, None, RowSpec((), None, tuple(axes)))


def row(*axes: AxisSpec, var: str | None = None, beg: tuple[AxisSpec, ...] = ()) -> RowSpec:
    return RowSpec(beg, var, tuple(axes))


# -- single-char mode -------------------------------------------------------------------


def test_matmul() -> None:
    spec = parse_spec("ij;jk=>ik")
    assert spec.operands == (out(L("i"), L("j")), out(L("j"), L("k")))
    assert spec.result == out(L("i"), L("k"))
    assert spec.text == "ij;jk=>ik"


def test_diagonal_both_ways() -> None:
    assert parse_spec("ii=>i").operands == (out(L("i"), L("i")),)
    assert parse_spec("i=>ii").result == out(L("i"), L("i"))


def test_three_and_more_operands() -> None:
    spec = parse_spec("bij;bjk;bkm=>bim")
    assert len(spec.operands) == 3
    assert spec.operands[2] == out(L("b"), L("k"), L("m"))
    assert len(parse_spec("a;b;c;d;e=>abcde").operands) == 5


def test_batch_input_output_rows() -> None:
    spec = parse_spec("...|i->o; ...|o->h => ...|i->h")
    ell = row(var="...")
    assert spec.operands[0] == ShapeSpec(ell, row(L("i")), row(L("o")))
    assert spec.operands[1] == ShapeSpec(ell, row(L("o")), row(L("h")))
    assert spec.result == ShapeSpec(ell, row(L("i")), row(L("h")))


def test_batch_without_input_and_input_without_batch() -> None:
    assert parse_spec("i=>2|i").result == ShapeSpec(row(FixedIndex(2)), None, row(L("i")))
    assert parse_spec("i->o=>o").operands[0] == ShapeSpec(None, row(L("i")), row(L("o")))


def test_empty_rows_allowed() -> None:
    spec = parse_spec("bs|->e; |se->h => b|->h")
    assert spec.operands[0] == ShapeSpec(row(L("b"), L("s")), row(), row(L("e")))
    assert spec.operands[1] == ShapeSpec(row(), row(L("s"), L("e")), row(L("h")))
    assert parse_spec("i=>").result == ShapeSpec(None, None, RowSpec((), None, ()))


def test_fixed_indices_single_char() -> None:
    assert parse_spec("ij=>i1j2").result == out(L("i"), FixedIndex(1), L("j"), FixedIndex(2))
    # a run of digits is one fixed index; whitespace separates runs
    assert parse_spec("i=>12").result == out(FixedIndex(12))
    assert parse_spec("i=>1 2").result == out(FixedIndex(1), FixedIndex(2))
    assert parse_spec("k => 0 0 k").result == out(FixedIndex(0), FixedIndex(0), L("k"))


def test_wildcard() -> None:
    assert parse_spec("_i=>i").operands[0] == out(Wildcard(), L("i"))
    assert parse_spec("_, row => row").operands[0] == out(Wildcard(), L("row"))


def test_whitespace_is_ignored() -> None:
    ref = parse_spec("ij;jk=>ik")
    for text in [" ij ; jk => ik ", "i j;j k=>i k", "\tij;\njk\r\n=>ik"]:
        spec = parse_spec(text)
        assert (spec.operands, spec.result) == (ref.operands, ref.result)


def test_row_variables_single_char() -> None:
    spec = parse_spec("..v..|...ijk => ..v..kji")
    assert spec.operands[0].batch == row(var="v")
    assert spec.operands[0].output == row(L("i"), L("j"), L("k"), var="...")
    assert spec.result.output == row(L("k"), L("j"), L("i"), var="v")
    assert parse_spec("i...j=>ij").operands[0].output == row(L("j"), var="...", beg=(L("i"),))
    assert parse_spec("2...|...->... => ...|...->...").operands[0].batch == row(
        var="...", beg=(FixedIndex(2),)
    )


def test_named_row_variable_with_leading_and_trailing_axes() -> None:
    spec = parse_spec("a..v..b => ..v..")
    assert spec.operands[0].output == row(L("b"), var="v", beg=(L("a"),))
    spec = parse_spec("a, ..row1.., b; ..row2.., c => a, ..row1.., c")
    assert spec.operands[0].output == row(L("b"), var="row1", beg=(L("a"),))
    assert spec.operands[1].output == row(L("c"), var="row2")
    assert spec_row_vars(spec) == {"row1", "row2"}


def test_unicode_ellipsis_alias() -> None:
    spec = parse_spec("…, i => …, 2*i")
    assert spec.operands[0].output == row(L("i"), var="...")


# -- multi-char mode --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "multi"),
    [
        ("abc", False),
        ("a,b,c", True),
        ("2*a+b", True),
        ("a+b", True),
        ("a*b", True),
        ("a^b", True),
        ("o<+k", True),
        ("o=+k", True),
        ("a|b->c", False),
        ("...a..b", False),
        ("ij=>i", False),
    ],
)
def test_mode_detection(text: str, multi: bool) -> None:
    assert is_multichar(text) is multi


def test_multichar_labels() -> None:
    spec = parse_spec("row,col=>row")
    assert spec.operands[0] == out(L("row"), L("col"))
    assert spec.result == out(L("row"))


def test_trailing_comma_forces_multichar() -> None:
    assert parse_spec("row,=>row").operands[0] == out(L("row"))
    assert parse_spec("row,=>").result == out()
    assert parse_spec("i,=>").operands[0] == out(L("i"))
    assert parse_spec("ab, => ab").result == out(L("ab"))


def test_multichar_fixed_index_and_identifiers() -> None:
    spec = parse_spec("batch_1, x2 => x2, 0, 12")
    assert spec.operands[0] == out(L("batch_1"), L("x2"))
    assert spec.result == out(L("x2"), FixedIndex(0), FixedIndex(12))


def test_multichar_rows_and_row_variables() -> None:
    spec = parse_spec("... | h, w, ..c.. => 0 | 0, 0, ..c..")
    assert spec.operands[0].output == row(var="c", beg=(L("h"), L("w")))
    assert spec.result == ShapeSpec(row(FixedIndex(0)), None, row(var="c", beg=(F0, F0)))
    assert parse_spec("a,b,..r.. => ..r..,b,a").result.output == row(L("b"), L("a"), var="r")


F0 = FixedIndex(0)


# -- affine axes ------------------------------------------------------------------------


def test_strided_write_interleave() -> None:
    even = parse_spec("..., i => ..., 2*i")
    assert even.operands[0].output == row(L("i"), var="...")
    assert even.result.output == row(Affine(2, "i", 0, None), var="...")
    odd = parse_spec("..., i => ..., 2*i + 1")
    assert odd.result.output == row(Affine(2, "i", 1, None), var="...")
    assert parse_spec("..., 2*i+1 => ..., i").operands[0].output.end == (Affine(2, "i", 1, None),)


def test_conv_2d_valid() -> None:
    spec = parse_spec("... | 2*oh<+kh, 2*ow<+kw, ic -> oc; kh, kw, ic -> oc => ... | oh, ow, oc")
    x, w = spec.operands
    assert x.batch == row(var="...")
    assert x.input == row(
        Affine(2, "oh", 0, Conv(1, "kh", False)), Affine(2, "ow", 0, Conv(1, "kw", False)), L("ic")
    )
    assert x.output == row(L("oc"))
    assert w == ShapeSpec(None, row(L("kh"), L("kw"), L("ic")), row(L("oc")))
    assert spec.result == ShapeSpec(row(var="..."), None, row(L("oh"), L("ow"), L("oc")))
    assert spec_labels(spec) == {"oh", "ow", "kh", "kw", "ic", "oc"}


@pytest.mark.parametrize(
    ("axis", "expected"),
    [
        ("o<+k", Affine(1, "o", 0, Conv(1, "k", False))),
        ("o=+k", Affine(1, "o", 0, Conv(1, "k", True))),
        ("o+k", Affine(1, "o", 0, Conv(1, "k", False))),
        ("2*o<+3*k", Affine(2, "o", 0, Conv(3, "k", False))),
        ("2*o=+3*k", Affine(2, "o", 0, Conv(3, "k", True))),
        ("2 * o < + 3 * k", Affine(2, "o", 0, Conv(3, "k", False))),
        ("2*o<+1+k", Affine(2, "o", 1, Conv(1, "k", False))),
        ("o=+5+2*k", Affine(1, "o", 5, Conv(2, "k", True))),
        ("o+k+2", Affine(1, "o", 2, Conv(1, "k", False))),  # the offset written last
        ("2*o<+3*k+1", Affine(2, "o", 1, Conv(3, "k", False))),
        ("3*o", Affine(3, "o", 0, None)),
        ("3*o+2", Affine(3, "o", 2, None)),
        ("1*o", Affine(1, "o", 0, None)),
        ("o+0", Affine(1, "o", 0, None)),
    ],
)
def test_affine_forms(axis: str, expected: Affine) -> None:
    assert parse_shape_spec(f"{axis},") == out(expected)


def test_plain_label_is_not_affine() -> None:
    assert parse_shape_spec("over,") == out(L("over"))


def test_pooling_from_ocannl_docs() -> None:
    spec = parse_spec("...|2*oh<+wh, 2*ow<+ww, ..c..; wh, ww => ...|oh, ow, ..c..")
    assert spec.operands[0].output == row(
        var="c",
        beg=(Affine(2, "oh", 0, Conv(1, "wh", False)), Affine(2, "ow", 0, Conv(1, "ww", False))),
    )


# -- concatenation ----------------------------------------------------------------------


def test_concat() -> None:
    assert parse_spec("a;b=>a^b").result == out(Concat((L("a"), L("b"))))
    assert parse_spec("a^b=>a").operands[0] == out(Concat((L("a"), L("b"))))
    assert parse_spec("3^a=>a").operands[0] == out(Concat((3, L("a"))))
    assert parse_spec("a=>a^3").result == out(Concat((L("a"), 3)))
    assert parse_spec("3^a^5 => a").operands[0] == out(Concat((3, L("a"), 5)))
    assert parse_spec("ii; jj => ii ^ jj").result == out(Concat((L("ii"), L("jj"))))


def test_concat_three_sources() -> None:
    spec = parse_spec("x, ...; y, ...; z, ... => x^y^z, ...")
    assert len(spec.operands) == 3
    assert spec.result.output == row(var="...", beg=(Concat((L("x"), L("y"), L("z"))),))


def test_parse_shape_spec() -> None:
    assert parse_shape_spec("...|i->o") == ShapeSpec(row(var="..."), row(L("i")), row(L("o")))
    assert parse_shape_spec("b|i->o,") == ShapeSpec(row(L("b")), row(L("i")), row(L("o")))
    assert parse_shape_spec("...|...->..., i").output == row(L("i"), var="...")


def test_results_are_cached() -> None:
    assert parse_spec("ij;jk=>ik") is parse_spec("ij;jk=>ik")


# -- errors -----------------------------------------------------------------------------

MALFORMED = [
    ("", 0, "empty spec"),
    ("   ", 0, "empty spec"),
    ("ij;jk", 5, "missing '=>'"),
    ("ij;;jk=>ik", 3, "empty operand"),
    ("=>i", 0, "empty operand"),
    ("i;=>i", 2, "empty operand"),
    ("ij;jk=>ik;", 9, "';' after '=>'"),
    ("i=>i=>i", 4, "'=>' written twice"),
    ("i$j=>i", 1, "unexpected character"),
    ("i=>i-", 4, "unexpected character"),
    ("i.j=>i", 1, "unexpected '.'"),
    ("..v=>v", 0, "unbalanced"),
    ("..=>i", 2, "row-variable name"),
    ("..1..=>i", 2, "cannot start with a digit"),
    ("...i...=>i", 4, "at most one row variable"),
    ("a, ..x.., ..y.. => a", 10, "at most one row variable"),
    ("a->b->c=>a", 4, "written twice"),
    ("a|b|c=>a", 3, "written twice"),
    ("a->b|c=>a", 4, "'|' must come before '->'"),
    ("..b..;b=>b", 6, "both as a row variable and as an axis label"),
    ("b;..b..=>b", 2, "both as a row variable and as an axis label"),
    ("..k.., 2*o<+k => o", 12, "both as a row variable and as an axis label"),
    ("2a,b=>b", 0, "cannot start with a digit"),
    ("2*=>i", 1, "dangling '*'"),
    ("i,j=>i+", 6, "dangling '+'"),
    ("a^=>a", 1, "dangling '^'"),
    ("a^b^, c=>a", 3, "dangling '^'"),
    ("0*i=>i", 0, "stride must be positive"),
    ("s*i=>i", 0, "stride must be an integer literal"),
    ("i,=>i*2", 4, "stride must be an integer literal"),
    ("2*3=>i", 2, "expected a label after '*'"),
    ("i<+0*k=>i", 3, "dilation must be positive"),
    ("i<+d*k=>i", 3, "dilation must be an integer literal"),
    ("i,j=>2*i+2", 9, "offset must be smaller than the stride"),
    ("i,j=>i+1", 7, "offset must be smaller than the stride"),
    ("2*i<+1=>i", 3, "needs a kernel"),
    ("2*i<k=>i", 4, "expected '+' after '<'"),
    ("i,j=>2*i+j+k", 10, "unexpected '+'"),
    ("a,,b=>a", 2, "unexpected ','"),
    (",a=>a", 0, "unexpected ','"),
    ("a b,c=>a", 2, "separated by ','"),
    ("a^_=>a", 2, "labels or integers"),
    ("a,b=>a^b*c", 8, "labels or integers"),
    ("_^a=>a", 1, "unexpected '^'"),
    ("1+i,=>i", 0, "affine axis starts with"),
    ("*i=>i", 0, "expected an axis"),
    ("…i…=>i", 2, "at most one row variable"),
    ("1" * 19 + "=>i", 0, "too long"),
]


@pytest.mark.parametrize(("text", "col", "fragment"), MALFORMED)
def test_malformed_spec(text: str, col: int, fragment: str) -> None:
    with pytest.raises(SpecError) as info:
        parse_spec(text)
    assert info.value.col == col, info.value.message
    assert fragment in info.value.message
    assert info.value.spec == text


@pytest.mark.parametrize(
    ("text", "col"),
    [("", 0), ("ij;k", 2), ("i=>j", 1), ("a|b|c", 3), ("..v..|v", 6), ("i->", -1)],
)
def test_malformed_shape_spec(text: str, col: int) -> None:
    if col < 0:  # valid: empty output row
        assert parse_shape_spec(text) == ShapeSpec(None, row(L("i")), row())
        return
    with pytest.raises(SpecError) as info:
        parse_shape_spec(text)
    assert info.value.col == col


def test_error_message_shows_caret() -> None:
    with pytest.raises(SpecError) as info:
        parse_spec("ij;jk=>i$")
    assert str(info.value).endswith("ij;jk=>i$\n            ^")


_ALPHABET = st.sampled_from(list("ijkab_0129.,;|-><=+*^ \t…$") + ["...", "..v..", "=>", "->"])


@settings(max_examples=400, deadline=None)
@given(st.text(max_size=40) | st.lists(_ALPHABET, max_size=30).map("".join))
def test_fuzz_only_spec_errors(text: str) -> None:
    for parse in (parse_spec, parse_shape_spec):
        try:
            parse(text)
        except SpecError as err:
            assert 0 <= err.col <= len(text)


def test_extensions_beyond_ocannl() -> None:
    # multi-letter row-variable names in single-char mode; identifiers may start with '_'
    assert parse_spec("..vw..ij=>..vw..").operands[0].output == row(L("i"), L("j"), var="vw")
    assert parse_spec("_x, y => y").operands[0] == out(L("_x"), L("y"))
    assert spec_labels(parse_spec("a; b => 3^a^b")) == {"a", "b"}
