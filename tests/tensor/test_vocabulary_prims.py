"""The primitives and accumulators the shared vocabulary added end to end (rewriter ->
builders -> loop IR -> C): sat01, exp2, log2, recip_sqrt, sat01_gate, or_, and_, and the
accumulators =||, =&&, =?/, =?^; plus: what decorates also builds.

Oracles: NumPy forward values (float32 and float64), float64 central finite differences for
the gradients (the `check` helper of test_custom_ops).
"""

from __future__ import annotations

import numpy as np
import pytest
from test_custom_ops import check

import ocannl_ast as oc
from ocannl_ast import vocabulary
from ocannl_ast.rewrite import contract

X = np.array([-1.5, -0.25, 0.0, 0.3, 0.75, 1.0, 1.8, 2.5])
POS = np.array([0.2, 0.5, 1.0, 3.0, 8.0])


@oc.cd
def _sat01(v, v1, projections):
    v[...] = sat01(v1)  # noqa: F821


@oc.cd
def _sat01_grad(g, g1, v1, projections):
    g1 += sat01_gate(v1, g)  # noqa: F821


@oc.cd
def _exp2(v, v1, projections):
    v[...] = exp2(v1)  # noqa: F821


@oc.cd
def _exp2_grad(v, g, g1, projections):
    g1 += g * v * 0.6931471805599453


@oc.cd
def _log2(v, v1, projections):
    v[...] = log2(v1)  # noqa: F821


@oc.cd
def _log2_grad(g, g1, v1, projections):
    g1 += g / (v1 * 0.6931471805599453)


@oc.cd
def _rsqrt(v, v1, projections):
    v[...] = recip_sqrt(v1)  # noqa: F821


@oc.cd
def _rsqrt_grad(v, g, g1, projections):
    g1 += g * v * v * v * -0.5


@pytest.mark.parametrize(("op", "grad", "data", "np_fn"), [
    (_sat01, _sat01_grad, np.array([-1.5, -0.25, 0.3, 0.75, 1.8, 2.5]),
     lambda x: np.clip(x, 0.0, 1.0)),
    (_exp2, _exp2_grad, X, np.exp2),
    (_log2, _log2_grad, POS, np.log2),
    (_rsqrt, _rsqrt_grad, POS, lambda x: 1.0 / np.sqrt(x)),
], ids=["sat01", "exp2", "log2", "recip_sqrt"])
def test_unary_primitive_values_and_gradients(op, grad, data, np_fn) -> None:
    check(oc.unary_op(op, grad), [data], np_fn)


@pytest.mark.parametrize("precision", ["float32", "float64"])
@pytest.mark.parametrize(("op", "data", "np_fn"), [
    (_sat01, np.array([-2.0, 0.0, 0.5, 1.0, 3.0, np.nan]),
     lambda x: np.clip(x, 0.0, 1.0)),
    (_exp2, np.array([-3.0, 0.0, 0.5, 10.0]), np.exp2),
    (_log2, np.array([0.0, 0.125, 1.0, 1024.0, -1.0]), np.log2),
    (_rsqrt, np.array([0.0, 0.25, 4.0, -1.0]), lambda x: 1.0 / np.sqrt(x)),
], ids=["sat01", "exp2", "log2", "recip_sqrt"])
def test_unary_primitive_edge_values(op, data, np_fn, precision: str) -> None:
    # edges: NaN through sat01, log2(0) = -inf, log2/rsqrt of a negative = NaN, 1/sqrt(0) = inf
    with np.errstate(all="ignore"):
        want = np_fn(data.astype(precision))
    got = oc.eval(oc.unary_op(op, None)(oc.ndarray(data)), precision=precision)
    np.testing.assert_allclose(got, want, rtol=1e-6)


@oc.cd
def _gate(v, v1, v2, projections):
    v[...] = sat01_gate(v1, v2)  # noqa: F821


@oc.cd
def _or(v, v1, v2, projections):
    v[...] = or_(v1, v2)  # noqa: F821


@oc.cd
def _and(v, v1, v2, projections):
    v[...] = and_(v1, v2)  # noqa: F821


A = np.array([-0.5, 0.0, 0.0, 0.25, 0.999, 1.0, 2.0, np.nan])
B = np.array([3.0, 0.0, -1.0, 0.0, 7.0, 5.0, 0.0, 0.0])


@pytest.mark.parametrize("precision", ["float32", "float64"])
@pytest.mark.parametrize(("op", "np_fn"), [
    (_gate, lambda a, b: np.where((a > 0) & (a < 1), b, 0.0)),
    (_or, lambda a, b: ((a != 0) | (b != 0)).astype(float)),
    (_and, lambda a, b: ((a != 0) & (b != 0)).astype(float)),
], ids=["sat01_gate", "or_", "and_"])
def test_binary_primitives(op, np_fn, precision: str) -> None:
    got = oc.eval(oc.binary_op(op, None)(oc.ndarray(A), oc.ndarray(B)), precision=precision)
    np.testing.assert_array_equal(got, np_fn(A, B).astype(precision))


def _accumulate(body, rows: np.ndarray, precision: str) -> np.ndarray:
    op = oc.unary_op(body, None, logic="ij=>i")
    return np.asarray(oc.eval(op(oc.ndarray(rows)), precision=precision))


ROWS = np.array([[0.0, 0.0, 0.0], [0.0, 2.0, 0.0], [1.0, 1.0, -3.0], [np.nan, 0.0, 0.0]])


@oc.cd
def _any(v, v1, projections):
    accum(v, "=:||", v1)  # noqa: F821


@oc.cd
def _all(v, v1, projections):
    accum(v, "=:&&", v1)  # noqa: F821


@pytest.mark.parametrize("precision", ["float32", "float64"])
def test_logical_accumulators_reduce_like_any_and_all(precision: str) -> None:
    np.testing.assert_array_equal(_accumulate(_any, ROWS, precision),
                                  (ROWS != 0).any(axis=1).astype(precision))
    np.testing.assert_array_equal(_accumulate(_all, ROWS, precision),
                                  (ROWS != 0).all(axis=1).astype(precision))


@oc.cd
def _relu_gate_acc(v, v1, projections):
    accum(v, "=:?/", v1)  # noqa: F821


@oc.cd
def _sat01_gate_acc(v, v1, projections):
    accum(v, "=:?^", v1)  # noqa: F821


def _fold(gate, neutral: float, rows: np.ndarray) -> np.ndarray:
    out = []
    for row in rows:
        acc = neutral
        for x in row:
            acc = gate(acc, x)
        out.append(acc)
    return np.array(out)


GATE_ROWS = np.array([[2.0, -1.0, 3.0], [0.5, 0.25, 4.0], [0.7, 0.2, 0.9], [-1.0, 5.0, 6.0]])


def test_gate_accumulators_fold_from_ocannl_neutral_elements() -> None:
    # OCANNL neutral elements: relu_gate 1, sat01_gate 0.5; acc := gate(acc, x) in order
    relu_g = _fold(lambda a, b: b if a > 0 else 0.0, 1.0, GATE_ROWS)
    sat_g = _fold(lambda a, b: b if 0 < a < 1 else 0.0, 0.5, GATE_ROWS)
    np.testing.assert_array_equal(_accumulate(_relu_gate_acc, GATE_ROWS, "float64"), relu_g)
    np.testing.assert_array_equal(_accumulate(_sat01_gate_acc, GATE_ROWS, "float64"), sat_g)


def test_every_vocabulary_primitive_builds_and_every_accumulator_lowers() -> None:
    from ocannl_ast.backends.c_syntax import OPS as _OPS
    from ocannl_ast.tensor.builders import ACCUM_OPS, PRIMS

    assert set(contract.UNARY_PRIMS | contract.BINARY_PRIMS | contract.TERNARY_PRIMS) == \
        set(PRIMS)
    assert contract.ACCUM_OPS == set(ACCUM_OPS)
    for op in vocabulary.PRIMS.values():
        assert op in _OPS or op is vocabulary.UnOp.IDENTITY or op.name.startswith("ARG")
    for acc, _ in vocabulary.ACCUM_OPS.values():
        assert acc in vocabulary.NEUTRAL and acc in _OPS
    assert "mod_" in PRIMS and "threefry4x32" in PRIMS  # mod_ is np.mod (issue 23 item 8)


@pytest.mark.parametrize("src", [
    'accum(v, "=^^^^", a)',
    'accum(v, "=%", a)',
])
def test_what_builders_cannot_build_is_rejected_at_decoration(src: str) -> None:
    ns: dict[str, object] = {"oc": oc}
    code = f"@oc.cd\ndef f(v, a, b):\n    {src}\n"
    path = _write(code)
    with pytest.raises(oc.DslSyntaxError) as info:
        exec(compile(code, path, "exec"), ns)
    span = info.value.span
    assert span is not None and span.file == path and span.line == 3
    assert span.col >= 4  # points into the offending statement, not at the def


def _write(code: str) -> str:
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(code)
    return f.name


@oc.cd
def _div_reduce(v, v1, projections):
    accum(v, "=:/", v1)  # noqa: F821


@oc.cd
def _sub_reduce(v, v1, projections):
    accum(v, "=:-", v1)  # noqa: F821


@oc.cd
def _pow_reduce(v, v1, projections):
    accum(v, "=:**", v1)  # noqa: F821


NZ_ROWS = np.array([[2.0, 4.0, 0.5], [1.0, -2.0, 8.0]])


@pytest.mark.parametrize(("body", "gate", "neutral"), [
    (_div_reduce, lambda a, b: a / b, 1.0),
    (_sub_reduce, lambda a, b: a - b, 0.0),
    (_pow_reduce, lambda a, b: a ** b, 1.0),
], ids=["=:/", "=:-", "=:**"])
def test_non_plain_accumulators_start_from_their_neutral_element(body, gate, neutral) -> None:
    # regression: a local accumulator (reduction) or a pointwise read-modify-write of "=:/"
    # once started from the uninitialized cell instead of the neutral element
    want = _fold(gate, neutral, NZ_ROWS)
    np.testing.assert_allclose(_accumulate(body, NZ_ROWS, "float64"), want, rtol=1e-12)
    pointwise = oc.unary_op(body, None)(oc.ndarray(NZ_ROWS))
    np.testing.assert_allclose(oc.eval(pointwise, precision="float64"),
                               gate(neutral, NZ_ROWS), rtol=1e-12)
