"""Coalesced loop nests of the C backend (`backends.c_coalesce`), from the user's side: a
nest stepping through rows of contiguous cells is written as one loop, one that does not
(a transpose, a broadcast along the inner axis, a counter read as a number) keeps its
loops, and every program gives the same bits with the coalescing on and off, and matches
NumPy."""

# Tensor arithmetic operators are installed at import time; mypy cannot see them.
# mypy: disable-error-code="operator, arg-type"

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import ocannl_ast as oc
from ocannl_ast.backends import c_coalesce

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed")

Outputs = tuple[list[np.ndarray], str]  # values and the rendered C of the routine


@pytest.fixture(autouse=True)
def _private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OCANNL_AST_CACHE", str(tmp_path / "cache"))


def _loops(src: str) -> list[int]:
    """The extents of the loops of the rendered routine's functions, in order."""
    return [int(n) for n in re.findall(r"for \(int64_t \w+ = 0; \w+ < (\d+);", src)]


def pointwise() -> Outputs:
    """``a * b + 1`` over a 3x4x5 block: one loop of 60."""
    rng = np.random.default_rng(31)
    a, b = rng.normal(size=(3, 4, 5)), rng.normal(size=(3, 4, 5))
    t = oc.ndarray(a.astype(np.float32)) * oc.ndarray(b.astype(np.float32)) + 1.0
    return [oc.Context().eval(t)], oc.render(t.forward)


def broadcast() -> Outputs:
    """``x + bias`` over 6x7x8 with bias along the last axis: the two outer loops as one
    (the bias does not move along them), the inner one kept (only it moves the bias)."""
    rng = np.random.default_rng(34)
    x, bias = rng.normal(size=(6, 7, 8)), rng.normal(size=8)
    t = oc.ndarray(x.astype(np.float32)) + oc.ndarray(bias.astype(np.float32))
    return [oc.Context().eval(t)], oc.render(t.forward)


def transpose() -> Outputs:
    """``y[j, i] = x[i, j]``: the offsets step differently, no coalescing."""
    x = np.random.default_rng(35).normal(size=(5, 9)).astype(np.float32)
    t = oc.einsum("i,j=>j,i", oc.ndarray(x))
    return [oc.Context().eval(t)], oc.render(t.forward)


def mlp_step() -> Outputs:
    """Three Adam steps of a 2-layer tanh MLP (reductions, broadcasts, updates)."""
    rng = np.random.default_rng(32)
    xs = rng.normal(size=(3, 16, 6)).astype(np.float32)
    w1 = oc.param("co_w1", output_dims=[12], input_dims=[6],
                  init=rng.uniform(-1, 1, (12, 6)).astype(np.float32))
    b1 = oc.param("co_b1", output_dims=[12], init=rng.uniform(-1, 1, 12).astype(np.float32))
    w2 = oc.param("co_w2", output_dims=[1], input_dims=[12],
                  init=rng.uniform(-1, 1, (1, 12)).astype(np.float32))
    b = oc.static_index("batch")
    h = oc.tanh(w1 @ oc.ndarray(xs, batch_axes=2).batch_slice(b) + b1)
    out = w2 @ h
    loss = oc.einsum("b|o=>o", out * out) * (1.0 / 16)
    ctx = oc.Context()
    step = ctx.compile([oc.grad_update(loss), oc.adam_update(loss, learning_rate=0.01)])
    for i in range(3):
        step(batch=i)
    src = Path(step.compiled.source_path).read_text()  # type: ignore[attr-defined]
    return [ctx.get(p) for p in (w1, b1, w2)] + [ctx.get(loss)], src


def conv() -> Outputs:
    """A small padded conv2d and its gradients (padding margins, windows, reductions)."""
    rng = np.random.default_rng(33)
    x = oc.param("co_img", output_dims=[3], init=rng.normal(size=(3,)).astype(np.float32))
    img = oc.ndarray(rng.normal(size=(2, 6, 6, 3)).astype(np.float32), batch_axes=1) * x
    y = oc.nn.conv2d(4, 3, padding="same")(img)
    loss = oc.einsum("b|h,w,o=>", y * y)
    oc.infer_shapes(loss)
    kernel, bias = [p for p in y.params() if p is not x]
    ctx = oc.Context()
    ctx.set(kernel, rng.normal(size=kernel.dims()).astype(np.float32))
    ctx.set(bias, rng.normal(size=bias.dims()).astype(np.float32))
    code = oc.grad_update(loss)
    src = oc.render(code)
    ctx.compile(code)()
    return [ctx.get(y), ctx.get(loss), ctx.get(kernel.grad), ctx.get(bias.grad),
            ctx.get(x.grad)], src


PROGRAMS: dict[str, Callable[[], Outputs]] = {
    "pointwise": pointwise, "broadcast": broadcast, "transpose": transpose,
    "mlp_step": mlp_step, "conv": conv,
}


def test_contiguous_nest_is_one_loop() -> None:
    _, src = pointwise()
    assert 60 in _loops(src) and not {3, 4, 5} & set(_loops(src))
    # the cells in order: the one offset is the counter itself
    assert re.search(r"\[(\w+)\] = .*\[\1\]", src)


def test_broadcast_keeps_the_moving_axis() -> None:
    _, src = broadcast()
    loops = _loops(src)
    assert 42 in loops and 8 in loops and 6 not in loops and 7 not in loops


def test_transpose_keeps_its_loops() -> None:
    _, src = transpose()
    assert sorted(_loops(src)) == [5, 9]


def test_counters_read_as_numbers_keep_their_loops() -> None:
    """`range_over_offsets` computes each cell from its loop counters: no coalescing there,
    and the values are the cells' offsets."""
    t = oc.range_over_offsets(output_dims=[3, 4, 5])
    src = oc.render(t.forward)
    assert sorted(_loops(src)) == [3, 4, 5]
    np.testing.assert_array_equal(oc.Context().eval(t),
                                  np.arange(60, dtype=np.float32).reshape(3, 4, 5))


def test_pointwise_and_broadcast_values() -> None:
    rng = np.random.default_rng(7)
    x, bias = rng.normal(size=(6, 7, 8)).astype(np.float32), rng.normal(size=8).astype(np.float32)
    got = oc.Context().eval(oc.ndarray(x) * 2.0 + oc.ndarray(bias))
    np.testing.assert_array_equal(got, x * np.float32(2.0) + bias)
    y = rng.normal(size=(5, 9)).astype(np.float32)
    np.testing.assert_array_equal(oc.Context().eval(oc.einsum("i,j=>j,i", oc.ndarray(y))), y.T)


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_same_bits_with_coalescing_on_and_off(name: str,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(c_coalesce, "ENABLED", False)
    old, old_src = PROGRAMS[name]()
    monkeypatch.setattr(c_coalesce, "ENABLED", True)
    new, new_src = PROGRAMS[name]()
    assert [np.ascontiguousarray(v).tobytes() for v in old] == \
        [np.ascontiguousarray(v).tobytes() for v in new]
    if name != "transpose":
        assert len(_loops(new_src)) < len(_loops(old_src))


def test_reordered_reduction_loops_coalesce() -> None:
    """The hoisted reduction of a bias gradient (`c_reorder`) runs its batch loops as
    one: ``for b*h*w: for o: red[o] += g[..]``."""
    _, src = conv()
    hoisted = [m for m in re.finditer(r"hoisted outside its (\d+) output cells", src)]
    assert hoisted
    assert "for (int64_t" in src and 72 in _loops(src)
