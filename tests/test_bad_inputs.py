"""Bad input through the public API: every case raises the right `oc.OcannlError` subclass
with a message located at this file, the line of the failing call and the column where
that call (or operator expression) starts. Each `C(...)` row holds one case as a lambda;
unless `at=` names a sub-expression, the expected column is where the lambda's body starts.
Cases inside @op/@cd bodies name the body line with `line=` (a `# MARK:` comment)."""

from __future__ import annotations

import ast
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

import ocannl_ast as oc

HERE = os.path.abspath(__file__)
with open(__file__, encoding="utf-8") as _f:
    _SOURCE = _f.read().splitlines()
_LAMBDA_COL = {n.lineno: n.body.col_offset for n in ast.walk(ast.parse("\n".join(_SOURCE)))
               if isinstance(n, ast.Lambda)}


def line_of(marker: str) -> int:
    hits = [n for n, text in enumerate(_SOURCE, 1) if text.rstrip().endswith(f"# {marker}")]
    assert len(hits) == 1, (marker, hits)
    return hits[0]


@dataclass(frozen=True)
class C:
    """One bad input: the error class, the call, and where the error must point."""

    cls: type[oc.OcannlError]
    fn: Callable[[], Any]
    at: str | None = None  #: the sub-expression the error points at (default: the body)
    line: str | None = None  #: a `# MARK:` naming the line (default: the lambda's line)
    words: tuple[str, ...] = ()  #: words the message must contain

    def where(self) -> tuple[int, int]:
        line = line_of(self.line) if self.line else self.fn.__code__.co_firstlineno
        col = _LAMBDA_COL[line] if self.at is None else _SOURCE[line - 1].index(self.at)
        return line, col


# ---- shared fixtures (cheap, built once) ---------------------------------------------------

x = oc.ndarray([1.0, 2.0], label="x")
w = oc.param("w", output_dims=[2], init=0.5)
w_unused = oc.param("w_unused", output_dims=[2], init=0.5)
loss = oc.einsum("i;i=>", w, x)
t = oc.term("t", output_dims=[2])
ctx = oc.Context()
_b = oc.static_index("b")
_rows = oc.ndarray(np.arange(8.0).reshape(4, 2), batch_axes=1, label="rows")
_SLICE = _rows.batch_slice(_b)
_ROUTINE: list[oc.Routine] = []


def routine() -> oc.Routine:
    if not _ROUTINE:
        _ROUTINE.append(ctx.compile(_SLICE.forward))
    return _ROUTINE[0]


@oc.cd
def _copy(v, v1, projections):
    v[...] = v1


@oc.cd
def _add2(v, v1, v2, projections):
    v[...] = v1 + v2


def _not_slots(v, foo):
    return None


@oc.op
def op_bad_spec(a):
    y = {w_op, o := [2]} * 2.0 + oc.einsum(123, a)  # MARK:op-spec
    return y


@oc.op
def op_str_operand(a):
    return {w_op2, o := [2]} + "a" * 1  # MARK:op-str


@oc.op
def op_bad_dims(a):
    return a + {w_op3, o := [2.5]}  # MARK:op-dims


@oc.op
def op_ragged(a):
    return a + oc.ndarray([[1.0], [2.0, 3.0]])  # MARK:op-ragged


@oc.cd
def cd_mean(v, v1):
    v[...] = mean(v1)  # noqa: F821  # MARK:cd-mean


@oc.cd
def cd_average(v, v1, projections):
    v[...] = v1 + average(v1)  # noqa: F821  # MARK:cd-average


@oc.cd
def cd_bad_set(v):
    v[...] = oc.number(None)  # MARK:cd-number


_mean_op = oc.unary_op(cd_mean, None)


CASES: dict[str, list[C]] = {
    "ndarray": [
        C(oc.RuntimeDataError, lambda: oc.ndarray(None), words=("None",)),
        C(oc.RuntimeDataError, lambda: oc.ndarray(1j), words=("complex",)),
        C(oc.RuntimeDataError, lambda: oc.ndarray([1 + 2j, 3.0]), words=("values[0]",)),
        C(oc.RuntimeDataError, lambda: oc.ndarray(np.array([1 + 2j])), words=("imaginary",)),
        C(oc.RuntimeDataError, lambda: oc.ndarray(np.array([object()])), words=("object",)),
        C(oc.RuntimeDataError, lambda: oc.ndarray(np.array(["a", "b"])), words=("dtype",)),
        C(oc.RuntimeDataError, lambda: oc.ndarray(np.array([b"a"])), words=("dtype",)),
        C(oc.RuntimeDataError, lambda: oc.ndarray(np.array(["2020"], dtype="datetime64[D]"))),
        C(oc.RuntimeDataError, lambda: oc.ndarray("abc"), words=("str",)),
        C(oc.RuntimeDataError, lambda: oc.ndarray([[1, 2], [3]]), words=("ragged",)),
        C(oc.RuntimeDataError, lambda: oc.ndarray([[1, 2], 3]), words=("mixes",)),
        C(oc.RuntimeDataError, lambda: oc.ndarray([[1, 2], (3, 4)]), words=("list", "tuple")),
        C(oc.RuntimeDataError, lambda: oc.ndarray([(1, 2), [3, 4]]), words=("mixes",)),
        C(oc.RuntimeDataError, lambda: oc.ndarray([[(1, 2)], [(3, 4), (5, 6)]]), words=("ragged",)),
        C(oc.RuntimeDataError, lambda: oc.ndarray([1.0, None]), words=("values[1]",)),
        C(oc.RuntimeDataError, lambda: oc.ndarray([1.0, "a"]), words=("values[1]",)),
        C(oc.RuntimeDataError, lambda: oc.ndarray([np.ones(2), np.ones(2)]), words=("np.stack",)),
        C(oc.RuntimeDataError, lambda: oc.ndarray({1, 2}), words=("set",)),
        C(oc.RuntimeDataError, lambda: oc.ndarray({"a": 1}), words=("dict",)),
        C(oc.RuntimeDataError, lambda: oc.ndarray(range(3)), words=("range",)),
        C(oc.RuntimeDataError, lambda: oc.ndarray(oc.batch([[1.0], [2.0, 3.0]])), words=("ragged",)),
        C(oc.RuntimeDataError, lambda: oc.ndarray([oc.batch([1.0]), [2.0]]), words=("mixes",)),
        C(oc.ShapeError, lambda: oc.ndarray([1.0, 2.0], batch_axes=-1), words=("batch_axes",)),
        C(oc.ShapeError, lambda: oc.ndarray([1.0, 2.0], input_axes=-2), words=("input_axes",)),
        C(oc.ShapeError, lambda: oc.ndarray([1.0, 2.0], batch_axes=1.5), words=("1.5",)),
        C(oc.ShapeError, lambda: oc.ndarray([1.0, 2.0], batch_axes="1"), words=("str",)),
        C(oc.ShapeError, lambda: oc.ndarray([1.0, 2.0], batch_axes=True), words=("bool",)),
        C(oc.ShapeError, lambda: oc.ndarray([1.0, 2.0], batch_axes=3), words=("exceed",)),
        C(oc.ShapeError, lambda: oc.ndarray(np.ones(2), batch_axes=1, input_axes=1)),
        C(oc.ShapeError, lambda: oc.ndarray([(1.0, 2.0)], input_axes=1), words=("tuples",)),
        C(oc.ShapeError, lambda: oc.ndarray(oc.batch([[1.0]]), batch_axes=1), words=("batch(",)),
        C(oc.ShapeError, lambda: oc.ndarray(3.0, batch_axes=1), words=("exceed",)),
        C(oc.ArgumentError, lambda: oc.ndarray([1.0], label=3), words=("label",)),
        C(oc.ArgumentError, lambda: oc.ndarray([1.0], label=""), words=("label",)),
        C(oc.ArgumentError, lambda: oc.ndarray([1.0], grad_spec="maybe"), words=("grad_spec",)),
        C(oc.ArgumentError, lambda: oc.ndarray([1.0], grad_spec=None), words=("grad_spec",)),
    ],
    "number": [
        C(oc.RuntimeDataError, lambda: oc.number(None), words=("None",)),
        C(oc.RuntimeDataError, lambda: oc.number("1.0"), words=("str",)),
        C(oc.RuntimeDataError, lambda: oc.number(1j), words=("complex",)),
        C(oc.RuntimeDataError, lambda: oc.number([1.0]), words=("list",)),
        C(oc.RuntimeDataError, lambda: oc.number(np.array([1.0])), words=("ndarray",)),
        C(oc.RuntimeDataError, lambda: oc.number(object()), words=("object",)),
        C(oc.RuntimeDataError, lambda: oc.number(x), words=("Tensor",)),
        C(oc.ArgumentError, lambda: oc.number(1.0, label=5), words=("label",)),
        C(oc.RuntimeDataError, lambda: ("é → ü", oc.number(None)), at="oc.number"),
    ],
    "param/term": [
        C(oc.ArgumentError, lambda: oc.param(None), words=("name",)),
        C(oc.ArgumentError, lambda: oc.param(3), words=("name",)),
        C(oc.ArgumentError, lambda: oc.param(""), words=("name",)),
        C(oc.ShapeError, lambda: oc.param("p", output_dims=[2.5]), words=("2.5",)),
        C(oc.ShapeError, lambda: oc.param("p", output_dims=[-1]), words=("-1",)),
        C(oc.ShapeError, lambda: oc.param("p", output_dims=3), words=("output_dims",)),
        C(oc.ShapeError, lambda: oc.param("p", output_dims="3"), words=("output_dims",)),
        C(oc.ShapeError, lambda: oc.param("p", input_dims=[None]), words=("input_dims",)),
        C(oc.ShapeError, lambda: oc.param("p", batch_dims=[True]), words=("batch_dims",)),
        C(oc.ShapeError, lambda: oc.param("p", output_dims=[(2.0, "a")]), words=("output_dims",)),
        C(oc.ShapeError, lambda: oc.param("p", output_dims=[2**70 * 0.5]), words=("float",)),
        C(oc.ArgumentError, lambda: oc.param("p", grad_spec="x"), words=("grad_spec",)),
        C(oc.ArgumentError, lambda: oc.param("p", init="abc"), words=("init",)),
        C(oc.ArgumentError, lambda: oc.param("p", init=object()), words=("init",)),
        C(oc.RuntimeDataError, lambda: oc.param("p", init=[[1, 2], [3]]), words=("ragged",)),
        C(oc.RuntimeDataError, lambda: oc.param("p", init=1j), words=("complex",)),
        C(oc.RuntimeDataError, lambda: oc.param("p", init=np.array(["a"])), words=("dtype",)),
        C(oc.RuntimeDataError, lambda: oc.param("p", init=[1.0, None]), words=("init[1]",)),
        C(oc.ArgumentError, lambda: oc.term(None), words=("name",)),
        C(oc.ShapeError, lambda: oc.term("t", output_dims=[1.5]), words=("1.5",)),
        C(oc.ShapeError, lambda: oc.term("t", input_dims=-1), words=("input_dims",)),
        C(oc.ShapeError, lambda: oc.term("t", batch_dims=[-2]), words=("-2",)),
        C(oc.ArgumentError, lambda: oc.term("t", grad_spec="yes"), words=("grad_spec",)),
        C(oc.ArgumentError, lambda: oc.node(5), words=("name",)),
        C(oc.ShapeError, lambda: oc.node("n", output_dims=[0.5]), words=("0.5",)),
        C(oc.ShapeError, lambda: oc.range(2.5), words=("2.5",)),
        C(oc.ShapeError, lambda: oc.range(-1), words=("-1",)),
        C(oc.ShapeError, lambda: oc.range("3"), words=("str",)),
        C(oc.ArgumentError, lambda: oc.range(3, label=1), words=("label",)),
        C(oc.ArgumentError, lambda: oc.set_seed("a"), words=("seed",)),
        C(oc.ArgumentError, lambda: oc.set_seed(1.5), words=("seed",)),
    ],
    "einsum/einsum_max/concat": [
        C(oc.SpecError, lambda: oc.einsum(123, x), words=("str", "123")),
        C(oc.SpecError, lambda: oc.einsum(None, x), words=("None",)),
        C(oc.SpecError, lambda: oc.einsum(b"i=>i", x), words=("bytes",)),
        C(oc.SpecError, lambda: oc.einsum(["i=>i"], x), words=("list",)),
        C(oc.SpecError, lambda: oc.einsum("i=>i)", x), words=("column",)),
        C(oc.ArgumentError, lambda: oc.einsum("i=>i", "x"), words=("operand 1",)),
        C(oc.ArgumentError, lambda: oc.einsum("i=>i", None), words=("operand 1",)),
        C(oc.ArgumentError, lambda: oc.einsum("i;i=>i", x, object()), words=("operand 2",)),
        C(oc.ShapeError, lambda: oc.einsum("i;i=>i", x), words=("2 operand",)),
        C(oc.ShapeError, lambda: oc.einsum("i=>i", x, x), words=("1 operand",)),
        C(oc.ShapeError, lambda: oc.einsum("i=>i"), words=("got 0",)),
        C(oc.RuntimeDataError, lambda: oc.einsum("i=>i", [1.0, None]), words=("values[1]",)),
        C(oc.SpecError, lambda: oc.einsum_max(123, x), words=("einsum_max",)),
        C(oc.SpecError, lambda: oc.einsum_max("i=>", x) + oc.einsum_max(1.5, x), at="oc.einsum_max(1.5"),
        C(oc.ArgumentError, lambda: oc.einsum_max("i=>", "x"), words=("operand 1",)),
        C(oc.ShapeError, lambda: oc.einsum_max("i;i=>i", x), words=("2 operand",)),
        C(oc.ShapeError, lambda: oc.einsum_max("i=>", x, x), words=("1 operand",)),
        C(oc.SpecError, lambda: oc.concat(5, x), words=("concat",)),
        C(oc.ShapeError, lambda: oc.concat("a;b=>a^b", x), words=("2 operand",)),
        C(oc.ArgumentError, lambda: oc.concat("a;b=>a^b", x, "y"), words=("operand 2",)),
    ],
    "operators": [
        C(oc.ArgumentError, lambda: x + "a", words=("str",)),
        C(oc.ArgumentError, lambda: "a" + x, words=("str",)),
        C(oc.ArgumentError, lambda: x * None, words=("NoneType",)),
        C(oc.ArgumentError, lambda: None * x, words=("NoneType",)),
        C(oc.ArgumentError, lambda: x - object(), words=("object",)),
        C(oc.ArgumentError, lambda: x / {1: 2}, words=("dict",)),
        C(oc.ArgumentError, lambda: x ** "2", words=("str",)),
        C(oc.ArgumentError, lambda: x @ "a", words=("str",)),
        C(oc.ArgumentError, lambda: x + 1j, words=("complex",)),
        C(oc.ArgumentError, lambda: x < "a", words=("str",)),
        C(oc.ArgumentError, lambda: -x + (x + "a"), at="x + \"a\""),
        C(oc.RuntimeDataError, lambda: x + [1.0, "a"], words=("values[1]",)),
        C(oc.RuntimeDataError, lambda: x * np.array([1j, 2j]), words=("imaginary",)),
        C(oc.ArgumentError, lambda: oc.relu("a"), words=("str",)),
        C(oc.ArgumentError, lambda: oc.exp(None), words=("NoneType",)),
        C(oc.ArgumentError, lambda: oc.log(object()), words=("object",)),
        C(oc.ArgumentError, lambda: oc.where(x, "a", x), words=("str",)),
        C(oc.ArgumentError, lambda: oc.transpose(None), words=("NoneType",)),
        C(oc.ArgumentError, lambda: oc.stop_gradient("s"), words=("str",)),
        C(oc.ArgumentError, lambda: oc.sqrt(1j), words=("complex",)),
        C(oc.ArgumentError, lambda: bool(x), words=("truth value",)),
    ],
    "static_index/routines": [
        C(oc.ArgumentError, lambda: oc.static_index(3), words=("identifier",)),
        C(oc.ArgumentError, lambda: oc.static_index("not an id"), words=("identifier",)),
        C(oc.ArgumentError, lambda: oc.static_index(None), words=("identifier",)),
        C(oc.ArgumentError, lambda: x.batch_slice(3), words=("static_index",)),
        C(oc.ArgumentError, lambda: x.batch_slice("b"), words=("static_index",)),
        C(oc.ArgumentError, lambda: oc.batch_slice(x, None), words=("static_index",)),
        C(oc.ArgumentError, lambda: routine()(b=1.7), words=("'b'", "int")),
        C(oc.ArgumentError, lambda: routine()(b="1"), words=("'b'", "int")),
        C(oc.ArgumentError, lambda: routine()(b=2**63), words=("64-bit",)),
        C(oc.ArgumentError, lambda: routine()(b=-(2**63) - 1), words=("64-bit",)),
        C(oc.ArgumentError, lambda: routine()(b=None), words=("'b'",)),
        C(oc.ArgumentError, lambda: routine()(b=True), words=("bool",)),
        C(oc.ArgumentError, lambda: routine()(b=np.float64(1.0)), words=("float64",)),
        C(oc.ArgumentError, lambda: routine()(), words=("needs static argument 'b'",)),
        C(oc.ArgumentError, lambda: routine()(c=1), words=("'b'",)),
        C(oc.ArgumentError, lambda: routine()(1, 2), words=("['b']",)),
        C(oc.ArgumentError, lambda: routine()(1, b=2), words=("['b']",)),
    ],
    "Context/get/set/compile": [
        C(oc.ArgumentError, lambda: oc.Context(precision="float8"), words=("float8",)),
        C(oc.ArgumentError, lambda: oc.Context(precision=None), words=("precision",)),
        C(oc.ArgumentError, lambda: oc.Context(backend=3), words=("backend",)),
        C(oc.BackendError, lambda: oc.Context(backend="tpu"), words=("tpu",)),
        C(oc.ArgumentError, lambda: ctx.get(np.ones(3)), words=("ndarray",)),
        C(oc.ArgumentError, lambda: ctx.get(None), words=("NoneType",)),
        C(oc.ArgumentError, lambda: ctx.get("x"), words=("str",)),
        C(oc.RuntimeDataError, lambda: ctx.get(w_unused), words=("no value",)),
        C(oc.ArgumentError, lambda: ctx.set(np.ones(3), 1.0), words=("ndarray",)),
        C(oc.RuntimeDataError, lambda: ctx.set(t, None), words=("None",)),
        C(oc.RuntimeDataError, lambda: ctx.set(t, [1j, 2.0]), words=("complex",)),
        C(oc.RuntimeDataError, lambda: ctx.set(t, np.array([1j, 2.0])), words=("imaginary",)),
        C(oc.RuntimeDataError, lambda: ctx.set(t, np.array(["a", "b"])), words=("dtype",)),
        C(oc.RuntimeDataError, lambda: ctx.set(t, [[1.0, 2.0], [3.0]]), words=("ragged",)),
        C(oc.RuntimeDataError, lambda: ctx.set(t, np.ones(5)), words=("(2,)", "(5,)")),
        C(oc.RuntimeDataError, lambda: ctx.set(t, "ab"), words=("str",)),
        C(oc.ArgumentError, lambda: ctx.compile(3), words=("int",)),
        C(oc.ArgumentError, lambda: ctx.compile("code"), words=("str",)),
        C(oc.ArgumentError, lambda: ctx.compile(None), words=("NoneType",)),
        C(oc.ArgumentError, lambda: ctx.compile([x.forward, 3]), words=("int",)),
        C(oc.ArgumentError, lambda: ctx.compile(x.forward, name=3), words=("name",)),
    ],
    "eval/value_and_grad/render": [
        C(oc.ArgumentError, lambda: oc.eval(np.ones(3)), words=("ndarray",)),
        C(oc.ArgumentError, lambda: oc.eval(None), words=("NoneType",)),
        C(oc.ArgumentError, lambda: oc.eval(x.forward), words=("Code",)),
        C(oc.ArgumentError, lambda: oc.eval(x, precision="half"), words=("half",)),
        C(oc.ArgumentError, lambda: oc.eval(x, backend=None), words=("backend",)),
        C(oc.ArgumentError, lambda: oc.value_and_grad(loss, "w"), words=("wrt",)),
        C(oc.ArgumentError, lambda: oc.value_and_grad(loss, [w, "x"]), words=("wrt[1]",)),
        C(oc.ArgumentError, lambda: oc.value_and_grad(loss, None), words=("wrt",)),
        C(oc.ArgumentError, lambda: oc.value_and_grad("loss", [w]), words=("loss",)),
        C(oc.ArgumentError, lambda: oc.value_and_grad(x, [w]), words=("not differentiable",)),
        C(oc.ArgumentError, lambda: oc.value_and_grad(loss, [x]), words=("wrt[0] 'x'",)),
        C(oc.ArgumentError, lambda: oc.value_and_grad(loss, [w], precision="f16")),
        C(oc.ArgumentError, lambda: oc.render(3), words=("int",)),
        C(oc.BackendError, lambda: oc.render(x.forward, backend="tpu"), words=("tpu",)),
        C(oc.ArgumentError, lambda: oc.render(x.forward, precision="float8"), words=("float8",)),
        C(oc.ArgumentError, lambda: oc.infer_shapes(x, "y"), words=("tensors[1]",)),
        C(oc.ArgumentError, lambda: oc.grad_update("loss"), words=("loss",)),
        C(oc.ArgumentError, lambda: oc.grad_update(x), words=("not differentiable",)),
        C(oc.ArgumentError, lambda: oc.sgd_update(loss, learning_rate="a"), words=("learning_rate",)),
        C(oc.ArgumentError, lambda: oc.sgd_update(loss, learning_rate=0.1, momentum=-1.0)),
        C(oc.ArgumentError, lambda: oc.sgd_update(loss, learning_rate=0.1, weight_decay=None)),
        C(oc.ArgumentError, lambda: oc.sgd_update(loss, learning_rate=0.1, nesterov="yes")),
        C(oc.ArgumentError, lambda: oc.sgd_update(None, learning_rate=0.1), words=("loss",)),
    ],
    "@op/@cd bodies": [
        C(oc.SpecError, lambda: op_bad_spec(x), line="MARK:op-spec", at="oc.einsum(123"),
        C(oc.ArgumentError, lambda: op_str_operand(x), line="MARK:op-str", at="{w_op2"),
        C(oc.ShapeError, lambda: op_bad_dims(x), line="MARK:op-dims", at="[2.5]"),
        C(oc.RuntimeDataError, lambda: op_ragged(x), line="MARK:op-ragged", at="oc.ndarray("),
        C(oc.DslSyntaxError, lambda: _mean_op(x), line="MARK:cd-mean", at="mean",
          words=("sum, prod, max, min",)),
        C(oc.DslSyntaxError, lambda: oc.unary_op(cd_average, None)(x), line="MARK:cd-average",
          at="average", words=("reducers",)),
        C(oc.RuntimeDataError, lambda: cd_bad_set(t), line="MARK:cd-number", at="oc.number"),
    ],
    "unary_op/binary_op": [
        C(oc.ArgumentError, lambda: oc.unary_op(3, None), words=("op_asn",)),
        C(oc.ArgumentError, lambda: oc.unary_op(_copy, 3), words=("grad_asn",)),
        C(oc.ArgumentError, lambda: oc.unary_op(_copy, None, logic=3), words=("logic",)),
        C(oc.SpecError, lambda: oc.unary_op(_copy, None, logic="i=>i)"), words=("column",)),
        C(oc.ArgumentError, lambda: oc.unary_op(_copy, None, name=5), words=("name",)),
        C(oc.ArgumentError, lambda: oc.binary_op(None, None), words=("op_asn",)),
        C(oc.ArgumentError, lambda: oc.binary_op(_add2, None)(x), words=("takes 2",)),
        C(oc.ArgumentError, lambda: oc.unary_op(_copy, None)(x, x), words=("takes 1",)),
        C(oc.ArgumentError, lambda: oc.unary_op(_copy, None)(a=x), words=("keyword",)),
        C(oc.ArgumentError, lambda: oc.unary_op(_copy, None)("a"), words=("str",)),
        C(oc.ArgumentError, lambda: oc.unary_op(_not_slots, None)(x), words=("foo",)),
        C(oc.ArgumentError, lambda: oc.binary_op(_add2, None)(x, None), words=("NoneType",)),
    ],
}

_PARAMS = [pytest.param(case, id=f"{group}-{i}") for group, cases in CASES.items()
           for i, case in enumerate(cases)]


def test_the_corpus_is_large() -> None:
    assert len(_PARAMS) >= 120


@pytest.mark.parametrize("case", _PARAMS)
def test_bad_input(case: C) -> None:
    with pytest.raises(oc.OcannlError) as info:
        case.fn()
    err = info.value
    assert type(err) is case.cls, (type(err).__name__, str(err))
    line, col = case.where()
    span = err.span
    assert span is not None, str(err)
    assert (span.file, span.line, span.col) == (HERE, line, col), str(err)
    assert f"{HERE}:{line}:{col + 1}:" in str(err)
    for word in case.words:
        assert word in str(err), (word, str(err))


# ---- good input keeps working (values against NumPy) ---------------------------------------


def test_value_and_grad_accepts_a_bare_tensor() -> None:
    xs = np.array([1.5, -2.0, 3.0])
    wb = oc.param("wb", output_dims=[3], init=np.array([0.5, 1.0, -1.0]))
    lossb = oc.einsum("i;i=>", wb, oc.ndarray(xs))
    value, grads = oc.value_and_grad(lossb, wb)
    assert isinstance(grads, list) and len(grads) == 1
    np.testing.assert_allclose(value, np.dot([0.5, 1.0, -1.0], xs), rtol=1e-6)
    np.testing.assert_allclose(grads[0], xs, rtol=1e-6)


@pytest.mark.parametrize(("values", "kwargs", "expected"), [
    (np.array([True, False]), {}, np.array([1.0, 0.0])),
    (np.array([[1, 2], [3, 4]], dtype=np.int64), {}, np.array([[1.0, 2.0], [3.0, 4.0]])),
    (np.float32(2.5), {}, np.array(2.5)),
    ([(1, 2), (3, 4)], {}, np.array([[1.0, 2.0], [3.0, 4.0]])),
    ([[1, 2], [3, 4]], {"batch_axes": 1}, np.array([[1.0, 2.0], [3.0, 4.0]])),
    ([True, 2, 3.5, np.int8(4)], {}, np.array([1.0, 2.0, 3.5, 4.0])),
])
def test_good_literals_still_evaluate(values: Any, kwargs: dict[str, Any],
                                      expected: np.ndarray) -> None:
    out = oc.eval(oc.ndarray(values, **kwargs) * 1.0)
    np.testing.assert_allclose(out.reshape(expected.shape), expected)


def test_good_dims_and_static_arguments() -> None:
    p = oc.param("pd", output_dims=[np.int64(2), (3, "c")], init=1.0)
    assert p.shape.output == (2, 3)
    r = routine()
    for args, kwargs, row in [((), {"b": np.int64(3)}, 3), ((), {"b": np.int32(2)}, 2),
                              ((1,), {}, 1)]:
        r(*args, **kwargs)
        np.testing.assert_allclose(ctx.get(_SLICE), np.arange(8.0).reshape(4, 2)[row])
