"""The C routine's calling convention from the user's side: one pointer table and one statics
array per call, the body split into functions of bounded size (issue 12, levers 1 and 5b).

Results must not depend on how the body is split (one function, or one per statement), on
-O2 vs -O3, nor on the calling convention: the golden values were produced by the backend
before the split (one C function taking every buffer as a parameter, commit 13f9b14).
"""

# Tensor arithmetic operators are installed at import time; mypy cannot see them.
# mypy: disable-error-code="operator, arg-type"

from __future__ import annotations

import shutil
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from golden_util import assert_golden

import ocannl_ast as oc
from ocannl_ast.backends import c_backend

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed")

Program = Callable[[], list[np.ndarray]]


def moons_step() -> list[np.ndarray]:
    """Three SGD-momentum steps of a 2-8-8-1 ReLU MLP with a hinge loss, batch by index."""
    rng = np.random.default_rng(7)
    xs = rng.normal(size=(3, 6, 2)).astype(np.float32)
    ys = np.sign(rng.normal(size=(3, 6, 1))).astype(np.float32)
    shapes = [(8, 2), (8,), (8, 8), (8,), (1, 8), (1,)]
    inits = [rng.uniform(-1, 1, s).astype(np.float32) for s in shapes]
    w1, b1, w2, b2, w3, b3 = (
        oc.param(f"ce_{n}", output_dims=[v.shape[0]], input_dims=list(v.shape[1:]) or None,
                 init=v) for n, v in zip(["w1", "b1", "w2", "b2", "w3", "b3"], inits, strict=True))
    x_all, y_all = oc.ndarray(xs, batch_axes=2), oc.ndarray(ys, batch_axes=2)
    b = oc.static_index("batch")
    h1 = oc.relu(w1 @ x_all.batch_slice(b) + b1)
    h2 = oc.relu(w2 @ h1 + b2)
    out = w3 @ h2 + b3
    loss = oc.einsum("b|o=>o", oc.relu(1.0 - y_all.batch_slice(b) * out)) * (1.0 / 6)
    ctx = oc.Context()
    step = ctx.compile([oc.grad_update(loss), oc.sgd_update(loss, learning_rate=0.1,
                                                            momentum=0.9)])
    for i in range(3):
        step(batch=i)
    return [ctx.get(p) for p in (w1, b1, w2, b2, w3, b3)] + [ctx.get(loss)]


def conv() -> list[np.ndarray]:
    """A padded strided conv2d and its gradients (kernel, bias, input)."""
    rng = np.random.default_rng(8)
    x = oc.param("ce_img", output_dims=[3], input_dims=None,
                 init=rng.normal(size=(3,)).astype(np.float32))
    img = oc.ndarray(rng.normal(size=(2, 8, 6, 3)).astype(np.float32), batch_axes=1) * x
    y = oc.nn.conv2d(4, 3, stride=2, padding="same")(img)
    loss = oc.einsum("b|h,w,o=>", y * y)
    ctx = oc.Context()
    oc.infer_shapes(loss)
    kernel, bias = [p for p in y.params() if p is not x]
    ctx.set(kernel, rng.normal(size=kernel.dims()).astype(np.float32))
    ctx.set(bias, rng.normal(size=bias.dims()).astype(np.float32))
    ctx.compile(oc.grad_update(loss))()
    return [ctx.get(y), ctx.get(loss), ctx.get(kernel.grad), ctx.get(bias.grad),
            ctx.get(x.grad)]


def softmax() -> list[np.ndarray]:
    """Softmax over 9 classes of 5 rows and the gradient of a weighted sum of it."""
    rng = np.random.default_rng(9)
    logits = oc.param("ce_logits", output_dims=[9], init=rng.normal(size=9).astype(np.float32))
    rows = oc.ndarray(rng.normal(size=(5, 9)).astype(np.float32), batch_axes=1) + logits
    p = oc.nn.softmax(rows)
    loss = oc.einsum("b|o; o=>", p, oc.ndarray(rng.normal(size=9).astype(np.float32)))
    ctx = oc.Context()
    ctx.compile(oc.grad_update(loss))()
    return [ctx.get(p), ctx.get(loss), ctx.get(logits.grad)]


PROGRAMS: dict[str, Program] = {"moons_step": moons_step, "conv": conv, "softmax": softmax}


def _bits(values: list[np.ndarray]) -> str:
    return "\n".join(" ".join(f"{int(u):08x}" for u in np.ravel(v).view(np.uint32))
                     for v in values) + "\n"


@pytest.fixture(autouse=True)
def _private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OCANNL_AST_CACHE", str(tmp_path / "cache"))


@pytest.mark.parametrize("name", ["moons_step", "conv"])
def test_values_bit_identical_to_the_single_function_backend(name: str) -> None:
    """Golden bits written by the backend before this calling convention (no libm calls in
    these programs, so the bits depend only on the IEEE operations and their order)."""
    assert_golden(f"c_entry_{name}.txt", _bits(PROGRAMS[name]()))


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_split_into_many_functions_or_one_gives_the_same_bits(
        name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    runs = []
    for budget in (1, c_backend.FUNCTION_LINES, 10**9):  # per statement, default, one
        monkeypatch.setattr(c_backend, "FUNCTION_LINES", budget)
        runs.append(_bits(PROGRAMS[name]()))
    assert runs[0] == runs[1] == runs[2]


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_o2_and_o3_builds_give_the_same_bits(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    runs = []
    for flags in ("-O2", "-O3 -march=native", "-O3 -march=native -funroll-loops"):
        monkeypatch.setenv("OCANNL_AST_CFLAGS", flags)
        runs.append(_bits(PROGRAMS[name]()))
    assert runs[0] == runs[1] == runs[2]


def test_values_match_numpy() -> None:
    """The programs compute what NumPy computes (the bit tests above compare them only with
    themselves)."""
    p, loss, g = softmax()
    rng = np.random.default_rng(9)
    logits = rng.normal(size=9).astype(np.float32)
    z = rng.normal(size=(5, 9)).astype(np.float32) + logits
    w = rng.normal(size=9).astype(np.float32)
    e = np.exp(z - z.max(axis=1, keepdims=True))
    want = e / e.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(p, want, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(loss, (want * w).sum(), rtol=1e-5)
    np.testing.assert_allclose(g, (want * (w - (want * w).sum(1, keepdims=True))).sum(0),
                               rtol=1e-4, atol=1e-6)


def test_a_deep_model_is_split_into_bounded_functions() -> None:
    """gcc's time stays linear in depth: no generated function is much over the budget."""
    h = oc.ndarray(np.zeros((4, 3), np.float32), batch_axes=1)
    for i in range(12):
        h = oc.relu(oc.param(f"ce_deep{i}", output_dims=[5]) @ h)
    loss = oc.einsum("b|o=>", h)
    prog, _, _ = oc.Context().lower_code([oc.grad_update(loss), oc.sgd_update(loss, learning_rate=0.1)])
    src = c_backend.render_c(prog)
    bodies = src.split("static __attribute__((noinline)) int ")[1:]
    assert len(bodies) > 5
    longest_unit = 40  # no single loop nest of this program is longer
    assert all(b.count("\n") <= c_backend.FUNCTION_LINES + longest_unit for b in bodies)
    assert "* const* bufs, const int64_t* statics)" in src


# ---- calling: bound arrays, re-binding, errors --------------------------------------


def _copy_routine() -> tuple[oc.Context, oc.Routine, oc.Tensor, oc.Tensor]:
    """y = x[batch] + batch: a routine with a written buffer and a static argument."""
    xs = np.arange(12.0, dtype=np.float32).reshape(3, 4)
    x = oc.ndarray(xs, batch_axes=1)
    b = oc.static_index("batch")
    w = oc.param("ce_w", output_dims=[4], init=np.ones(4, np.float32))
    y = x.batch_slice(b) * w
    ctx = oc.Context()
    return ctx, ctx.compile(y.forward), x, y


def test_replaced_arrays_are_checked_like_the_first_ones() -> None:
    ctx, routine, _, y = _copy_routine()
    routine(batch=1)
    np.testing.assert_array_equal(ctx.get(y), [4, 5, 6, 7])
    compiled = routine.compiled
    good = list(routine.arrays)
    pos = next(i for i, b in enumerate(routine.prog.buffers) if b.id == y.buffer().id)
    bad_cases = {
        "float64": np.zeros(good[pos].shape, np.float64),
        "size": np.zeros(good[pos].size + 1, np.float32),
        "not C-contiguous": np.zeros((good[pos].size, 2), np.float32)[:, 0],
        "read-only": np.zeros(good[pos].shape, np.float32),
    }
    bad_cases["read-only"].flags.writeable = False
    messages = {}
    for what, arr in bad_cases.items():
        arrays = [*good]
        arrays[pos] = arr
        with pytest.raises(oc.BackendError, match="needs a writeable C-contiguous") as info:
            compiled(arrays, [0])
        messages[what] = str(info.value)
    # the same checks when these arrays come first (a fresh routine): the same messages
    fresh = c_backend.compile_c(routine.prog)
    for what, arr in bad_cases.items():
        arrays = [*good]
        arrays[pos] = arr
        with pytest.raises(oc.BackendError) as info:
            fresh(arrays, [0])
        assert str(info.value) == messages[what]
    alias = [*good]
    alias[pos] = next(a for j, a in enumerate(good) if j != pos and a.size == good[pos].size)
    with pytest.raises(oc.BackendError, match="aliases another"):
        compiled(alias, [0])
    # a good replacement is used: C writes into the new array, not the previously bound one
    new = [a.copy() for a in good]
    compiled(new, [2])
    np.testing.assert_array_equal(new[pos], [8, 9, 10, 11])
    np.testing.assert_array_equal(good[pos], [4, 5, 6, 7])
    compiled(good, [0])  # and back
    np.testing.assert_array_equal(good[pos], [0, 1, 2, 3])


def test_a_replaced_context_array_is_rebound_and_checked() -> None:
    ctx, routine, _, y = _copy_routine()
    routine(batch=0)
    buf = y.buffer()
    old = ctx.arrays[buf.id]
    ctx.arrays[buf.id] = np.zeros(old.shape, np.float64)  # a wrong array, announced
    ctx.arrays_epoch += 1
    with pytest.raises(oc.BackendError, match="needs a writeable C-contiguous float32"):
        routine(batch=2)
    ctx.arrays[buf.id] = np.full(old.shape, -1.0, np.float32)
    ctx.arrays_epoch += 1
    routine(batch=2)
    np.testing.assert_array_equal(ctx.get(y), [8, 9, 10, 11])
    np.testing.assert_array_equal(old, [0, 1, 2, 3])  # the old array is no longer written


def test_set_before_the_layout_is_frozen_then_calls_see_new_values() -> None:
    x = oc.term("ce_x_pad", output_dims=[5])
    ctx = oc.Context()
    ctx.set(x, np.arange(5.0))  # re-laid out (a new array) when the routine is compiled
    t = oc.einsum("o=+k; k => o", x, oc.ndarray(np.ones(3)))
    r = ctx.compile(t.forward)
    r()
    np.testing.assert_array_equal(ctx.get(t), [1, 3, 6, 9, 7])
    ctx.set(x, np.ones(5))
    r()
    np.testing.assert_array_equal(ctx.get(t), [2, 3, 3, 3, 2])


def test_static_arguments_are_checked_on_every_call() -> None:
    ctx, routine, _, y = _copy_routine()
    for ok in ({"batch": 2}, {"batch": np.int64(2)}):
        routine(**ok)
        np.testing.assert_array_equal(ctx.get(y), [8, 9, 10, 11])
    routine(np.int32(1))
    np.testing.assert_array_equal(ctx.get(y), [4, 5, 6, 7])
    for bad, match in [((True,), "must be an int"), ((1.0,), "must be an int"),
                       ((1 << 63,), "64-bit"), ((-(1 << 63) - 1,), "64-bit"),
                       ((), "needs static argument 'batch'"), ((1, 2), "takes static")]:
        with pytest.raises(oc.OcannlError, match=match):
            routine(*bad)
    for kw, match in [({"batch": 1 << 64}, "64-bit"), ({"bacth": 1}, "needs static"),
                      ({"batch": 1, "other": 2}, "takes static")]:
        with pytest.raises(oc.OcannlError, match=match):
            routine(**kw)
    with pytest.raises(oc.RuntimeDataError, match="index s_batch must lie in"):
        routine(batch=3)
    with pytest.raises(oc.RuntimeDataError, match="index s_batch must lie in"):
        routine(-1)
    routine(batch=0)
    np.testing.assert_array_equal(ctx.get(y), [0, 1, 2, 3])


def test_unset_inputs_are_refused_until_set() -> None:
    x = oc.term("ce_unset", output_dims=[3])
    y = x * 2.0
    ctx = oc.Context()
    r = ctx.compile(y.forward)
    for _ in range(2):  # the refusal does not make later calls skip the check
        with pytest.raises(oc.RuntimeDataError, match="has no value"):
            r()
    ctx.set(x, [1.0, 2.0, 3.0])
    r()
    np.testing.assert_array_equal(ctx.get(y), [2, 4, 6])


def test_concurrent_calls_do_not_mix_their_arguments() -> None:
    """Threads calling one compiled routine with their own arrays and statics."""
    _, routine, _, y = _copy_routine()
    routine(batch=0)  # initializes the data
    compiled = routine.compiled
    pos = next(i for i, b in enumerate(routine.prog.buffers) if b.id == y.buffer().id)
    errors: list[str] = []

    def work(k: int) -> None:
        arrays = [a.copy() for a in routine.arrays]
        for i in range(300):
            batch = (k + i) % 3
            compiled(arrays, [batch])
            if not np.array_equal(arrays[pos], np.arange(4.0) + 4 * batch):
                errors.append(f"thread {k} call {i}: {arrays[pos]}")

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_run_bound_needs_bound_arrays() -> None:
    _, routine, _, y = _copy_routine()
    routine(batch=0)
    fresh = c_backend.compile_c(routine.prog)
    with pytest.raises(oc.BackendError, match="no arrays bound"):
        fresh.run_bound([1])
    arrays = [a.copy() for a in routine.arrays]
    fresh.bind(arrays)
    fresh.run_bound([1])
    pos = next(i for i, b in enumerate(routine.prog.buffers) if b.id == y.buffer().id)
    np.testing.assert_array_equal(arrays[pos], [4, 5, 6, 7])
    with pytest.raises(oc.BackendError, match=f"takes {len(arrays)} arrays, got 1"):
        fresh.bind(arrays[:1])


def test_a_direct_call_with_other_arrays_does_not_redirect_the_routine() -> None:
    """`routine.compiled(arrays)` binds those arrays; the routine's next call (fast path
    included) must run on the context's arrays again, not on the caller's copies."""
    ctx, routine, _, y = _copy_routine()
    routine(batch=0)
    routine(batch=1)  # now on the fast path
    np.testing.assert_array_equal(ctx.get(y), [4, 5, 6, 7])
    pos = next(i for i, b in enumerate(routine.prog.buffers) if b.id == y.buffer().id)
    copies = [a.copy() for a in routine.arrays]
    routine.compiled(copies, [2])
    np.testing.assert_array_equal(copies[pos], [8, 9, 10, 11])
    copies[pos][:] = -5
    for batch, want in [(0, [0, 1, 2, 3]), (2, [8, 9, 10, 11]), (1, [4, 5, 6, 7])]:
        routine(batch=batch)
        np.testing.assert_array_equal(ctx.get(y), want)
        routine(batch)
        np.testing.assert_array_equal(ctx.get(y), want)
    np.testing.assert_array_equal(copies[pos], [-5, -5, -5, -5])  # never written again


def test_fast_calls_after_set_and_other_routines_see_current_values() -> None:
    """Calls on the fast path interleaved with ctx.set, another routine and eval: every
    result matches NumPy on the values as they are at that call."""
    xv = np.arange(6, dtype=np.float32).reshape(3, 2)
    x = oc.ndarray(xv, batch_axes=1, label="fc_x")
    w = oc.param("fc_w", input_dims=[2], output_dims=[2], init=np.eye(2, dtype=np.float32))
    b = oc.static_index("batch")
    y = w @ x.batch_slice(b)
    z = y * 3.0
    ctx = oc.Context()
    ry, rz = ctx.compile(y.forward), ctx.compile(z.forward)
    wv = np.eye(2, dtype=np.float32)
    for step in range(6):
        for i in range(3):
            ry(batch=i)
            ry(i)  # a repeated call: the fast path
            np.testing.assert_array_equal(ctx.get(y), wv @ xv[i])
            rz(batch=i)
            np.testing.assert_array_equal(ctx.get(z), 3 * (wv @ xv[i]))
        wv = wv + np.float32(step + 1)
        ctx.set(w, wv)


def test_a_one_static_routine_takes_it_by_value() -> None:
    """`<name>_v(table, s)`: the routine's fast path passes its one static int by value;
    the same rows as the statics-array entry, an out-of-range static still refused."""
    ctx, routine, _, y = _copy_routine()
    routine(batch=1)
    src = routine.compiled.source_path.read_text()
    assert "_v(float* const* bufs, int64_t s0)" in src
    fn, table, _ = routine.compiled.value_entry()
    assert fn(table, 2) == 0
    np.testing.assert_array_equal(ctx.get(y), [8, 9, 10, 11])
    assert fn(table, 3) != 0  # the index check of the entry it calls
    with pytest.raises(OverflowError):
        fn(table, 1 << 63)
    routine(batch=0)
    np.testing.assert_array_equal(ctx.get(y), [0, 1, 2, 3])
    x = oc.ndarray(np.arange(4.0))
    none = oc.Context().compile((x * 2.0).forward)
    assert none.compiled.value_entry() is None  # no static: the plain entry only
