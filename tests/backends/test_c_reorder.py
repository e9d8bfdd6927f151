"""Reductions hoisted outside their output loops (issue 12, lever 3: `backends.c_reorder`),
from the user's side: every program gives the same bits with the reordering on and off
(``OCANNL_AST_REORDER=0``) and under -O2 vs -O3 -march=native, its values match NumPy,
and the rendered C uses the new form where it should (the moons step's weight gradients)."""

# Tensor arithmetic operators are installed at import time; mypy cannot see them.
# mypy: disable-error-code="operator, arg-type"

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import ocannl_ast as oc
from ocannl_ast.backends import c_contraction

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed")

HOISTED = "hoisted outside its"
Outputs = tuple[list[np.ndarray], str]  # values and the rendered C of the routine


def _run(code: object, ctx: oc.Context, *, calls: int = 1, render: bool = True,
         **static: int) -> str:
    src = oc.render(code, precision=ctx.precision.value) if render else ""
    step = ctx.compile(code)
    for _ in range(calls):
        step(**static)
    return src


def moons(batch: int = 12, hidden: int = 8, precision: str = "float32") -> Outputs:
    """Three SGD-momentum steps of a 2-h-h-1 ReLU MLP (hinge loss), batch by index."""
    dt = np.float32 if precision == "float32" else np.float64
    rng = np.random.default_rng(11)
    xs = rng.normal(size=(3, batch, 2)).astype(dt)
    ys = np.sign(rng.normal(size=(3, batch, 1))).astype(dt)
    shapes = [(hidden, 2), (hidden,), (hidden, hidden), (hidden,), (1, hidden), (1,)]
    names = ["w1", "b1", "w2", "b2", "w3", "b3"]
    ps = [oc.param(f"ro_{k}", output_dims=[s[0]], input_dims=list(s[1:]) or None,
                   init=rng.uniform(-1, 1, s).astype(dt)) for k, s in zip(names, shapes,
                                                                           strict=True)]
    w1, b1, w2, b2, w3, b3 = ps
    b = oc.static_index("batch")
    h1 = oc.relu(w1 @ oc.ndarray(xs, batch_axes=2).batch_slice(b) + b1)
    h2 = oc.relu(w2 @ h1 + b2)
    out = w3 @ h2 + b3
    margin = oc.relu(1.0 - oc.ndarray(ys, batch_axes=2).batch_slice(b) * out)
    loss = oc.einsum("b|o=>o", margin) * (1.0 / batch)
    ctx = oc.Context(precision=precision)
    code = [oc.grad_update(loss), oc.sgd_update(loss, learning_rate=0.1, momentum=0.9)]
    src = ""
    for i in range(3):  # the same code each step: rendered once
        src = _run(code, ctx, batch=i, render=i == 2) or src
    return [ctx.get(p) for p in ps] + [ctx.get(loss)], src


def layer_norm() -> Outputs:
    rng = np.random.default_rng(12)
    x = oc.param("ro_ln_x", output_dims=[7], init=rng.normal(size=7).astype(np.float32))
    rows = oc.ndarray(rng.normal(size=(10, 7)).astype(np.float32), batch_axes=1) * x
    ln = oc.nn.layer_norm()
    y = ln(rows)
    loss = oc.einsum("b|o; o=>", y * y, oc.ndarray(rng.normal(size=7).astype(np.float32)))
    ctx = oc.Context()
    src = _run(oc.grad_update(loss), ctx)
    return [ctx.get(y), ctx.get(loss), ctx.get(x.grad)] + [ctx.get(p.grad) for p in
                                                              y.params() if p is not x], src


def softmax() -> Outputs:
    rng = np.random.default_rng(13)
    logits = oc.param("ro_sm", output_dims=[9], init=rng.normal(size=9).astype(np.float32))
    rows = oc.ndarray(rng.normal(size=(10, 9)).astype(np.float32), batch_axes=1) + logits
    p = oc.nn.softmax(rows)
    loss = oc.einsum("b|o; o=>", p, oc.ndarray(rng.normal(size=9).astype(np.float32)))
    ctx = oc.Context()
    src = _run(oc.grad_update(loss), ctx)
    return [ctx.get(p), ctx.get(loss), ctx.get(logits.grad)], src


def conv() -> Outputs:
    """A small padded conv2d (below the contraction kernel's threshold) and its gradients."""
    rng = np.random.default_rng(14)
    x = oc.param("ro_img", output_dims=[3], init=rng.normal(size=(3,)).astype(np.float32))
    img = oc.ndarray(rng.normal(size=(2, 6, 6, 3)).astype(np.float32), batch_axes=1) * x
    y = oc.nn.conv2d(4, 3, padding="same")(img)
    loss = oc.einsum("b|h,w,o=>", y * y)
    oc.infer_shapes(loss)
    kernel, bias = [p for p in y.params() if p is not x]
    ctx = oc.Context()
    ctx.set(kernel, rng.normal(size=kernel.dims()).astype(np.float32))
    ctx.set(bias, rng.normal(size=bias.dims()).astype(np.float32))
    src = _run(oc.grad_update(loss), ctx)
    return [ctx.get(y), ctx.get(loss), ctx.get(kernel.grad), ctx.get(bias.grad),
            ctx.get(x.grad)], src


def _max_data() -> np.ndarray:
    a = np.random.default_rng(15).normal(size=(40, 6, 5)).astype(np.float32)
    a[3, 2, 1] = np.nan  # max propagates NaN: the order of the comparisons shows
    a[:, 4, :] = -np.inf
    return a


def max_reduce() -> Outputs:
    """A max-reduction over the leading axis (the nest keeps a max accumulator)."""
    a = _max_data()
    y = oc.einsum_max("b,i,j=>i,j", oc.ndarray(a))
    ctx = oc.Context()
    src = oc.render(y.forward)
    return [ctx.eval(y)], src


def sum_with_bias() -> Outputs:
    """``c[i,j] = sum_b x[b,i] * y[b,j] + z[j]``: the store reads the accumulator and more."""
    rng = np.random.default_rng(16)
    x, y = rng.normal(size=(30, 5)), rng.normal(size=(30, 11))
    z = rng.normal(size=11)
    t = oc.einsum("b,i;b,j=>i,j", oc.ndarray(x.astype(np.float32)),
                  oc.ndarray(y.astype(np.float32))) + oc.ndarray(z.astype(np.float32))
    return [oc.Context().eval(t)], oc.render(t.forward)


PROGRAMS: dict[str, Callable[[], Outputs]] = {
    "moons": moons, "moons_f64": lambda: moons(precision="float64"),
    "moons_b200": lambda: moons(batch=200, hidden=8), "layer_norm": layer_norm,
    "softmax": softmax, "conv": conv, "max_reduce": max_reduce, "sum_with_bias": sum_with_bias,
}


def _bits(values: list[np.ndarray]) -> list[bytes]:
    return [np.ascontiguousarray(v).tobytes() for v in values]


@pytest.fixture(autouse=True)
def _private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OCANNL_AST_CACHE", str(tmp_path / "cache"))


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_same_bits_with_the_reordering_on_and_off(name: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # The scheduling passes unroll some of these small reductions before the C backend
    # sees them (tests/lowering/test_schedule_passes.py checks those bits): off here, so
    # that every program still exercises the reordering.
    monkeypatch.setenv("OCANNL_AST_SCHEDULE", "0")
    monkeypatch.setenv("OCANNL_AST_REORDER", "0")
    old, old_src = PROGRAMS[name]()
    monkeypatch.setenv("OCANNL_AST_REORDER", "1")
    new, new_src = PROGRAMS[name]()
    assert HOISTED not in old_src
    assert HOISTED in new_src  # every program here has a small reduction to hoist
    assert _bits(old) == _bits(new)


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_o2_and_o3_native_give_the_same_bits(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Everything but the contraction kernels (whose FMAs differ under -march=native):
    here every nest stays a loop nest."""
    monkeypatch.setattr(c_contraction, "MIN_WORK", 1 << 62)
    runs = []
    for flags in ("-O2", "-O3 -march=native", "-O3 -march=native -funroll-loops"):
        monkeypatch.setenv("OCANNL_AST_CFLAGS", flags)
        runs.append(_bits(PROGRAMS[name]()[0]))
    assert runs[0] == runs[1] == runs[2]


def test_moons_weight_gradients_use_the_hoisted_form() -> None:
    """At batch 200 the 16x2 and 1x16 weight gradients and the bias gradients (kernels below
    the contraction threshold) accumulate into a local array, the batch loop outermost."""
    _, src = moons(batch=200, hidden=16)
    for grad in ("ro_w1_grad", "ro_w3_grad", "ro_b1_grad", "ro_b2_grad"):
        pos = src.find(f"{grad}[")
        assert pos > 0, grad
        block = src[src.rfind(HOISTED, 0, pos):pos]
        assert "over 200 " in src[src.rfind("/*", 0, src.rfind(HOISTED, 0, pos)):pos], grad
        assert block.count("for (") >= 3, grad  # init, reduce (batch outermost), store


def test_max_reduce_matches_numpy() -> None:
    (got,), _ = max_reduce()
    want = np.max(_max_data(), axis=0)  # NaN propagates like NumPy's max
    np.testing.assert_array_equal(got, want)


def test_sum_with_bias_matches_numpy() -> None:
    (got,), _ = sum_with_bias()
    rng = np.random.default_rng(16)
    x, y = rng.normal(size=(30, 5)), rng.normal(size=(30, 11))
    z = rng.normal(size=11)
    want = x.astype(np.float32).astype(np.float64).T @ y.astype(np.float32) + z
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_moons_matches_a_numpy_step() -> None:
    """The float64 moons program against the same three steps written in NumPy."""
    got, _ = moons(precision="float64")
    rng = np.random.default_rng(11)
    xs, ys = rng.normal(size=(3, 12, 2)), np.sign(rng.normal(size=(3, 12, 1)))
    shapes = [(8, 2), (8,), (8, 8), (8,), (1, 8), (1,)]
    ps = [rng.uniform(-1, 1, s) for s in shapes]
    mom = [np.zeros_like(p) for p in ps]
    for i in range(3):
        w1, b1, w2, b2, w3, b3 = ps
        a1 = xs[i] @ w1.T + b1
        h1 = np.maximum(a1, 0)
        a2 = h1 @ w2.T + b2
        h2 = np.maximum(a2, 0)
        out = h2 @ w3.T + b3
        m = 1 - ys[i] * out
        loss = np.maximum(m, 0).sum(0) / 12
        g_out = -(m > 0).astype(np.float64) * ys[i] / 12
        g_h2 = (g_out @ w3) * (a2 > 0)
        g_h1 = (g_h2 @ w2) * (a1 > 0)
        grads = [g_h1.T @ xs[i], g_h1.sum(0), g_h2.T @ h1, g_h2.sum(0), g_out.T @ h2,
                 g_out.sum(0)]
        for k, g in enumerate(grads):
            mom[k] = 0.9 * mom[k] + g
            ps[k] = ps[k] - 0.1 * mom[k]
    for have, want in zip(got, [*ps, loss], strict=True):
        np.testing.assert_allclose(have, want, rtol=1e-10, atol=1e-12)
