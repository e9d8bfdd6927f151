"""Concatenation specs in `@cd` logic strings (seed 004): a slice read into a whole
output, a partial update of one slice that leaves the rest untouched, and `oc.render` of
a concatenation and of its gradient pinned by golden files."""

from __future__ import annotations

import numpy as np
from golden_util import assert_golden

import ocannl_ast as oc


@oc.cd
def _slice_and_place(head, buf, x, y):
    head[...] = sum(x, logic="a^3=>a")
    accum(buf, "=+", y, logic="b=>1^b^2")


def test_cd_slice_and_partial_update() -> None:
    ctx = oc.Context()
    x = oc.ndarray([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    y = oc.ndarray([10.0, 20.0])
    head = oc.node("head", output_dims=[3])
    buf = oc.node("buf", output_dims=[5])
    routine = ctx.compile(_slice_and_place(head, buf, x, y))
    ctx.set(buf, np.array([1.0, 1.0, 1.0, 1.0, 1.0], dtype=np.float32))
    routine()
    np.testing.assert_allclose(ctx.get(head), [1.0, 2.0, 3.0])
    # only the middle slice is updated; the gaps keep their values
    np.testing.assert_allclose(ctx.get(buf), [1.0, 11.0, 21.0, 1.0, 1.0])


def test_render_concat_and_its_gradient() -> None:
    a = oc.param("a", output_dims=[2], init=np.array([1.0, 2.0]))
    b = oc.param("b", output_dims=[3], init=np.array([3.0, 4.0, 5.0]))
    c = oc.concat("a;b=>a^b", a, b)
    w = oc.ndarray([1.0, 2.0, 3.0, 4.0, 5.0])
    loss = oc.einsum("i;i=>", c, w)
    assert_golden("concat_forward.c", oc.render(c.forward))
    assert_golden("concat_backprop.c", oc.render(loss.backprop))
    _, grads = oc.value_and_grad(loss, [a, b])
    np.testing.assert_allclose(grads[0], [1.0, 2.0])
    np.testing.assert_allclose(grads[1], [3.0, 4.0, 5.0])
