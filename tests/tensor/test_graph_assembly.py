"""Graph assembly: shared subexpressions, backprop order, held-out params, contexts and
routines (initialization once per context, deterministic random init, unset data,
static arguments and batch slicing).

Oracles: NumPy (values, hand-derived gradients), float64 central differences of NumPy
functions, and counts of assignment items in the generated code.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import ocannl_ast as oc
from ocannl_ast.tensor.node import AccumItem, FetchItem


@pytest.fixture(autouse=True)
def _default_seed() -> Iterator[None]:
    oc.set_seed(0)
    yield
    oc.set_seed(0)


def _writes(code: oc.Code, t: oc.Tensor, kind: str = "value") -> list[object]:
    """The items of `code` that write `t`'s value (or grad) node."""
    out = []
    for it in code.items:
        ref = it.lhs if isinstance(it, AccumItem) else it.node if isinstance(it, FetchItem) else None
        if ref is not None and ref.tensor is t and ref.kind == kind:
            out.append(it)
    return out


def _accums(code: oc.Code) -> list[AccumItem]:
    return [it for it in code.items if isinstance(it, AccumItem)]


def _num_grad(f, x: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """Central differences of a scalar NumPy function."""
    g = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        p, m = x.copy(), x.copy()
        p[idx] += eps
        m[idx] -= eps
        g[idx] = (f(p) - f(m)) / (2 * eps)
    return g


# ---- shared subexpressions -----------------------------------------------------------------

P0 = np.array([1.5, -0.5, 0.25])
W0 = np.array([0.3, -1.2, 0.7])


def _shared_graph() -> tuple[oc.Tensor, oc.Tensor, oc.Tensor, oc.Tensor, oc.Tensor]:
    """x = p * 2; y = x + x; z = x * x + y. (`x * x` is built before `y` here: see the
    report on forward-code order when `y` is built first.)"""
    p = oc.param("p", init=P0.copy())
    x = p * 2.0
    xx = x * x
    y = x + x
    z = xx + y
    loss = oc.einsum("i;i=>", z, oc.ndarray(W0))
    return p, x, y, z, loss


def _shared_np(p: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    x = p * 2.0
    y = x + x
    z = x * x + y
    return x, y, z


def test_shared_subexpression_values() -> None:
    _p, x, y, z, _loss = _shared_graph()
    ctx = oc.Context(precision="float64")
    ctx.compile(z.forward)()
    xr, yr, zr = _shared_np(P0)
    np.testing.assert_allclose(ctx.get(x), xr, rtol=1e-14)
    np.testing.assert_allclose(ctx.get(y), yr, rtol=1e-14)
    np.testing.assert_allclose(ctx.get(z), zr, rtol=1e-14)


def test_shared_subexpression_forward_code_once_each() -> None:
    p, x, y, z, loss = _shared_graph()
    fwd = loss.forward
    # x = p*2, y = x+x, x*x, z = ... + y, the einsum: each computed exactly once
    assert len(_writes(fwd, x)) == 1
    assert len(_writes(fwd, y)) == 1
    assert len(_writes(fwd, z)) == 1
    assert len(_writes(fwd, loss)) == 1
    assert len(_accums(fwd)) == 5
    assert _writes(fwd, p) == []  # the param is held out


def test_shared_subexpression_gradient() -> None:
    p, _x, _y, _z, loss = _shared_graph()
    value, (gp,) = oc.value_and_grad(loss, [p], precision="float64")

    def f(q: np.ndarray) -> float:
        return float((_shared_np(q)[2] * W0).sum())

    assert float(np.asarray(value).reshape(())) == pytest.approx(f(P0), rel=1e-14)
    # z = 4p^2 + 4p: dz/dp = 8p + 4
    np.testing.assert_allclose(gp, W0 * (8 * P0 + 4), rtol=1e-12)
    np.testing.assert_allclose(gp, _num_grad(f, P0), rtol=1e-7)


def test_shared_subexpression_backprop_contributions() -> None:
    p, x, _y, _z, loss = _shared_graph()
    bp = loss.backprop
    # x.grad gets four contributions: two from y = x + x, two from x * x; p.grad one
    assert len(_writes(bp, x, "grad")) == 5  # one zero fill + four accumulations
    assert len([it for it in _writes(bp, x, "grad") if isinstance(it, AccumItem)]) == 4
    assert len([it for it in _writes(bp, p, "grad") if isinstance(it, AccumItem)]) == 1
    # loss.grad is seeded once, never zeroed after
    seeds = _writes(bp, loss, "grad")
    assert len(seeds) == 1 and isinstance(seeds[0], FetchItem)


def test_shared_subexpression_with_two_roots() -> None:
    p = oc.param("p", init=P0.copy())
    x = oc.exp(p)
    r1 = x + 1.0
    r2 = x * 2.0
    ctx = oc.Context(precision="float64")
    ctx.compile([r1.forward, r2.forward])()
    np.testing.assert_allclose(ctx.get(r1), np.exp(P0) + 1.0, rtol=1e-14)
    np.testing.assert_allclose(ctx.get(r2), np.exp(P0) * 2.0, rtol=1e-14)
    # oc.eval of the second root alone still computes the shared child
    np.testing.assert_allclose(oc.eval(r2, precision="float64"), np.exp(P0) * 2.0, rtol=1e-14)


def test_backprop_twice_does_not_accumulate() -> None:
    p, _x, _y, _z, loss = _shared_graph()
    ctx = oc.Context(precision="float64")
    r = ctx.compile(oc.grad_update(loss))
    r()
    g1 = ctx.get(p.grad)
    r()
    np.testing.assert_allclose(ctx.get(p.grad), g1, rtol=0, atol=0)
    np.testing.assert_allclose(g1, W0 * (8 * P0 + 4), rtol=1e-12)


# ---- diamonds ----------------------------------------------------------------------------

def test_diamond_backprop_order() -> None:
    p0 = np.array([0.3, -0.8])
    w = np.array([1.1, -0.4])

    def f_np(q: np.ndarray) -> float:
        x = q * q
        a, b = np.sin(x), np.exp(x) * x
        c = a + b
        d = c * x + a
        return float((d * w).sum())

    p = oc.param("p", init=p0.copy())
    x = p * p
    a, b = oc.sin(x), oc.exp(x) * x
    c = a + b
    d = c * x + a
    loss = oc.einsum("i;i=>", d, oc.ndarray(w))
    value, (gp,) = oc.value_and_grad(loss, [p], precision="float64")
    assert float(np.asarray(value).reshape(())) == pytest.approx(f_np(p0), rel=1e-13)
    np.testing.assert_allclose(gp, _num_grad(f_np, p0), rtol=1e-7)
    # the same through loss.forward (grad_update) in a context
    ctx = oc.Context(precision="float64")
    ctx.compile(oc.grad_update(loss))()
    assert float(ctx.get(loss).reshape(())) == pytest.approx(f_np(p0), rel=1e-13)
    np.testing.assert_allclose(ctx.get(p.grad), gp, rtol=1e-14)
    # every grad_asn of a tensor runs after all the grad_asns of its consumers
    bp = loss.backprop.items
    first_read: dict[int, int] = {}
    last_write: dict[int, int] = {}
    for k, it in enumerate(bp):
        if isinstance(it, AccumItem):
            last_write[it.lhs.tensor.id] = k
            for r in it.rhs:
                if r.kind == "grad":
                    first_read.setdefault(r.tensor.id, k)
    for t in (x, a, b, c, d):
        assert last_write[t.id] < first_read[t.id], t


def test_diamond_two_params_through_compose() -> None:
    w0 = np.array([[0.5, -0.3], [0.2, 0.8], [-0.6, 0.1]])  # out 3, in 2
    v0 = np.array([0.4, -0.9])

    def f_np(wv: np.ndarray) -> float:
        w_, v_ = wv[:6].reshape(3, 2), wv[6:]
        h = np.tanh(w_ @ v_)
        return float((h * h).sum() + (w_ @ (v_ * v_)).sum())

    w = oc.param("w", output_dims=[3], input_dims=[2], init=w0.copy())
    v = oc.param("v", init=v0.copy())
    h = oc.tanh(w @ v)
    loss = oc.einsum("i=>", h * h) + oc.einsum("i=>", w @ (v * v))
    value, (gw, gv) = oc.value_and_grad(loss, [w, v], precision="float64")
    wv = np.concatenate([w0.ravel(), v0])
    assert float(np.asarray(value).reshape(-1)[0]) == pytest.approx(f_np(wv), rel=1e-13)
    num = _num_grad(f_np, wv)
    np.testing.assert_allclose(gw, num[:6].reshape(3, 2), rtol=1e-7)
    np.testing.assert_allclose(gv, num[6:], rtol=1e-7)


# ---- params held out of forward code -----------------------------------------------------

def test_param_init_not_rerun_by_forward() -> None:
    p0 = np.array([1.0, -2.0, 0.5])
    p = oc.param("p", init=p0.copy())
    loss = oc.einsum("i=>", p * p)
    assert _writes(loss.forward, p) == []
    ctx = oc.Context(precision="float64")
    step = ctx.compile([oc.grad_update(loss), oc.sgd_update(loss, learning_rate=0.1)])
    fwd = ctx.compile(loss.forward)
    step()
    p1 = p0 - 0.1 * 2 * p0
    np.testing.assert_allclose(ctx.get(p), p1, rtol=1e-14)
    fwd()
    np.testing.assert_allclose(ctx.get(p), p1, rtol=1e-14)  # not reset by forward
    assert float(ctx.get(loss).reshape(-1)[0]) == pytest.approx(float((p1 * p1).sum()))
    step()
    np.testing.assert_allclose(ctx.get(p), p1 - 0.1 * 2 * p1, rtol=1e-14)
    # a routine compiled after training reads the trained value, it does not re-initialize
    fwd2 = ctx.compile((p * 1.0).forward)
    fwd2()
    np.testing.assert_allclose(ctx.get(p), p1 - 0.1 * 2 * p1, rtol=1e-14)


def test_param_random_init_once_per_context() -> None:
    p = oc.param("p", output_dims=[4])
    y = p * 1.0
    ctx = oc.Context()
    r = ctx.compile(y.forward)
    r()
    first = ctx.get(p)
    ctx.set(p, np.full(4, 7.0))
    r()
    np.testing.assert_array_equal(ctx.get(y), np.full(4, 7.0, dtype=np.float32))
    other = ctx.compile((p + 0.0).forward)
    other()
    np.testing.assert_array_equal(ctx.get(p), np.full(4, 7.0, dtype=np.float32))
    # a fresh context initializes again, to the same random values
    ctx2 = oc.Context()
    ctx2.compile(y.forward)()
    np.testing.assert_array_equal(ctx2.get(p), first)


def test_param_number_and_tensor_init() -> None:
    q = oc.param("q", output_dims=[3], init=0.5)
    r = oc.param("r", init=oc.ndarray([1.0, 2.0]) * 3.0)
    np.testing.assert_array_equal(oc.eval(q + 0.0), np.full(3, 0.5, dtype=np.float32))
    np.testing.assert_array_equal(oc.eval(r * 1.0), np.array([3.0, 6.0], dtype=np.float32))


# ---- random initialization ------------------------------------------------------------------

def test_random_init_same_in_two_contexts() -> None:
    p = oc.param("p", output_dims=[3], input_dims=[5])
    y = p * 1.0
    c1, c2 = oc.Context(), oc.Context()
    c1.compile(y.forward)()
    c2.compile(y.forward)()
    a1, a2 = c1.get(p), c2.get(p)
    assert a1.dtype == np.float32 and a1.shape == (3, 5)
    np.testing.assert_array_equal(a1.view(np.uint32), a2.view(np.uint32))
    assert (a1 >= -1.0).all() and (a1 < 1.0).all()
    assert len(np.unique(a1)) == a1.size  # every cell its own value
    # oc.eval builds its own context: the same values
    np.testing.assert_array_equal(oc.eval(y), a1)


def test_random_init_differs_between_params() -> None:
    p = oc.param("p", output_dims=[6])
    q = oc.param("q", output_dims=[6])
    y = p + q
    ctx = oc.Context()
    ctx.compile(y.forward)()
    assert not np.array_equal(ctx.get(p), ctx.get(q))


def test_set_seed_changes_random_init() -> None:
    p = oc.param("p", output_dims=[8])
    y = p * 1.0
    # the seed keys initialization in a fresh context (the default one never re-initializes)
    oc.set_seed(0)
    a0 = oc.eval(y, ctx=oc.Context())
    oc.set_seed(1)
    a1 = oc.eval(y, ctx=oc.Context())
    oc.set_seed(0)
    b0 = oc.eval(y, ctx=oc.Context())
    assert not np.allclose(a0, a1)
    np.testing.assert_array_equal(a0, b0)
    assert np.abs(a1).max() <= 1.0


def test_random_init_uniform_statistics() -> None:
    p = oc.param("p", output_dims=[64], input_dims=[64])
    a = oc.eval(p * 1.0).astype(np.float64).ravel()
    assert (a >= -1.0).all() and (a < 1.0).all()
    assert abs(a.mean()) < 0.05  # uniform on [-1, 1): mean 0, variance 1/3
    assert a.var() == pytest.approx(1.0 / 3.0, rel=0.05)
    hist, _ = np.histogram(a, bins=8, range=(-1.0, 1.0))
    assert hist.min() > 0.8 * a.size / 8


_SCRIPT = textwrap.dedent("""
    import sys
    import numpy as np
    import ocannl_ast as oc
    oc.set_seed(int(sys.argv[1]))
    w = oc.param("w", output_dims=[3], input_dims=[4])
    b = oc.param("b", output_dims=[3])
    y = w @ oc.ndarray([1.0, 2.0, 3.0, 4.0]) + b
    ctx = oc.Context()
    ctx.compile(y.forward)()
    print(ctx.get(w).tobytes().hex(), ctx.get(b).tobytes().hex())
""")


def test_random_init_bit_identical_across_processes(tmp_path: Path) -> None:
    script = tmp_path / "init_script.py"
    script.write_text(_SCRIPT)
    root = Path(__file__).resolve().parents[2]

    def run(seed: int) -> str:
        proc = subprocess.run([sys.executable, str(script), str(seed)], cwd=root,
                              capture_output=True, text=True, timeout=120, check=True)
        return proc.stdout.strip()

    first, second, other = run(3), run(3), run(4)
    assert first == second
    assert first != other
    w_hex, _b_hex = first.split()
    w = np.frombuffer(bytes.fromhex(w_hex), dtype=np.float32)
    assert w.size == 12 and (np.abs(w) <= 1.0).all()


# ---- Context: get / set / unset data -------------------------------------------------------

def test_context_set_get_term() -> None:
    t = oc.term("x", output_dims=[3])
    y = t * 2.0 + 1.0
    ctx = oc.Context()
    r = ctx.compile(y.forward)
    ctx.set(t, np.array([1.0, 2.0, 3.0]))
    r()
    np.testing.assert_array_equal(ctx.get(y), np.array([3.0, 5.0, 7.0], dtype=np.float32))
    ctx.set(t, np.array([0.0, -1.0, 0.5]))
    r()
    np.testing.assert_array_equal(ctx.get(y), np.array([1.0, -1.0, 2.0], dtype=np.float32))
    got = ctx.get(y)
    got[...] = 100.0  # a copy: the context's data are unchanged
    np.testing.assert_array_equal(ctx.get(y), np.array([1.0, -1.0, 2.0], dtype=np.float32))


def test_term_never_set_raises() -> None:
    t = oc.term("x", output_dims=[3])
    y = t * 2.0
    ctx = oc.Context()
    r = ctx.compile(y.forward)
    with pytest.raises(oc.RuntimeDataError):
        r()
    with pytest.raises(oc.RuntimeDataError):
        ctx.get(t)
    with pytest.raises(oc.RuntimeDataError):
        ctx.get(y)
    with pytest.raises(oc.RuntimeDataError):
        oc.eval(y)
    assert issubclass(oc.RuntimeDataError, oc.OcannlError)


def test_term_set_in_other_context_does_not_leak() -> None:
    t = oc.term("x", output_dims=[2])
    y = t + 1.0
    c1, c2 = oc.Context(), oc.Context()
    c1.set(t, np.array([1.0, 2.0]))
    c1.compile(y.forward)()
    r2 = c2.compile(y.forward)
    with pytest.raises(oc.RuntimeDataError):
        r2()


def test_get_before_compute_raises() -> None:
    p = oc.param("p", init=np.array([1.0, 2.0]))
    y = p * 3.0
    ctx = oc.Context()
    ctx.compile(y.forward)  # compiled, never run
    with pytest.raises(oc.RuntimeDataError):
        ctx.get(y)


@pytest.mark.parametrize("bad", [np.zeros(4), np.zeros((3, 2)), np.zeros((2, 3, 1)), np.zeros(())])
def test_set_wrong_shape_raises(bad: np.ndarray) -> None:
    t = oc.term("x", output_dims=[2], input_dims=[3])
    y = t * 1.0
    ctx = oc.Context()
    ctx.compile(y.forward)
    with pytest.raises(oc.RuntimeDataError):
        ctx.set(t, bad)
    ctx.set(t, np.ones((2, 3)))  # the right shape is accepted


# ---- static arguments and batch slicing -----------------------------------------------------

def test_static_index_batch_slice_reads_row() -> None:
    arr = np.arange(12.0).reshape(4, 3) * 0.5 - 1.0
    data = oc.ndarray(arr, batch_axes=1)
    idx = oc.static_index("batch")
    xb = data.batch_slice(idx)
    y = oc.exp(xb) * 2.0
    ctx = oc.Context(precision="float64")
    r = ctx.compile(y.forward)
    for row in (2, 0, 3, 1):
        r(batch=row)
        np.testing.assert_allclose(ctx.get(y), np.exp(arr[row]) * 2.0, rtol=1e-14)
    r(1)  # positional
    np.testing.assert_allclose(ctx.get(y), np.exp(arr[1]) * 2.0, rtol=1e-14)
    assert tuple(y.shape.output) == (3,) and tuple(y.shape.batch) == ()


@pytest.mark.parametrize("bad", [4, 5, -1, 1000])
def test_static_index_out_of_range_raises(bad: int) -> None:
    arr = np.arange(8.0).reshape(4, 2)
    idx = oc.static_index("batch")
    y = oc.ndarray(arr, batch_axes=1).batch_slice(idx) + 1.0
    ctx = oc.Context()
    r = ctx.compile(y.forward)
    with pytest.raises(oc.RuntimeDataError):
        r(batch=bad)
    r(batch=3)  # still usable after a failure
    np.testing.assert_array_equal(ctx.get(y), (arr[3] + 1.0).astype(np.float32))


def test_static_index_missing_argument_raises() -> None:
    idx = oc.static_index("batch")
    y = oc.ndarray(np.ones((2, 2)), batch_axes=1).batch_slice(idx) * 1.0
    r = oc.Context().compile(y.forward)
    with pytest.raises(oc.OcannlError):
        r()


def test_batch_slice_of_term() -> None:
    t = oc.term("data", batch_dims=[3], output_dims=[2])
    idx = oc.static_index("i")
    y = t.batch_slice(idx) * 10.0
    ctx = oc.Context()
    r = ctx.compile(y.forward)
    vals = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    ctx.set(t, vals)
    r(i=2)
    np.testing.assert_array_equal(ctx.get(y), (vals[2] * 10.0).astype(np.float32))


def test_batch_slice_gradient_flows_into_row() -> None:
    d0 = np.array([[0.1, 0.2], [0.3, -0.4], [0.5, 0.6]])  # batch 3, output 2
    w0 = np.array([[1.0, -2.0], [0.5, 0.25]])  # output 2, input 2
    d = oc.param("d", batch_dims=[3], output_dims=[2], init=d0.copy())
    w = oc.param("w", output_dims=[2], input_dims=[2], init=w0.copy())
    idx = oc.static_index("batch")
    out = w @ d.batch_slice(idx)
    loss = oc.einsum("i=>", out * out)
    ctx = oc.Context(precision="float64")
    r = ctx.compile(oc.grad_update(loss))
    for row in (1, 2):
        r(batch=row)
        x = d0[row]
        h = w0 @ x
        assert float(ctx.get(loss).reshape(-1)[0]) == pytest.approx(float((h * h).sum()))
        expected = np.zeros_like(d0)
        expected[row] = w0.T @ (2 * h)
        np.testing.assert_allclose(ctx.get(d.grad), expected, rtol=1e-13)
        np.testing.assert_allclose(ctx.get(w.grad), np.outer(2 * h, x), rtol=1e-13)


def test_shared_child_consumed_earlier_is_computed_before_its_readers() -> None:
    """A child embedded by its first consumer is placed before a later reader too."""
    p = oc.param("p", init=np.array([1.0]))
    x = oc.exp(p)
    a = x + 1.0
    b = x * 2.0  # x was embedded in a; b reads it
    out = b + a  # operands in the order b, a: x must still run first
    ctx = oc.Context(precision="float64")
    ctx.compile(out.forward)()
    np.testing.assert_allclose(ctx.get(out), 3 * np.e + 1)


def test_grad_specs_require_and_prohibit() -> None:
    x = oc.term("x_in", output_dims=[3], grad_spec="require")
    w = oc.param("w_frozen", init=np.array([1.0, 2.0, 3.0]), grad_spec="prohibit")
    loss = oc.einsum("i;i=>", x, w)
    ctx = oc.Context(precision="float64")
    ctx.set(x, [1.0, 1.0, 1.0])
    ctx.compile(oc.grad_update(loss))()
    np.testing.assert_allclose(ctx.get(x.grad), [1.0, 2.0, 3.0])
    assert not w.diff and loss.params() == [w]
    with pytest.raises(oc.OcannlError):
        oc.ndarray([1.0], grad_spec="sometimes")
