"""`oc.eval(loss)` after training in a context of one's own evaluates the default context,
whose params get fresh initial values: it warns at the user's line, naming the params and
how to read the trained model (issue 20 item 7); no warning when nothing else holds them."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import ocannl_ast as oc


def _model() -> tuple[oc.Tensor, oc.Tensor]:
    x = oc.ndarray(np.array([[1.0, 2.0], [3.0, -1.0]]), batch_axes=1)
    w = oc.param("w", output_dims=[1], init=np.array([[0.5, -0.25]]))
    loss = oc.einsum("b|o=>o", (w @ x) * (w @ x))
    return w, loss


def _trained() -> tuple[oc.Tensor, oc.Tensor, oc.Context]:
    w, loss = _model()
    ctx = oc.Context()
    step = ctx.compile([oc.grad_update(loss), oc.sgd_update(loss, learning_rate=0.05)])
    for _ in range(3):
        step()
    return w, loss, ctx


def test_eval_after_training_elsewhere_warns_at_the_callers_line() -> None:
    _, loss, ctx = _trained()
    trained = ctx.eval(loss)
    with pytest.warns(UserWarning, match=r"'w(_\d+)?'.*ctx=") as record:
        fresh = oc.eval(loss)
    assert record[0].filename == __file__
    assert not np.allclose(trained, fresh)  # the default context's w is the initial one


def test_value_and_grad_after_training_elsewhere_warns() -> None:
    w, loss, _ = _trained()
    with pytest.warns(UserWarning, match="value_and_grad"):
        oc.value_and_grad(loss, w)


def test_no_warning_when_no_other_context_holds_the_params() -> None:
    _, loss = _model()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        oc.eval(loss)
        oc.eval(loss)  # initialized in the default context now: still nothing to say
