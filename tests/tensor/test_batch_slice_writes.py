"""Issue 21 item 2: a write through `x.batch_slice(i)` must never silently change only a
private copy. Batch slices are read-only: such a write is a located DslSyntaxError, and
reading through a slice still gives the parent's row."""

from __future__ import annotations

import numpy as np
import pytest

import ocannl_ast as oc

X0 = np.arange(6, dtype=np.float32).reshape(3, 2)


def _sliced() -> tuple[oc.Tensor, oc.Tensor]:
    x = oc.param("x", init=X0, batch_dims=[3], output_dims=[2])
    return x, x.batch_slice(oc.static_index("i"))


def test_set_through_a_slice_is_a_located_error() -> None:
    x, s = _sliced()

    @oc.cd
    def write(s):
        s[...] = 5.0

    with pytest.raises(oc.DslSyntaxError) as err:
        write(s)
    msg = str(err.value)
    assert "test_batch_slice_writes.py" in msg and "s[...] = 5.0" in msg
    assert "read-only" in msg and "'x'" in msg


def test_accumulate_through_a_slice_is_a_located_error() -> None:
    x, s = _sliced()

    @oc.cd
    def bump(s):
        s += 1.0

    with pytest.raises(oc.DslSyntaxError, match="batch slice of 'x'"):
        bump(s)


def test_reading_through_a_slice_still_works_and_trains_the_parent() -> None:
    x, s = _sliced()
    loss = oc.einsum("i=>", s * s)
    ctx = oc.Context()
    step = ctx.compile([oc.grad_update(loss), oc.sgd_update(loss, learning_rate=0.25)])
    step(i=1)
    want = X0.copy()
    want[1] -= 0.25 * 2 * X0[1]
    np.testing.assert_allclose(ctx.get(x), want, rtol=1e-6)
