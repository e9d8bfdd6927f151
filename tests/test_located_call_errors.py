"""Errors of calls that used to raise without the caller's file:line (issue 20 item 8): a
routine run with a static argument out of range (`step(batch=-1)`), `oc.eval(...,
precision=)` conflicting with the context's, and `oc.testing.check_grads` on non-numeric
input. Each is an oc.OcannlError located at this file's calling line."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import ocannl_ast as oc
from ocannl_ast.testing import check_grads

_b = oc.static_index("batch")
_rows = oc.ndarray(np.arange(8.0).reshape(4, 2), batch_axes=1, label="rows")
_slice = _rows.batch_slice(_b)


def _located(cls: type[oc.OcannlError], fn: Callable[[], Any], *words: str) -> None:
    line = inspect.getsourcelines(fn)[1]
    with pytest.raises(cls) as info:
        fn()
    err = info.value
    assert isinstance(err, oc.OcannlError)
    assert err.span is not None and err.span.file == __file__, str(err)
    assert err.span.line == line, (err.span.line, line)
    msg = str(err)
    assert f"{Path(__file__).name}:{line}" in msg, msg
    for w in words:
        assert w in msg, msg


@pytest.mark.parametrize("value", [-1, 4, 1000])
def test_static_argument_out_of_range_is_located(value: int) -> None:
    ctx = oc.Context()
    step = ctx.compile(_slice.forward)
    step(batch=2)  # in range: runs
    np.testing.assert_array_equal(ctx.get(_slice), [4.0, 5.0])
    _located(oc.RuntimeDataError, lambda: step(batch=value), "must lie in [0, 4)")
    _located(oc.RuntimeDataError, lambda: step(value), "must lie in [0, 4)")
    # the first call of a fresh routine (checked path) too
    step2 = oc.Context().compile(_slice.forward)
    _located(oc.RuntimeDataError, lambda: step2(batch=value), "must lie in [0, 4)")


def test_a_misspelled_static_argument_is_named_with_a_suggestion() -> None:
    step = oc.Context().compile(_slice.forward)
    _located(oc.ArgumentError, lambda: step(bacth=1), "needs static argument 'batch'",
             "unknown keyword argument(s) ['bacth']", "did you mean batch=1?")
    _located(oc.ArgumentError, lambda: step(rows=1), "unknown keyword argument(s) ['rows']")


def test_eval_precision_conflicting_with_the_context_is_located() -> None:
    ctx = oc.Context()  # float32
    t = oc.ndarray([1.0, 2.0]) * 2.0
    _located(oc.ArgumentError, lambda: oc.eval(t, ctx=ctx, precision="float64"),
             "precision='float64'", "'float32'")
    np.testing.assert_array_equal(oc.eval(t, ctx=ctx, precision="float32"), [2.0, 4.0])


def _sq(x: oc.Tensor) -> oc.Tensor:
    return oc.einsum("i;i=>", x, x)


@pytest.mark.parametrize("bad", [np.array(["a", "b"]), ["a", "b"], [[1.0], [2.0, 3.0]],
                                 np.array([object()]), "ab", None, {"x": 1.0}],
                         ids=["str-array", "str-list", "ragged", "object", "str", "none",
                              "dict"])
def test_check_grads_on_non_numeric_input_is_located(bad: Any) -> None:
    _located(oc.ArgumentError, lambda: check_grads(_sq, [bad]),
             "inputs[0] must be a finite numeric")


def test_check_grads_still_accepts_numbers() -> None:
    check_grads(_sq, [np.array([1.0, -2.0])])
    check_grads(_sq, [[0.5, 1.5]])
    check_grads(_sq, [np.float32(2.0)])


@oc.cd
def _record(hist, v, step):
    hist.batch_slice(step)[...] = v


def test_an_out_of_range_index_is_named_among_several() -> None:
    """Two static indices (a data batch, a history row): the failure named the first check
    (every check returned code 1) whichever index was out of range."""
    data = oc.ndarray(np.ones((2, 4, 3)), batch_axes=2, label="data")
    batch, step = oc.static_index("batch"), oc.static_index("step")
    hist = oc.node("hist", batch_dims=[5], output_dims=[1])
    tot = oc.einsum("b|i=>0", data.batch_slice(batch))
    run = oc.Context().compile([tot.forward, _record(hist, tot, step)])
    run(batch=1, step=4)
    _located(oc.RuntimeDataError, lambda: run(batch=1, step=5), "s_step must lie in [0, 5)")
    _located(oc.RuntimeDataError, lambda: run(batch=2, step=0), "s_batch must lie in [0, 2)")


def test_batch_slice_of_a_tensor_without_batch_axes_says_so() -> None:
    v = oc.ndarray(np.arange(3.0), label="plain")
    _located(oc.ShapeError, lambda: v.batch_slice(_b), "'plain' has no batch axes",
             "batch_axes=1")


def test_einsum_given_a_list_of_tensors_says_to_pass_them_themselves() -> None:
    a = oc.ndarray(np.ones((2, 3)))
    _located(oc.ArgumentError, lambda: oc.einsum("ij=>i", [a]), "is a list of tensors",
             "einsum(spec, *tensors)")


def test_a_rank_mismatch_in_multi_character_mode_names_the_label_read_as_one_axis() -> None:
    a = oc.ndarray(np.ones((2, 3)))
    _located(oc.ShapeError, lambda: oc.einsum("ij=>0,0", a), "'ij' is one axis",
             "write 'i,j' for 2 axes")


def test_einsum_max_with_three_tensors_says_it_takes_one_or_two() -> None:
    a = oc.ndarray(np.ones(3))
    _located(oc.ArgumentError, lambda: oc.einsum_max("i;i;i=>i", a, a, a),
             "einsum_max takes one or two tensors", "got 3")


@pytest.mark.parametrize("update", ["sgd", "adam"])
def test_an_update_without_grad_update_says_how_gradients_are_computed(update: str) -> None:
    """A plausible mistake (user-side check): the update compiled without
    oc.grad_update(loss); the error names the gradients and how they are computed."""
    rng = np.random.default_rng(0)
    loss = oc.nn.mse(oc.nn.linear(1)(oc.ndarray(rng.normal(size=(4, 3)), batch_axes=1)),
                     oc.ndarray(rng.normal(size=(4, 1)), batch_axes=1))
    code = (oc.sgd_update(loss, learning_rate=0.1) if update == "sgd"
            else oc.adam_update(loss, learning_rate=0.1))
    step = oc.Context().compile(code)
    with pytest.raises(oc.RuntimeDataError, match=r"'w_grad'.*computed by "
                                                  r"oc.grad_update\(loss\)") as e:
        step()
    assert "test_located_call_errors.py" in str(e.value)


def test_eval_and_value_and_grad_of_a_batch_slice_say_how_to_pass_the_index() -> None:
    rng = np.random.default_rng(0)
    xs = oc.ndarray(rng.normal(size=(2, 4, 3)), batch_axes=2)
    ys = oc.ndarray(rng.normal(size=(2, 4, 1)), batch_axes=2)
    bi = oc.static_index("batch")
    loss = oc.nn.mse(oc.nn.linear(1)(xs.batch_slice(bi)), ys.batch_slice(bi))
    ctx = oc.Context()
    for fn, call in (("eval", lambda: ctx.eval(loss)),
                     ("value_and_grad", lambda: oc.value_and_grad(loss, loss.params(), ctx=ctx))):
        with pytest.raises(oc.ArgumentError, match=rf"{fn} runs code reading the static index "
                                                   r"'batch'.*ctx.compile\(t.forward\)\(batch=0\)"):
            call()
    ctx.compile(loss.forward)(batch=1)
    assert np.isfinite(ctx.get(loss)).all()
