"""Python truthiness and the builtins max/min/abs on the symbolic values of op bodies (issue 23
item 2): slot references (`v1`, `g`, ...: NodeRef), primitive trees (`v1 > 0.0`,
`prim("lt", a, b)`: PrimCall), static indices and tensors have no truth value. `if`, `and`,
`or`, `not`, `while`, a conditional expression, or builtin `max`/`min` (which compare with
`<`) on them raise a located ArgumentError at the user's line naming the elementwise forms;
`abs` outside a dialect body too (inside one, `abs` is the elementwise `oc.abs`). Before, they were silently always true: `max(min(v1,
1.0), -1.0)` gave all ones and `if v1 > 0.0:` always took its first branch.

Each case is written both with `@oc.cd` and with plain `accum`/`prim`; the line each error
must point to carries a `# MARK:<name>` comment.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import ocannl_ast as oc
from ocannl_ast.tensor.builders import accum, prim

_HERE = os.path.abspath(__file__)
_X = np.array([-2.0, -0.5, 0.3, 3.0])
_Y = np.array([1.0, -1.0, 0.5, 4.0])


def _line(mark: str) -> int:
    with open(_HERE, encoding="utf-8") as f:
        hits = [k for k, text in enumerate(f, 1) if text.rstrip().endswith(f"# MARK:{mark}")]
    assert len(hits) == 1, (mark, hits)
    return hits[0]


def _raises_at(mark: str, fn: Callable[[], Any], *words: str) -> oc.ArgumentError:
    with pytest.raises(oc.ArgumentError) as info:
        fn()
    err = info.value
    line = _line(mark)
    assert err.span is not None, err
    assert os.path.abspath(err.span.file) == _HERE, err.span
    assert err.span.line == line, (err.span, line, str(err))
    assert f"{os.path.basename(_HERE)}:{line}:" in str(err), str(err)
    for w in words:
        assert w in str(err), (w, str(err))
    return err


def _unary(op_asn: Any, grad_asn: Any = None) -> Callable[[], Any]:
    """Build the op on a param, its forward code and (with a grad_asn) its backprop."""
    def run() -> Any:
        x = oc.param("x", output_dims=[4], init=_X.copy())
        y = oc.unary_op(op_asn, grad_asn)(x)
        return oc.eval(y) if grad_asn is None else y.backprop
    return run


def _binary(op_asn: Any) -> Callable[[], Any]:
    return lambda: oc.eval(oc.binary_op(op_asn, None)(oc.ndarray(_X), oc.ndarray(_Y)))


def _value(op_asn: Any) -> np.ndarray:
    return np.asarray(oc.eval(oc.unary_op(op_asn, None)(oc.ndarray(_X))))


_BRANCH = ("has no truth value", "`if`", "oc.where(cond, a, b)", "oc.relu")


# ---- @cd bodies -------------------------------------------------------------------------------

@oc.cd
def cd_clip(v, v1, projections):
    v[...] = max(min(v1, 1.0), -1.0)  # MARK:cd-clip


@oc.cd
def cd_max_nested(v, v1, v2, projections):
    v[...] = 2.0 * max(v1, v2)  # MARK:cd-max


@oc.cd
def cd_if(v, v1, projections):
    if v1 > 0.0:  # MARK:cd-if
        v[...] = v1
    else:
        v[...] = -v1


@oc.cd
def cd_and(v, v1, projections):
    v[...] = oc.lt(v1, 1.0) and oc.lt(-1.0, v1)  # MARK:cd-and


@oc.cd
def cd_or(v, v1, v2, projections):
    v[...] = v1 or v2  # MARK:cd-or


@oc.cd
def cd_not(v, v1, projections):
    v[...] = not v1  # MARK:cd-not


@oc.cd
def cd_ifexp(v, v1, projections):
    v[...] = v1 if v1 >= 0.0 else -v1  # MARK:cd-ifexp


@oc.cd
def cd_abs(v, v1, projections):
    v[...] = abs(v1)  # MARK:cd-abs


@oc.cd
def cd_copy(v, v1, projections):
    v[...] = v1


@oc.cd
def cd_grad_if(g, g1, v1, projections):
    if g:  # MARK:cd-grad-if
        g1 += g


@pytest.mark.parametrize(("mark", "run", "words"), [
    ("cd-clip", _unary(cd_clip), ("builtin min()", "oc.where(oc.lt(a, b), a, b)",
                                  'prim("min", a, b)')),
    ("cd-max", _binary(cd_max_nested), ("builtin max()", "oc.where(oc.lt(a, b), b, a)")),
    ("cd-if", _unary(cd_if), ("lt(0.0, v1)", *_BRANCH)),
    ("cd-and", _unary(cd_and), ("lt(v1, 1.0)", *_BRANCH)),
    ("cd-or", _binary(cd_or), ("slot 'v1'", *_BRANCH)),
    ("cd-not", _unary(cd_not), ("slot 'v1'", *_BRANCH)),
    ("cd-ifexp", _unary(cd_ifexp), ("le(0.0, v1)", *_BRANCH)),
    ("cd-grad-if", _unary(cd_copy, cd_grad_if), ("slot 'g'", *_BRANCH)),
])
def test_cd_body(mark: str, run: Callable[[], Any], words: tuple[str, ...]) -> None:
    _raises_at(mark, run, *words)


def test_cd_abs_is_the_elementwise_abs() -> None:
    # issue 23 item 8: in a dialect body `abs` of a tensor is oc.abs (elementwise)
    x = np.array([-2.0, -0.5, 0.0, 1.5])
    np.testing.assert_array_equal(oc.eval(oc.unary_op(cd_abs, None)(oc.ndarray(x))), np.abs(x))


# ---- plain accum / prim bodies ----------------------------------------------------------------

def p_clip(v, v1, projections):
    return accum(v, "=:", max(min(v1, 1.0), -1.0), projections=projections)  # MARK:p-clip


def p_if(v, v1, projections):
    if v1 > 0.0:  # MARK:p-if
        return accum(v, "=:", v1, projections=projections)
    return accum(v, "=:", prim("neg", v1), projections=projections)


def p_and(v, v1, projections):
    cond = prim("lt", v1, 1.0) and prim("lt", -1.0, v1)  # MARK:p-and
    return accum(v, "=:", cond, projections=projections)


def p_or(v, v1, v2, projections):
    return accum(v, "=:", prim("lt", v1, v2) or v2, projections=projections)  # MARK:p-or


def p_not(v, v1, projections):
    return accum(v, "=:", not v1, projections=projections)  # MARK:p-not


def p_while(v, v1, projections):
    n = 0
    while v1 < 1.0:  # MARK:p-while
        v1 = prim("add", v1, 1.0)
        n += 1
        if n == 3:  # without the error this loop never ends: stop it, the test then fails
            break
    return accum(v, "=:", v1, projections=projections)


def p_abs(v, v1, projections):
    return accum(v, "=:", abs(v1), projections=projections)  # MARK:p-abs


def p_abs_prim(v, v1, projections):
    return accum(v, "=:", abs(prim("neg", v1)), projections=projections)  # MARK:p-abs-prim


def p_copy(v, v1, projections):
    return accum(v, "=:", v1, projections=projections)


def p_grad_max(g, g1, v1, projections):
    return accum(g1, "=+", max(g, v1), projections=projections)  # MARK:p-grad-max


@pytest.mark.parametrize(("mark", "run", "words"), [
    ("p-clip", _unary(p_clip), ("builtin min()", "lt(1.0, v1)")),
    ("p-if", _unary(p_if), ("lt(0.0, v1)", *_BRANCH)),
    ("p-and", _unary(p_and), ("lt(v1, 1.0)", *_BRANCH)),
    ("p-or", _binary(p_or), ("lt(v1, v2)", *_BRANCH)),
    ("p-not", _unary(p_not), ("slot 'v1'", *_BRANCH)),
    ("p-while", _unary(p_while), ("lt(v1, 1.0)", *_BRANCH)),
    ("p-abs", _unary(p_abs), ("abs() of", "slot 'v1'")),
    ("p-abs-prim", _unary(p_abs_prim), ("abs() of", "neg(v1)")),
    ("p-grad-max", _unary(p_copy, p_grad_max), ("builtin max()", "lt(g, v1)")),
])
def test_plain_body(mark: str, run: Callable[[], Any], words: tuple[str, ...]) -> None:
    _raises_at(mark, run, *words)


# ---- static indices and tensors ---------------------------------------------------------------

def test_static_index_has_no_truth_value() -> None:
    b = oc.static_index("step")
    _raises_at("static-if", lambda: 1 if b else 0,  # MARK:static-if
               "static index 'step'", *_BRANCH)
    _raises_at("static-cmp", lambda: 1 if b > 2 else 0,  # MARK:static-cmp
               "has no truth value")
    _raises_at("static-abs", lambda: abs(b), "abs() of")  # MARK:static-abs


def test_tensor_abs_and_builtin_max() -> None:
    x = oc.param("x", output_dims=[4], init=_X.copy())
    _raises_at("tensor-abs", lambda: abs(x), "abs() of the tensor 'x'")  # MARK:tensor-abs
    _raises_at("tensor-max", lambda: max(x, 0.0),  # MARK:tensor-max
               "a Tensor has no truth value", "builtin max()")
    _raises_at("tensor-if", lambda: 1 if x else 0,  # MARK:tensor-if
               "a Tensor has no truth value", "oc.eval(t)", *_BRANCH)


# ---- what the messages suggest works --------------------------------------------------------

@oc.cd
def cd_clip_where(v, v1, projections):
    v[...] = oc.where(oc.lt(v1, -1.0), -1.0, oc.where(oc.lt(1.0, v1), 1.0, v1))


@oc.cd
def cd_max_prim(v, v1, projections):
    v[...] = max(v1, -v1)  # a whole right-hand side: the elementwise primitive


@oc.cd
def cd_min_prim(v, v1, projections):
    v[...] = min(v1, 1.0)


@oc.cd
def cd_abs_relu(v, v1, projections):
    v[...] = oc.relu(v1) + oc.relu(-v1)


def p_clip_prim(v, v1, projections):
    return accum(v, "=:", prim("max", prim("min", v1, 1.0), -1.0), projections=projections)


def p_abs_where(v, v1, projections):
    return accum(v, "=:", oc.where(oc.lt(v1, 0.0), -v1, v1), projections=projections)


def p_and_prim(v, v1, projections):
    return accum(v, "=:", prim("and_", prim("lt", v1, 1.0), prim("lt", -1.0, v1)),
                 projections=projections)


def p_optional_grad(g, g1, projections):
    # `is None` tests of a slot (a non-differentiable operand's g1) are identity, not truth
    if g1 is None:
        return None
    return accum(g1, "=+", g, projections=projections)


def test_suggested_forms_compute_elementwise() -> None:
    clip = np.clip(_X, -1.0, 1.0)
    np.testing.assert_allclose(_value(cd_clip_where), clip)
    np.testing.assert_allclose(_value(p_clip_prim), clip)
    np.testing.assert_allclose(_value(cd_max_prim), np.abs(_X))
    np.testing.assert_allclose(_value(cd_min_prim), np.minimum(_X, 1.0))
    np.testing.assert_allclose(_value(cd_abs_relu), np.abs(_X))
    np.testing.assert_allclose(_value(p_abs_where), np.abs(_X))
    np.testing.assert_allclose(_value(p_and_prim), ((_X < 1.0) & (_X > -1.0)).astype(float))


def test_is_none_on_slots_still_works() -> None:
    x = oc.param("x", output_dims=[4], init=_X.copy())
    y = oc.unary_op(p_copy, p_optional_grad)(x)
    loss = oc.einsum("i=>", y)
    _, (gx,) = oc.value_and_grad(loss, [x])
    np.testing.assert_allclose(gx, np.ones(4))
    c = oc.unary_op(p_copy, p_optional_grad)(oc.ndarray(_X))  # g1 is None: no gradient
    np.testing.assert_allclose(oc.eval(c), _X)
