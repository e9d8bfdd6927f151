"""Issue 21 item 1: an einsum whose spec puts labels left of a row variable, applied to an
operand whose row is still open (a pointwise result, a layer output), waits for closing
instead of inventing a size-1 axis: the result does not depend on whether the operand is a
leaf or a computed tensor."""

from __future__ import annotations

import numpy as np
import pytest

import ocannl_ast as oc


def _ops(x: oc.Tensor) -> list[oc.Tensor]:
    return [x, x * 1.0, oc.relu(x), x + 0.0]


def test_issue_example_leaf_and_pointwise_agree() -> None:
    data = np.ones((3, 4, 2), np.float32)
    want = data.sum(axis=0)
    got_leaf = oc.eval(oc.einsum("h, ..c.. => ..c..", oc.ndarray(data)))
    got_mul = oc.eval(oc.einsum("h, ..c.. => ..c..", oc.ndarray(data) * 2.0))
    np.testing.assert_allclose(got_leaf, want)
    np.testing.assert_allclose(got_mul, 2.0 * want)
    assert got_mul.shape == (4, 2)


@pytest.mark.parametrize("spec,axes", [
    ("h, ..c.. => ..c..", (0,)),
    ("h, w, ..c.. => ..c..", (0, 1)),
    ("h, ..c.. => h", None),
    ("h, ..c.., z => h, z", None),
])
def test_labels_left_of_row_var_on_computed_operands(spec: str, axes: tuple[int, ...] | None
                                                     ) -> None:
    rng = np.random.default_rng(3)
    data = rng.standard_normal((3, 4, 2, 5)).astype(np.float32)
    if axes is not None:
        want = data.sum(axis=axes)
    elif spec == "h, ..c.. => h":
        want = data.sum(axis=(1, 2, 3))
    else:
        want = data.sum(axis=(1, 2))
    for t in _ops(oc.ndarray(data)):
        got = oc.eval(oc.einsum(spec, t))
        ref = np.maximum(data, 0) if t.label == "relu" else data
        if t.label == "relu":
            ref_want = (ref.sum(axis=axes) if axes is not None
                        else ref.sum(axis=(1, 2, 3)) if spec == "h, ..c.. => h"
                        else ref.sum(axis=(1, 2)))
            np.testing.assert_allclose(got, ref_want, rtol=1e-5, atol=1e-5)
        else:
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_global_pool_of_relu_batched() -> None:
    """Batch norm's / global pooling's `h, w, ..c..` over a layer output."""
    rng = np.random.default_rng(0)
    data = rng.standard_normal((2, 5, 5, 3)).astype(np.float32)
    x = oc.ndarray(data, batch_axes=1)
    got = oc.eval(oc.einsum("..b..|h, w, ..c.. => ..b..|..c..", oc.relu(x)))
    np.testing.assert_allclose(got, np.maximum(data, 0).sum(axis=(1, 2)), rtol=1e-5)


@oc.op
def dense_compose(x):
    """The issue's dense head: OCANNL's compose contracts every output axis of x."""
    return {w} @ x + {b, o := [10]}  # noqa: F821


def _dense_head(pre: bool, with_loss: bool) -> tuple[oc.Tensor, oc.Tensor]:
    rng = np.random.default_rng(1)
    x = oc.ndarray(rng.random((8, 4, 4, 16)).astype(np.float32), batch_axes=1)
    if pre:
        x = oc.relu(x)
    labels = oc.ndarray(rng.integers(0, 10, (8,)).astype(np.float32), batch_axes=1)
    logits = dense_compose(x)
    loss = oc.nn.cross_entropy(logits, oc.nn.one_hot(labels, 10))
    return logits, (loss if with_loss else logits)


@pytest.mark.parametrize("pre", [False, True])
@pytest.mark.parametrize("with_loss", [False, True])
def test_dense_head_weights_have_no_phantom_axis(pre: bool, with_loss: bool) -> None:
    logits, root = _dense_head(pre, with_loss)
    oc.infer_shapes(root)
    assert str(logits.shape) == "8|10"
    (w,) = [p for p in root.params() if p.name.endswith("w")]
    assert str(w.shape) == "4,4,16->10"


def test_flatten_then_linear_head_under_cross_entropy() -> None:
    """The torch-style head: flatten, then a linear on the last axis."""
    logits_x = oc.ndarray(np.random.default_rng(1).random((8, 4, 4, 16)).astype(np.float32),
                          batch_axes=1)
    labels = oc.ndarray(np.arange(8.0) % 10, batch_axes=1)
    logits = oc.nn.linear(10)(oc.nn.flatten(oc.relu(logits_x)))
    loss = oc.nn.cross_entropy(logits, oc.nn.one_hot(labels, 10))
    oc.infer_shapes(loss)
    assert str(logits.shape) == "8|10"
    (w,) = [p for p in loss.params() if p.name.endswith("w")]
    assert str(w.shape) == "256->10"


def test_linear_one_keeps_its_axis_under_a_loss() -> None:
    rng = np.random.default_rng(2)
    x = oc.ndarray(rng.random((8, 3)).astype(np.float32), batch_axes=1)
    y = oc.ndarray(rng.random((8, 1)).astype(np.float32), batch_axes=1)
    pred = oc.nn.linear(1)(x)
    loss = oc.nn.mse(pred, y)
    oc.infer_shapes(loss)
    assert str(pred.shape) == "8|1"
    (w,) = [p for p in loss.params() if p.name.endswith("w")]
    assert str(w.shape) == "3->1"


def test_conv_net_dense_head_shapes_under_cross_entropy() -> None:
    """The issue's conv net: the dense head's weights are `4,4,16->10` with the loss."""
    rng = np.random.default_rng(0)
    img = oc.ndarray(rng.random((8, 16, 16, 1)).astype(np.float32), batch_axes=1)
    labels = oc.ndarray(rng.integers(0, 10, (8,)).astype(np.float32), batch_axes=1)
    h = oc.nn.max_pool2d(2)(oc.relu(oc.nn.conv2d(8, 3)(img)))
    h = oc.nn.max_pool2d(2)(oc.relu(oc.nn.conv2d(16, 3)(h)))
    logits = dense_compose(h)
    loss = oc.nn.cross_entropy(logits, oc.nn.one_hot(labels, 10))
    oc.infer_shapes(loss)
    assert str(logits.shape) == "8|10"
    shapes = {p.name.rsplit(".", 1)[-1]: str(p.shape) for p in loss.params()
              if p.name.startswith("dense_compose")}
    assert shapes == {"w": "4,4,16->10", "b": "10"}
    # the loss is the mean over the batch of -log softmax at the label: check by NumPy
    ctx = oc.Context()
    ctx.compile(loss.forward_all())()
    z = ctx.get(logits).astype(np.float64)
    lsm = z - z.max(axis=1, keepdims=True)
    lsm -= np.log(np.exp(lsm).sum(axis=1, keepdims=True))
    want = -lsm[np.arange(8), ctx.get(labels).astype(int)].mean()
    np.testing.assert_allclose(ctx.get(loss).reshape(()), want, rtol=1e-4)
