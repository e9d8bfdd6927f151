"""Per-tensor storage precisions, from the user's side (docs/precision.md): `precision=` on
`oc.param` / `oc.ndarray` / `oc.term`, `oc.cast`, `oc.set_precision`; values against NumPy
(NumPy's float16 and a bfloat16 rounding oracle), gradients, ids in uint32 / uint64 / int32,
host data, checkpoints with each entry in its own dtype, and the errors of bad names."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import ocannl_ast as oc


def round_bf16(x: np.ndarray) -> np.ndarray:
    """NumPy oracle: float64 values rounded to bfloat16 (8 significant bits, ties to even)."""
    x = np.asarray(x, dtype=np.float64)
    _m, e = np.frexp(x)
    e = np.maximum(e, -125)
    return np.ldexp(np.round(np.ldexp(x, 8 - e)), e - 8)


def f16(x: np.ndarray) -> np.ndarray:
    return np.asarray(x).astype(np.float16).astype(np.float64)


def _header(path: Path) -> dict[str, dict[str, object]]:
    data = path.read_bytes()
    return json.loads(data[8:8 + int.from_bytes(data[:8], "little")])


# ---- values -------------------------------------------------------------------------------


def test_mixed_storage_in_one_routine_matches_numpy_bit_for_bit() -> None:
    """A bfloat16 and a float16 operand in a float32 context: each read widens its stored
    value exactly, the float32 arithmetic is NumPy's float32 arithmetic, a float32 result
    is stored as float32 and an oc.cast result is rounded to bfloat16 once."""
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((6, 40)) * 3, rng.standard_normal(40) * 100
    ta = oc.ndarray(a, label="a", precision="bfloat16")
    tb = oc.ndarray(b, label="b", precision="float16")
    y = ta * tb + 0.5
    c = oc.cast(y, "bfloat16")
    z = oc.exp(c * 0.01)
    ctx = oc.Context()
    got_z = ctx.eval(z)
    a32, b32 = round_bf16(a).astype(np.float32), f16(b).astype(np.float32)
    y32 = a32 * b32 + np.float32(0.5)
    np.testing.assert_array_equal(ctx.get(y), y32)
    np.testing.assert_array_equal(ctx.get(c), round_bf16(y32).astype(np.float32))
    np.testing.assert_allclose(got_z, np.exp(round_bf16(y32) * 0.01), rtol=2e-6)
    assert ctx.get(ta).dtype == np.float32 and ctx.get(tb).dtype == np.float16
    assert got_z.dtype == np.float32 and ctx.get(c).dtype == np.float32
    # the context's arrays: bfloat16 as uint16 bit patterns, float16 as float16
    dtypes = {a.dtype for a in ctx.arrays.values()}
    assert {np.dtype(np.uint16), np.dtype(np.float16), np.dtype(np.float32)} <= dtypes


def test_cast_in_a_16_bit_context_keeps_float32_cells() -> None:
    """oc.cast(..., "float32") in a bfloat16 context: that tensor keeps float32 digits."""
    x0 = np.array([1.0, 1 / 3, 1 + 2.0**-12, 300.7])
    ctx = oc.Context(precision="bfloat16")
    x = oc.ndarray(x0, label="x", precision="float32")
    y = oc.cast(x * 3.0, "float32")
    w = x * 3.0
    np.testing.assert_array_equal(ctx.eval(y), (x0.astype(np.float32) * np.float32(3)))
    np.testing.assert_array_equal(ctx.eval(w), round_bf16(x0.astype(np.float32) * 3))


def test_cast_gradient_passes_through_and_check_grads() -> None:
    # a float32 cell inside the float64 check: differences of eps=1e-3 keep its rounding
    # (~1e-7 relative) far below the tolerance
    oc.testing.check_grads(lambda a, b: oc.einsum("ij=>", oc.cast(oc.tanh(a * b), "float32")
                                                  * a),
                           [np.linspace(-1, 1, 12).reshape(3, 4),
                            np.linspace(0.5, 2, 12).reshape(3, 4)], eps=1e-3, atol=1e-3)
    # in float32 with bfloat16 storage of the cast: the gradient through the cast is the
    # gradient of the float64 function within bfloat16 roundoff
    rng = np.random.default_rng(3)
    a0 = rng.standard_normal((5, 3))
    a = oc.param("a", init=a0)
    loss = oc.einsum("ij=>", oc.cast(a * a, "bfloat16"))
    _, (g,) = oc.value_and_grad(loss, [a], ctx=oc.Context())
    np.testing.assert_allclose(g, 2 * a0, rtol=2.0**-7)


def test_bfloat16_param_in_float32_context_stores_rounded_updates() -> None:
    """A bfloat16 param loses an update below its resolution; a float32 master copy in a
    bfloat16 context keeps it (docs/precision.md)."""
    for ctx_prec, p_prec, moved in (("float32", "bfloat16", False),
                                    ("bfloat16", "float32", True)):
        ctx = oc.Context(precision=ctx_prec)
        w = oc.param("w", init=np.ones(4), precision=p_prec)
        loss = oc.einsum("i=>", w * oc.ndarray(np.full(4, 1e-3), label="g"))
        step = ctx.compile([oc.grad_update(loss), oc.sgd_update(loss, learning_rate=0.1)])
        step()
        got = ctx.get(w)
        assert got.dtype == np.float32
        if moved:  # 1 - 0.1 * 1e-3 in float32
            np.testing.assert_allclose(got, 1 - 1e-4, rtol=0, atol=1e-7)
            assert (got < 1).all()
        else:
            np.testing.assert_array_equal(got, 1.0)  # 1 - 1e-4 rounds back to 1 in bfloat16


def test_param_default_init_is_stored_in_its_precision() -> None:
    oc.set_seed(4)
    ctx = oc.Context()
    w = oc.param("w", output_dims=[8], input_dims=[16], precision="float16")
    ctx.compile((w * 1.0).forward)()
    got = ctx.get(w)
    assert got.dtype == np.float16
    assert (got >= -1).all() and (got <= 1).all() and np.unique(got).size > 60
    assert ctx.arrays[next(i for i in ctx.arrays if ctx.arrays[i].dtype == np.float16)].size \
        == 128


def test_set_converts_to_the_tensor_precision() -> None:
    ctx = oc.Context()
    t = oc.term("t", output_dims=[3], precision="bfloat16")
    h = oc.term("h", output_dims=[3], precision="float16")
    x = np.array([1 + 2.0**-8, 1 + 3 * 2.0**-9, 1e-3])  # a tie, a near tie
    ctx.set(t, x)
    ctx.set(h, x)
    np.testing.assert_array_equal(ctx.get(t), round_bf16(x))  # rounded once, from float64
    np.testing.assert_array_equal(ctx.get(h), x.astype(np.float16))
    assert ctx.get(t)[0] == 1.0 and ctx.get(t)[1] == 1 + 2.0**-7


def test_float64_tensor_needs_a_float64_context() -> None:
    x = oc.ndarray([1.0, 2.0], label="x64", precision="float64")
    with pytest.raises(oc.ArgumentError, match="x64.*float64") as info:
        oc.Context().eval(x * 2.0)
    assert "test_per_tensor_precision.py" in str(info.value)
    ctx = oc.Context(precision="float64")
    y = oc.ndarray([1 / 3], label="y", precision="float32")
    assert ctx.eval(y * 3.0)[0] == np.float64(np.float32(1 / 3)) * 3
    assert ctx.get(y).dtype == np.float32


# ---- ids ----------------------------------------------------------------------------------


@pytest.mark.parametrize("precision", ["uint32", "uint64", "int32"])
def test_integer_ids_give_the_float_ids_numbers(precision: str) -> None:
    rng = np.random.default_rng(5)
    ids0 = rng.integers(0, 7, (4, 6))
    outs = {}
    for prec in (None, precision):
        oc.set_seed(9)
        ctx = oc.Context()  # a naming epoch: the same table init both times
        ids = oc.ndarray(ids0, batch_axes=1, label="ids", precision=prec)
        emb = oc.nn.embedding(7, 3)(ids)
        oh = oc.nn.one_hot(ids, 7)
        loss = oc.einsum("b|s,d=>", emb * emb)
        outs[prec] = (ctx.eval(emb), ctx.eval(oh), ctx.eval(loss))
        if prec is not None:
            assert ctx.get(ids).dtype == np.dtype(precision)
            np.testing.assert_array_equal(ctx.get(ids), ids0)
    for f, i in zip(outs[None], outs[precision]):
        np.testing.assert_array_equal(i, f)
    np.testing.assert_array_equal(outs[precision][1], np.eye(7)[ids0])


def test_uint32_targets_in_cross_entropy_train_as_float_targets() -> None:
    rng = np.random.default_rng(6)
    x0, y0 = rng.standard_normal((16, 5)), rng.integers(0, 4, 16)
    losses = {}
    for prec in (None, "uint32"):
        oc.set_seed(2)
        ctx = oc.Context()
        x = oc.ndarray(x0, batch_axes=1, label="x")
        y = oc.term("labels", batch_dims=[16], output_dims=[], precision=prec)
        logits = oc.nn.linear(4)(x)
        loss = oc.nn.cross_entropy(logits, oc.nn.one_hot(y, 4))
        ctx.set(y, y0)
        step = ctx.compile([oc.grad_update(loss), oc.sgd_update(loss, learning_rate=0.5)])
        seen = []
        for _ in range(5):
            step()
            seen.append(float(np.asarray(ctx.get(loss)).reshape(())))
        losses[prec] = seen
    assert losses["uint32"] == losses[None]
    assert losses[None][-1] < losses[None][0]


def test_integer_ids_reject_non_integers_and_out_of_range() -> None:
    with pytest.raises(oc.RuntimeDataError, match=r"uint32.*cell \(1,\) is 2.5") as info:
        oc.ndarray([1.0, 2.5], precision="uint32")
    assert "test_per_tensor_precision.py" in str(info.value)
    with pytest.raises(oc.RuntimeDataError, match="not an integer in"):
        oc.ndarray([-1], precision="uint64")
    with pytest.raises(oc.RuntimeDataError, match="int32"):
        oc.ndarray([2**31], precision="int32")
    t = oc.term("ids", output_dims=[2], precision="uint32")
    ctx = oc.Context()
    with pytest.raises(oc.RuntimeDataError, match="nan") as info:
        ctx.set(t, np.array([0.0, np.nan]))
    assert "test_per_tensor_precision.py" in str(info.value)
    ctx.set(t, np.array([3, 4], dtype=np.int64))
    np.testing.assert_array_equal(ctx.get(t), [3, 4])
    big = oc.ndarray(np.array([2**64 - 1], dtype=np.uint64), precision="uint64")
    assert oc.Context().eval(big)[0] == 2**64 - 1  # integer data is not rounded through floats
    with pytest.raises(oc.RuntimeDataError, match="uint64"):
        oc.ndarray([float(2**64)], precision="uint64")  # 2**64 does not wrap to 0


def test_id_checks_still_apply_to_float_ids_of_a_term(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OCANNL_AST_CHECK", "1")
    ids = oc.term("ids", output_dims=[2])
    oc.nn.one_hot(ids, 3)
    with pytest.raises(oc.RuntimeDataError, match="integer ids"):
        oc.Context().set(ids, np.array([0.5, 1.0]))


# ---- contraction kernels: only nests that convert fall back --------------------------------


def test_contraction_kernel_kept_for_float32_nests_beside_other_storage() -> None:
    w = oc.param("w", output_dims=[64], input_dims=[64])
    x = oc.ndarray(np.ones((64, 64)), batch_axes=1, label="x")
    ids = oc.ndarray(np.zeros((64, 1)), batch_axes=1, label="ids", precision="uint32")
    y = (w @ x) * (oc.nn.one_hot(ids, 1) * 1.0 + 1.0)
    assert "ocannl_mm_run" in oc.render(y.forward)
    wb = oc.param("wb", output_dims=[64], input_dims=[64], precision="bfloat16")
    src = oc.render((wb @ x).forward)
    assert "ocannl_mm_run" not in src and "ocannl_bf2f(wb" in src


# ---- checkpoints --------------------------------------------------------------------------


def test_checkpoint_stores_each_entry_in_its_dtype(tmp_path: Path) -> None:
    oc.set_seed(8)
    ctx = oc.Context()
    a = oc.param("a", output_dims=[3], input_dims=[2], precision="bfloat16")
    b = oc.param("b", output_dims=[3], precision="float16")
    c = oc.param("c", output_dims=[3])
    y = a @ oc.ndarray(np.ones(2), label="ones") + b + c
    ctx.compile([oc.grad_update(oc.einsum("o=>", y)),
                 oc.adam_update(oc.einsum("o=>", y), learning_rate=0.01)])()
    path = tmp_path / "m.safetensors"
    ctx.save(path)
    head = _header(path)
    assert (head["a"]["dtype"], head["b"]["dtype"], head["c"]["dtype"]) == ("BF16", "F16", "F32")
    assert head["a/adam_m"]["dtype"] == "F32"  # optimizer state: the context's precision
    again = oc.Context()
    again.compile([oc.grad_update(oc.einsum("o=>", y)),
                   oc.adam_update(oc.einsum("o=>", y), learning_rate=0.01)])
    again.load(path)
    for t in (a, b, c):
        np.testing.assert_array_equal(again.get(t), ctx.get(t))
        assert again.get(t).dtype == ctx.get(t).dtype
    np.testing.assert_array_equal(again.get(a), round_bf16(again.get(a)))


def test_checkpoint_of_other_precision_is_a_checkpoint_error(tmp_path: Path) -> None:
    oc.set_seed(8)
    ctx = oc.Context()
    w = oc.param("w", output_dims=[3], precision="bfloat16")
    ctx.eval(w)
    ctx.save(tmp_path / "a.safetensors")
    ctx2 = oc.Context()
    w2 = oc.param("w", output_dims=[3])
    ctx2.eval(w2)
    with pytest.raises(oc.CheckpointError, match="entry 'w' is bfloat16, 'w' is stored in float32"):
        ctx2.load(tmp_path / "a.safetensors")
    ctx3 = oc.Context()
    w3 = oc.param("w", output_dims=[3], precision="float16")
    ctx3.eval(w3)
    with pytest.raises(oc.CheckpointError, match="entry 'w' is bfloat16"):
        ctx3.load(tmp_path / "a.safetensors")


# ---- set_precision and errors ---------------------------------------------------------------


def test_set_precision_before_compiling_and_not_after() -> None:
    oc.set_seed(1)
    ctx = oc.Context()
    w = oc.param("w", output_dims=[4])
    oc.set_precision(w, "float16")
    assert ctx.eval(w).dtype == np.float16
    with pytest.raises(oc.ArgumentError, match="already has cells of float16") as info:
        oc.set_precision(w, "bfloat16")
    assert "test_per_tensor_precision.py" in str(info.value)
    oc.set_precision(w, "float16")  # the same precision again: nothing changes
    ids = oc.ndarray([1.0, 2.0], label="ids")
    oc.set_precision(ids, "uint32")
    assert ctx.eval(ids).dtype == np.uint32
    v = oc.param("v", output_dims=[2])
    ctx.compile((v * 2.0).forward)  # compiled, not run: its routine has float32 cells of v
    with pytest.raises(oc.ArgumentError, match="already has cells"):
        oc.set_precision(v, "bfloat16")


@pytest.mark.parametrize(("call", "match"), [
    (lambda: oc.param("w", precision="half"), "param: precision must be one of"),
    (lambda: oc.param("w", precision="uint32"), "integer precisions are for data"),
    (lambda: oc.ndarray([1.0], precision="int8"), "ndarray: precision must be one of"),
    (lambda: oc.term("t", precision=32), "term: precision must be one of"),
    (lambda: oc.cast(oc.ndarray([1.0]) * 2.0, "uint32"), "cast: precision must be one of"),
    (lambda: oc.cast(oc.ndarray([1.0]) * 2.0, None), "cast: precision must be a precision"),
    (lambda: oc.set_precision(oc.param("w"), "uint64"), "integer precisions are for data"),
    (lambda: oc.set_precision(oc.number(2.0), "uint32"), "number constant"),
    (lambda: oc.ndarray([1.0], grad_spec="require", precision="uint32"), "ids have no gradient"),
    (lambda: oc.Context(precision="uint32"), "Context: precision must be one of"),
])
def test_bad_precision_is_a_located_argument_error(call: object, match: str) -> None:
    with pytest.raises(oc.ArgumentError, match=match) as info:
        call()  # type: ignore[operator]
    assert "test_per_tensor_precision.py" in str(info.value)


def test_param_of_its_own_precision_is_not_data_parallel() -> None:
    ocd = pytest.importorskip("ocannl_ast.distributed")
    w = oc.param("w", input_dims=[2], output_dims=[1], precision="bfloat16")
    loss = oc.einsum("o=>", w @ oc.ndarray(np.ones(2), label="ones"))
    with pytest.raises(oc.ArgumentError, match=r"'w(_\d+)?' is stored in bfloat16") as info:
        ocd.data_parallel(oc.Context(), loss, oc.sgd_update(loss, learning_rate=0.1))
    assert "test_per_tensor_precision.py" in str(info.value)


@pytest.mark.parametrize("context", ["bfloat16", "float16"])
def test_uint32_ids_stay_exact_in_a_16_bit_context(context: str) -> None:
    """Ids past 16-bit floats' integers (256 in bfloat16, 2048 in float16), read through a
    batch slice: the slice, one_hot's copies and its range are stored as uint32, so the
    one-hot rows are exact (float ids would round to a neighbour)."""
    ids0 = np.array([[257, 3001], [4095, 12]])
    b = oc.static_index("batch")
    ctx = oc.Context(precision=context)
    ids = oc.ndarray(ids0.reshape(2, 2, 1), batch_axes=2, label="ids", precision="uint32")
    oh = oc.nn.one_hot(ids.batch_slice(b), 4100)
    r = ctx.compile(oh.forward, keep=[oh])
    for i in range(2):
        r(batch=i)
        got = np.asarray(ctx.get(oh), np.float64).reshape(2, 4100)
        np.testing.assert_array_equal(got, np.eye(4100)[ids0[i]])


@pytest.mark.parametrize("precision", ["bfloat16", "float16"])
def test_16_bit_param_gradients_in_float32_context_match_numpy(precision: str) -> None:
    """A 16-bit weight in a float32 context: the forward reads its stored value exactly and
    computes in float32; its gradient is the float64 gradient at the stored weight, rounded
    once to the 16-bit precision where it is stored."""
    rng = np.random.default_rng(11)
    w0, x0 = rng.standard_normal((6, 5)) * 0.5, rng.standard_normal((8, 5))
    w = oc.param("w", init=w0, precision=precision)
    x = oc.ndarray(x0, label="x")
    h = oc.tanh(oc.einsum("oi;bi=>bo", w, x))
    loss = oc.einsum("bo=>", h * h) * (1.0 / 8)
    value, (gw,) = oc.value_and_grad(loss, [w], ctx=oc.Context())
    ws = round_bf16(w0) if precision == "bfloat16" else f16(w0)
    hr = np.tanh(x0.astype(np.float32).astype(np.float64) @ ws.T)
    gref = (2 * hr * (1 - hr**2) / 8).T @ x0
    eps = 2.0**-8 if precision == "bfloat16" else 2.0**-11
    np.testing.assert_allclose(float(np.asarray(value).reshape(())), (hr**2).sum() / 8,
                               rtol=1e-5)
    np.testing.assert_allclose(gw, gref, rtol=0, atol=2 * eps * np.abs(gref).max())
    assert gw.dtype == (np.float16 if precision == "float16" else np.float32)


def _stored(precision: str, x: np.ndarray) -> np.ndarray:
    """NumPy oracle: `x` (float64 or float32) as stored in `precision`, as float64."""
    if precision == "bfloat16":
        return round_bf16(x)
    if precision == "float16":
        return f16(x)
    return np.asarray(x).astype(np.dtype(precision)).astype(np.float64)


@pytest.mark.parametrize("context", ["float32", "float64", "bfloat16"])
@pytest.mark.parametrize("a_prec", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("out_prec", ["float16", "bfloat16", "float32"])
def test_every_storage_pair_bit_for_bit(context: str, a_prec: str, out_prec: str) -> None:
    """`cast(a * b + a, out)` for an operand `a` of its own precision and `b` of the
    context's: loads exact, arithmetic in the context's compute precision, one rounding
    per store (in a float64 context a 16-bit store rounds through float32, as documented)."""
    rng = np.random.default_rng(12)
    a0, b0 = rng.standard_normal(64) * 10, rng.standard_normal(64)
    ctx = oc.Context(precision=context)
    a = oc.ndarray(a0, label="a", precision=a_prec)
    b = oc.ndarray(b0, label="b")
    y = oc.cast(a * b + a, out_prec)
    got = np.asarray(ctx.eval(y), np.float64)
    compute = np.float64 if context == "float64" else np.float32
    av, bv = _stored(a_prec, a0).astype(compute), _stored(context, b0).astype(compute)
    r = av * bv + av
    if context == "float64" and out_prec in ("float16", "bfloat16"):
        r = r.astype(np.float32)
    np.testing.assert_array_equal(got, _stored(out_prec, r))
