"""Issue 21 item 2: `x.batch_slice(i)` is a view of row `i` of `x` (OCANNL 0.7's `x @| i`):
a write through it reaches `x` (no copy), a read sees `x`'s current values, in @cd code,
in one routine and across routines, in training loops; a slice that cannot be a view
(padded) refuses writes with a located error. Values from NumPy."""

from __future__ import annotations

import numpy as np
import pytest

import ocannl_ast as oc

X0 = np.arange(6, dtype=np.float32).reshape(3, 2)


def _sliced() -> tuple[oc.Tensor, oc.Tensor]:
    x = oc.param("x", init=X0, batch_dims=[3], output_dims=[2])
    return x, x.batch_slice(oc.static_index("i"))


# ---- writes reach the parent -------------------------------------------------------------

def test_set_through_a_slice_writes_the_parents_row() -> None:
    x, s = _sliced()

    @oc.cd
    def write(s):
        s[...] = 5.0

    ctx = oc.Context()
    r = ctx.compile(write(s))
    r(i=1)
    want = X0.copy()
    want[1] = 5.0
    np.testing.assert_array_equal(ctx.get(x), want)


def test_rows_written_in_any_order_fill_the_parent() -> None:
    i = oc.static_index("i")
    hist = oc.node("hist", batch_dims=[4], output_dims=[3])
    y = oc.term("y", output_dims=[3])

    @oc.cd
    def record(hist, y):
        hist.batch_slice(i)[...] = y + 1.0  # OCANNL: hist @| i =: y + 1

    ctx = oc.Context()
    r = ctx.compile(record(hist, y))
    want = np.zeros((4, 3), np.float32)
    for k in (2, 0, 3, 1):
        v = np.arange(3, dtype=np.float32) * (k + 1.5)
        ctx.set(y, v)
        r(i=k)
        want[k] = v + 1.0
        np.testing.assert_array_equal(ctx.get(hist), want)


def test_accumulate_and_reduce_through_a_slice() -> None:
    i = oc.static_index("i")
    hist = oc.node("hist", batch_dims=[3], output_dims=[3])
    m = np.arange(6.0).reshape(3, 2)

    @oc.cd
    def reduce_into(hist, mat):
        hist.batch_slice(i)[...] = sum(mat, logic="ij=>i")

    @oc.cd
    def bump(hist):
        row = hist.batch_slice(i)
        row += 10.0

    @oc.cd
    def explicit(hist, mat):
        accum(hist.batch_slice(i), "=:@^", mat, logic="ij=>i")  # noqa: F821

    ctx = oc.Context()
    mat = oc.ndarray(m)
    red, up, mx = (ctx.compile(c) for c in (reduce_into(hist, mat), bump(hist),
                                             explicit(hist, mat)))
    red(i=1)
    up(i=1)
    up(i=2)
    mx(i=0)
    want = np.array([m.max(1), m.sum(1) + 10.0, [10.0] * 3], np.float32)
    np.testing.assert_array_equal(ctx.get(hist), want)


def test_a_partial_write_clears_only_the_slices_cells() -> None:
    # `=:` erases the cells it does not write (OCANNL): of the slice, never of the parent
    i = oc.static_index("i")
    hist = oc.node("hist", batch_dims=[3], output_dims=[4])

    @oc.cd
    def ones(hist):
        hist[...] = 1.0

    @oc.cd
    def spread(hist, t):
        hist.batch_slice(i)[2 * k] = t[k]  # noqa: F821

    ctx = oc.Context()
    ctx.compile(ones(hist))()
    ctx.compile(spread(hist, oc.ndarray([5.0, 6.0])))(i=1)
    np.testing.assert_array_equal(ctx.get(hist), [[1, 1, 1, 1], [5, 0, 6, 0], [1, 1, 1, 1]])


def test_slice_of_a_slice_is_a_view_of_the_first_parent() -> None:
    x0 = np.arange(24.0).reshape(2, 3, 4)
    x = oc.param("x", init=x0, batch_dims=[2, 3], output_dims=[4])
    i, j = oc.static_index("i"), oc.static_index("j")

    @oc.cd
    def negate(x):
        cell = x.batch_slice(i).batch_slice(j)
        cell[...] = -cell

    ctx = oc.Context(precision="float64")
    r = ctx.compile(negate(x))
    r(i=1, j=2)
    r(i=0, j=0)
    want = x0.copy()
    want[1, 2] *= -1
    want[0, 0] *= -1
    np.testing.assert_array_equal(ctx.get(x), want)


def test_a_padded_parent_is_written_between_its_margins() -> None:
    # a padded reader of x widens x's margins: the view indexes x's interior
    x0 = np.arange(15.0).reshape(3, 5)
    x = oc.param("x", init=x0, batch_dims=[3], output_dims=[5])
    conv = oc.einsum("b|o=+k; k => b|o", x, oc.ndarray(np.ones(3)))
    i = oc.static_index("i")

    @oc.cd
    def scale(x):
        x.batch_slice(i)[...] = x.batch_slice(i) * 10.0

    ctx = oc.Context(precision="float64")
    rc, rw = ctx.compile(conv.forward), ctx.compile(scale(x))
    rc()
    rw(i=1)
    rc()
    want = x0.copy()
    want[1] *= 10.0
    np.testing.assert_array_equal(ctx.get(x), want)
    padded = np.pad(want, ((0, 0), (1, 1)))
    np.testing.assert_array_equal(
        ctx.get(conv), [[padded[b, o:o + 3].sum() for o in range(5)] for b in range(3)])


# ---- reads see the parent's current values -------------------------------------------------

def test_read_after_write_in_one_routine() -> None:
    i = oc.static_index("i")
    hist = oc.node("hist", batch_dims=[4], output_dims=[3])
    doubled = hist.batch_slice(i) * 2.0

    @oc.cd
    def seven(hist):
        hist.batch_slice(i)[...] = 7.0

    ctx = oc.Context()
    r = ctx.compile([seven(hist), doubled.forward])
    r(i=3)
    np.testing.assert_array_equal(ctx.get(doubled), [14.0] * 3)
    np.testing.assert_array_equal(ctx.get(hist)[3], [7.0] * 3)
    np.testing.assert_array_equal(ctx.get(hist)[:3], np.zeros((3, 3)))


def test_a_reader_compiled_before_the_writer_sees_the_write() -> None:
    _, s = _sliced()
    y = s + 100.0

    @oc.cd
    def write(s):
        s[...] = -1.0

    ctx = oc.Context()
    read = ctx.compile(y.forward)
    wr = ctx.compile(write(s))
    read(i=2)
    np.testing.assert_array_equal(ctx.get(y), X0[2] + 100.0)
    wr(i=2)
    read(i=2)
    np.testing.assert_array_equal(ctx.get(y), [99.0, 99.0])


def test_reading_through_a_slice_still_trains_the_parent() -> None:
    x, s = _sliced()
    loss = oc.einsum("i=>", s * s)
    ctx = oc.Context()
    step = ctx.compile([oc.grad_update(loss), oc.sgd_update(loss, learning_rate=0.25)])
    step(i=1)
    want = X0.copy()
    want[1] -= 0.25 * 2 * X0[1]
    np.testing.assert_allclose(ctx.get(x), want, rtol=1e-6)


def test_gradient_through_a_read_slice_matches_central_differences() -> None:
    rng = np.random.default_rng(0)
    d0, w0 = rng.normal(size=(4, 3)), rng.normal(size=(3,))
    d = oc.param("d", init=d0, batch_dims=[4], output_dims=[3])
    i = oc.static_index("i")
    loss = oc.einsum("i;i=>", oc.exp(d.batch_slice(i)), oc.ndarray(w0))
    ctx = oc.Context(precision="float64")
    r = ctx.compile(oc.grad_update(loss))
    r(i=2)
    numeric = np.zeros_like(d0)
    for k in range(3):
        e = np.zeros(3)
        e[k] = 1e-6
        numeric[2, k] = (np.exp(d0[2] + e) - np.exp(d0[2] - e)) @ w0 / 2e-6
    np.testing.assert_allclose(ctx.get(d.grad), numeric, rtol=1e-6, atol=1e-9)


# ---- in a training loop --------------------------------------------------------------------

def test_training_step_records_each_steps_params_in_a_persistent_buffer() -> None:
    w0, target, lr, steps = np.array([1.0, -2.0]), np.array([0.5, 0.5]), 0.1, 5
    w = oc.param("w", init=w0, output_dims=[2])
    step = oc.static_index("step")
    trace = oc.node("trace", batch_dims=[steps], output_dims=[2])
    loss = oc.einsum("i=>", (w - oc.ndarray(target)) ** 2.0)

    @oc.cd
    def record(trace, w):
        trace.batch_slice(step)[...] = w

    ctx = oc.Context(precision="float64")
    r = ctx.compile([oc.grad_update(loss), record(trace, w),
                     oc.sgd_update(loss, learning_rate=lr)])
    want, cur = np.zeros((steps, 2)), w0.copy()
    for k in range(steps):
        r(step=k)
        want[k] = cur
        cur = cur - lr * 2.0 * (cur - target)
    np.testing.assert_allclose(ctx.get(trace), want, rtol=1e-12)
    np.testing.assert_allclose(ctx.get(w), cur, rtol=1e-12)


# ---- errors ----------------------------------------------------------------------------------

def test_out_of_range_write_is_refused_and_writes_nothing() -> None:
    x, s = _sliced()

    @oc.cd
    def write(s):
        s[...] = 5.0

    ctx = oc.Context()
    r = ctx.compile(write(s))
    for bad in (3, -1):
        with pytest.raises(oc.RuntimeDataError, match="must lie in"):
            r(i=bad)
    np.testing.assert_array_equal(ctx.get(x), X0)


def test_write_through_a_padded_slice_is_a_located_error() -> None:
    x = oc.param("x", init=np.ones((2, 5)), batch_dims=[2], output_dims=[5])
    s = x.batch_slice(oc.static_index("i"))
    conv = oc.einsum("o=+k; k => o", s, oc.ndarray(np.ones(3)))  # pads s: s is a copy

    @oc.cd
    def write(s):
        s[...] = 5.0

    with pytest.raises(oc.DslSyntaxError) as err:
        oc.Context().compile([conv.forward, write(s)])
    msg = str(err.value)
    assert "test_batch_slice_writes.py" in msg and "s[...] = 5.0" in msg
    assert "padded" in msg and "'x'" in msg


def test_a_padded_slice_still_reads_its_row() -> None:
    x0 = np.arange(10.0).reshape(2, 5)
    x = oc.param("x", init=x0, batch_dims=[2], output_dims=[5])
    s = x.batch_slice(oc.static_index("i"))
    conv = oc.einsum("o=+k; k => o", s, oc.ndarray(np.ones(3)))
    ctx = oc.Context(precision="float64")
    ctx.compile(conv.forward)(i=1)
    row = np.pad(x0[1], 1)
    np.testing.assert_allclose(ctx.get(conv), [row[o:o + 3].sum() for o in range(5)])


def test_get_of_a_kept_slice_is_its_row_when_its_forward_code_ran() -> None:
    x, s = _sliced()  # held here: the routine keeps a copy of the row for ctx.get

    @oc.cd
    def write(s):
        s[...] = -1.0

    ctx = oc.Context()
    ctx.compile((s * 1.0).forward)(i=0)
    np.testing.assert_array_equal(ctx.get(s), X0[0])
    ctx.compile(write(s))(i=0)
    np.testing.assert_array_equal(ctx.get(x)[0], [-1.0, -1.0])


def test_get_of_a_view_never_computed_names_its_parent() -> None:
    x = oc.param("x", init=X0, batch_dims=[3], output_dims=[2])

    @oc.cd
    def write(x):
        x.batch_slice(oc.static_index("i"))[...] = 5.0

    ctx = oc.Context()
    code = write(x)
    ctx.compile(code)(i=0)
    (s,) = [t for t in code.tensors() if t.label == "batch_slice"]
    with pytest.raises(oc.RuntimeDataError, match=r"view.*ctx.get\(x\)\[i\]"):
        ctx.get(s)


def test_get_of_an_unheld_view_is_kept_from_the_next_run_on() -> None:
    x = oc.param("x", init=X0, batch_dims=[3], output_dims=[2])
    i = oc.static_index("i")
    y = x.batch_slice(i) + 1.0  # the slice itself is not held: a pure view
    ctx = oc.Context()
    r = ctx.compile(y.forward)
    r(i=2)
    (s,) = [t for t in y.subgraph() if t.label == "batch_slice"]
    with pytest.raises(oc.RuntimeDataError, match="next run"):
        ctx.get(s)
    r(i=2)
    np.testing.assert_array_equal(ctx.get(s), X0[2])
    np.testing.assert_array_equal(ctx.get(y), X0[2] + 1.0)


def test_other_calls_are_still_not_targets() -> None:
    with pytest.raises(oc.DslSyntaxError, match="batch_slice"):
        @oc.cd
        def bad(x):
            oc.relu(x)[...] = 1.0


# ---- fuzz: random leading shapes, indices and write orders against NumPy -------------------

@pytest.mark.parametrize("seed", range(4))
def test_fuzz_writes_through_slices_match_numpy(seed: int) -> None:
    rng = np.random.default_rng(seed)
    lead = tuple(int(n) for n in rng.integers(1, 4, size=int(rng.integers(1, 3))))
    rest = tuple(int(n) for n in rng.integers(1, 4, size=int(rng.integers(1, 3))))
    x0 = rng.normal(size=lead + rest)
    x = oc.param("x", init=x0, batch_dims=list(lead), output_dims=list(rest))
    idx = [oc.static_index(f"i{k}") for k in range(len(lead))]
    y = oc.term("y", output_dims=list(rest))

    @oc.cd
    def write(x, y):
        s = x
        for ix in idx:
            s = s.batch_slice(ix)
        s[...] = y * 2.0
        s += 1.0

    ctx = oc.Context(precision="float64")
    r = ctx.compile(write(x, y))
    want = x0.copy()
    cells = [tuple(int(c) for c in rng.integers(0, lead)) for _ in range(6)]
    for cell in cells:
        v = rng.normal(size=rest)
        ctx.set(y, v)
        r(**{f"i{k}": c for k, c in enumerate(cell)})
        want[cell] = v * 2.0 + 1.0
    np.testing.assert_allclose(ctx.get(x), want, rtol=1e-14)
