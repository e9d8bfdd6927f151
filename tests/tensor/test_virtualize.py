"""Virtualization (`lowering/virtualize.py`): intermediates read once are computed inline,
number constants are folded. Values are bit-identical with OCANNL_AST_VIRTUALIZE=0, the
rendered routine has fewer buffers, and a tensor the user reads stays readable."""

# mypy: disable-error-code="operator"

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

import ocannl_ast as oc


@pytest.fixture(params=["1", "0"])
def mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv("OCANNL_AST_VIRTUALIZE", request.param)
    yield request.param


def _set_mode(monkeypatch: pytest.MonkeyPatch, on: bool) -> None:
    monkeypatch.setenv("OCANNL_AST_VIRTUALIZE", "1" if on else "0")


def _n_buffers(src: str) -> int:
    """The distinct buffers the routine's parts take (`bufs[i]` in its entry point)."""
    return len(set(re.findall(r"bufs\[(\d+)\]", src)))


def _moons(batch: int = 20, n: int = 100, seed: int = 0
           ) -> tuple[list[Any], list[oc.Tensor], dict[str, Any]]:
    rng = np.random.default_rng(seed)
    nb = n // batch
    xs = rng.uniform(-1, 1, (nb, batch, 2))
    ys = np.sign(rng.uniform(-1, 1, (nb, batch, 1)))
    x_all = oc.ndarray(xs, batch_axes=2)
    y_all = oc.ndarray(ys, batch_axes=2)
    b = oc.static_index("batch")
    shapes = [(16, 2), (16,), (16, 16), (16,), (1, 16), (1,)]
    inits = [rng.uniform(-1, 1, s) for s in shapes]
    params = [oc.param(f"w{k}", output_dims=list(s[:1]), input_dims=list(s[1:]) or None,
                       init=v) for k, (s, v) in enumerate(zip(shapes, inits, strict=True))]
    w1, b1, w2, b2, w3, b3 = params
    pre1 = w1 @ x_all.batch_slice(b) + b1
    h1 = oc.relu(pre1)
    h2 = oc.relu(w2 @ h1 + b2)
    out = w3 @ h2 + b3
    margin = oc.relu(1.0 - y_all.batch_slice(b) * out)
    loss = oc.einsum("b|o=>o", margin) * (1.0 / batch)
    code = [oc.grad_update(loss), oc.sgd_update(loss, learning_rate=0.05, momentum=0.9)]
    return code, params, {"loss": loss, "pre1": pre1, "margin": margin, "h1": h1,
                          "x": xs, "y": ys, "inits": inits}


def _train(monkeypatch: pytest.MonkeyPatch, on: bool, precision: str, steps: int = 7
           ) -> tuple[list[np.ndarray], oc.Routine]:
    _set_mode(monkeypatch, on)
    code, params, named = _moons()
    ctx = oc.Context(precision=precision)
    step = ctx.compile(code)
    for i in range(steps):
        step(i % 5)
    return [ctx.get(p) for p in params] + [ctx.get(named["loss"])], step


@pytest.mark.parametrize("precision", ["float32", "float64"])
def test_moons_training_is_bit_identical_with_virtualization_off(
        monkeypatch: pytest.MonkeyPatch, precision: str) -> None:
    on, r_on = _train(monkeypatch, True, precision)
    off, r_off = _train(monkeypatch, False, precision)
    for a, b in zip(on, off, strict=True):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    assert len(r_on.prog.buffers) < len(r_off.prog.buffers)


def test_moons_step_renders_fewer_buffers(monkeypatch: pytest.MonkeyPatch) -> None:
    code, _, _ = _moons()
    on = oc.render(code)
    _set_mode(monkeypatch, False)
    code, _, _ = _moons()
    off = oc.render(code)
    assert "/* virtual:" in on and "/* constant:" in on and "fused into the reduction" in on
    assert "virtual:" not in off and "constant:" not in off
    # (SGD's update makes no intermediates of its own since it reads the gradient and the
    # momentum in place: what is left to virtualize is the model's and its gradients')
    assert _n_buffers(off) >= 40 and _n_buffers(on) <= _n_buffers(off) - 8


def test_moons_matches_numpy_reference() -> None:
    """The virtualized step's loss against the same MLP written in NumPy."""
    code, _, named = _moons(batch=10, n=20, seed=3)
    ctx = oc.Context(precision="float64")
    step = ctx.compile(code)
    w1, b1, w2, b2, w3, b3 = named["inits"]
    step(1)
    x, y = named["x"], named["y"]
    h1 = np.maximum(x[1] @ w1.T + b1, 0)
    h2 = np.maximum(h1 @ w2.T + b2, 0)
    out = h2 @ w3.T + b3
    ref = np.maximum(1.0 - y[1] * out, 0).sum() / 10
    assert float(ctx.get(named["loss"]).reshape(-1)[0]) == pytest.approx(ref, rel=1e-12)


def _unheld_step(ctx: oc.Context) -> tuple[oc.Routine, oc.Tensor]:
    """A training step whose intermediates only the graph references (nothing held)."""
    code, _, named = _moons()
    loss = named["loss"]
    del named
    return ctx.compile(code), loss


def _margin(loss: oc.Tensor) -> oc.Tensor:
    """relu(1 - y * out): the only relu of one output axis."""
    return next(t for t in loss.subgraph() if t.label == "relu" and t.dims() == (20, 1))


def test_get_of_an_unheld_inlined_intermediate_errors_then_is_kept(
        monkeypatch: pytest.MonkeyPatch) -> None:
    ctx = oc.Context(precision="float64")
    step, loss = _unheld_step(ctx)
    step(0)
    margin = _margin(loss)  # read once, by the loss's sum: virtualized
    with pytest.raises(oc.RuntimeDataError, match="computed inline"):
        ctx.get(margin)
    before = step.prog
    step(1)  # recompiled, keeping it
    assert step.prog is not before
    got = ctx.get(margin)
    _set_mode(monkeypatch, False)
    ref_ctx = oc.Context(precision="float64")
    ref_step, ref_loss = _unheld_step(ref_ctx)
    ref_step(0)
    ref_step(1)
    assert np.array_equal(got, ref_ctx.get(_margin(ref_loss)))


def test_user_held_intermediates_stay_readable(monkeypatch: pytest.MonkeyPatch) -> None:
    got = []
    for on in (True, False):
        _set_mode(monkeypatch, on)
        code, _, named = _moons()
        margin, pre1 = named["margin"], named["pre1"]  # held: locals of this frame
        ctx = oc.Context()
        step = ctx.compile(code)
        step(0)
        step(3)
        got.append([ctx.get(margin), ctx.get(pre1), ctx.get(pre1.grad), ctx.get(margin.grad)])
    for a, b in zip(*got, strict=True):
        assert np.array_equal(a, b)


def test_keep_materializes_from_the_first_run(mode: str) -> None:
    code, _, named = _moons()
    ctx = oc.Context(precision="float64")
    step = ctx.compile(code, keep=[named["margin"], named["pre1"].grad])
    step(0)
    assert ctx.get(named["margin"]).shape == (20, 1)
    assert ctx.get(named["pre1"].grad).shape == (20, 16)


def test_kept_values_equal_unvirtualized(monkeypatch: pytest.MonkeyPatch) -> None:
    vals = []
    for on in (True, False):
        _set_mode(monkeypatch, on)
        code, _, named = _moons()
        ctx = oc.Context()
        step = ctx.compile(code, keep=[named["margin"], named["pre1"].grad])
        step(2)
        vals.append((ctx.get(named["margin"]), ctx.get(named["pre1"].grad)))
    assert all(np.array_equal(a, b) for a, b in zip(*vals, strict=True))


def test_separate_forward_and_backward_routines(mode: str) -> None:
    """A routine reading what another computes keeps it materialized there."""
    x = oc.ndarray(np.linspace(-2, 2, 6).reshape(2, 3), batch_axes=1, label="x")
    w = oc.param("w", input_dims=[3], output_dims=[4], init=np.arange(12.0).reshape(4, 3) / 7)
    h = oc.tanh(w @ x + 0.5)
    loss = oc.einsum("b|o=>", h * h)
    ctx = oc.Context(precision="float64")
    fwd = ctx.compile(loss.forward)
    bwd = ctx.compile(loss.backprop)
    fwd()
    bwd()
    xv = np.linspace(-2, 2, 6).reshape(2, 3)
    wv = np.arange(12.0).reshape(4, 3) / 7
    hv = np.tanh(np.einsum("oi,bi->bo", wv, xv) + 0.5)
    gw = np.einsum("bo,bi->oi", 2 * hv * (1 - hv ** 2), xv)
    np.testing.assert_allclose(ctx.get(loss), (hv * hv).sum(), rtol=1e-12)
    np.testing.assert_allclose(ctx.get(w.grad), gw, rtol=1e-12)


def test_eval_and_value_and_grad_of_intermediates(mode: str) -> None:
    x = oc.ndarray(np.array([0.5, -1.5, 2.0]), label="x")
    w = oc.param("w", input_dims=[3], output_dims=[2], init=np.array([[1., 2, 3], [-1, 0, 2]]))
    pre = w @ x
    act = oc.relu(pre - 1.0)
    loss = oc.einsum("i=>", act * act)
    ctx = oc.Context(precision="float64")
    value, (g_pre, g_w) = oc.value_and_grad(loss, [pre, w], ctx=ctx)
    pv = np.array([[1., 2, 3], [-1, 0, 2]]) @ np.array([0.5, -1.5, 2.0])
    av = np.maximum(pv - 1.0, 0)
    np.testing.assert_allclose(value, (av * av).sum(), rtol=1e-12)
    np.testing.assert_allclose(g_pre, 2 * av * (pv - 1.0 > 0), rtol=1e-12)
    np.testing.assert_allclose(oc.eval(act, ctx=ctx), av, rtol=1e-12)
    np.testing.assert_allclose(g_w, np.outer(2 * av, [0.5, -1.5, 2.0]), rtol=1e-12)


def test_set_of_a_folded_constant_is_refused() -> None:
    x = oc.ndarray(np.array([1.0, 2.0]), label="x")
    c = oc.number(3.0)
    y = x * c + 1.0
    ctx = oc.Context(precision="float64")
    r = ctx.compile(y.forward)
    r()
    np.testing.assert_array_equal(ctx.get(y), [4.0, 7.0])
    with pytest.raises(oc.RuntimeDataError, match="constant folded"):
        ctx.set(c, np.array([5.0]))


def test_a_constant_set_before_compiling_is_not_folded() -> None:
    x = oc.ndarray(np.array([1.0, 2.0]), label="x")
    c = oc.number(3.0)
    y = x * c
    ctx = oc.Context(precision="float64")
    ctx.set(c, np.array([5.0]))
    r = ctx.compile(y.forward)
    r()
    np.testing.assert_array_equal(ctx.get(y), [5.0, 10.0])


def _twice(t: oc.Tensor) -> oc.Tensor:
    return t * t + t


CASES: dict[str, Callable[[oc.Tensor, oc.Tensor], oc.Tensor]] = {
    "chain": lambda a, b: oc.exp(oc.tanh(a * b + 1.0) - 0.5),
    "broadcast": lambda a, b: oc.relu(a + oc.einsum("ij=>j", b)) * 2.0,
    "bias_rows": lambda a, b: oc.relu(oc.einsum("ij;i=>ij", a, oc.einsum("ij=>i", b))) - a,
    "read_twice": lambda a, b: _twice(a - b),
    "reduction_of_pointwise": lambda a, b: oc.einsum("ij=>i", oc.sin(a) * b),
    "matmul_of_pointwise": lambda a, b: oc.einsum("ij;kj=>ik", oc.relu(a), b + 3.0),
    "max_pool_like": lambda a, b: oc.einsum_max("ij=>i", a * b - 1.0),
    "reduction_then_pointwise": lambda a, b: oc.tanh(oc.einsum("ij;ij=>i", a, b) + 1.0),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_sweep_values_and_grads_bit_identical(monkeypatch: pytest.MonkeyPatch,
                                              case: str) -> None:
    rng = np.random.default_rng(len(case))
    av, bv = rng.standard_normal((3, 4)), rng.standard_normal((3, 4))
    outs = []
    for on in (True, False):
        _set_mode(monkeypatch, on)
        a = oc.param("a", output_dims=[3, 4], init=av)
        b = oc.param("b", output_dims=[3, 4], init=bv)
        y = CASES[case](a, b)
        loss = _sum_all(y)
        ctx = oc.Context(precision="float64")
        r = ctx.compile([oc.grad_update(loss)])
        r()
        assert bool(r.virtual) == on  # the case exercises virtualization
        outs.append([ctx.get(loss), ctx.get(a.grad), ctx.get(b.grad)])
    for x, z in zip(*outs, strict=True):
        assert np.array_equal(x, z)


def _sum_all(y: oc.Tensor) -> oc.Tensor:
    oc.infer_shapes(y)
    n = len(y.dims())
    letters = "ijkl"[:n]
    return oc.einsum(f"{letters}=>", y * y)


def test_sweep_grads_against_finite_differences() -> None:
    rng = np.random.default_rng(5)
    av, bv = rng.standard_normal((3, 4)), rng.standard_normal((3, 4))
    for case, fn in sorted(CASES.items()):
        if case == "max_pool_like":
            continue  # ties make finite differences of a max unreliable
        oc.testing.check_grads(lambda a, b, fn=fn: _sum_all(fn(a, b)), [av, bv])


def test_backward_compiled_after_forward_ran_errors_then_recovers() -> None:
    xv = np.linspace(-2, 2, 6).reshape(2, 3)
    wv = np.arange(12.0).reshape(4, 3) / 7
    x = oc.ndarray(xv, batch_axes=1, label="x")
    w = oc.param("w", input_dims=[3], output_dims=[4], init=wv)
    loss = oc.einsum("b|o=>", oc.exp(oc.tanh(w @ x + 0.5)))
    ctx = oc.Context(precision="float64")
    fwd = ctx.compile(loss.forward)
    fwd()
    bwd = ctx.compile(loss.backprop)
    assert fwd.virtual & bwd.needs  # e.g. tanh's result, read by its derivative
    with pytest.raises(oc.RuntimeDataError, match="virtualized"):
        bwd()
    fwd()  # recompiled: keeps what bwd reads
    bwd()
    hv = np.tanh(np.einsum("oi,bi->bo", wv, xv) + 0.5)
    gw = np.einsum("bo,bi->oi", np.exp(hv) * (1 - hv ** 2), xv)
    np.testing.assert_allclose(ctx.get(w.grad), gw, rtol=1e-12)
    assert fwd.virtual.isdisjoint(bwd.needs)
