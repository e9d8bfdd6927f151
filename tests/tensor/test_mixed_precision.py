"""Contexts with 16-bit storage (``oc.Context(precision="float16" | "bfloat16")``, float32
compute), from the user's side: host data rounded once, forward values and gradients against
NumPy within the storage precision's tolerance, checkpoints in F16 / BF16, and training the
moons MLP and the digits conv net to the float32 accuracy within a documented tolerance
(docs/precision.md)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

import ocannl_ast as oc
from safetensors import safe_open

ROOT = Path(__file__).resolve().parents[2]
HALF = ("float16", "bfloat16")
#: unit roundoff of each storage precision
EPS = {"float16": 2.0**-11, "bfloat16": 2.0**-8, "float32": 2.0**-24}
#: accuracy a 16-bit training run may lose against the float32 one (docs/precision.md)
ACCURACY_TOLERANCE = 0.03


def round_bf16(x: np.ndarray) -> np.ndarray:
    """NumPy reference: float64 values rounded to bfloat16 (8 significant bits, ties to
    even), by scaling the significand."""
    x = np.asarray(x, dtype=np.float64)
    _m, e = np.frexp(x)
    e = np.maximum(e, -125)
    return np.ldexp(np.round(np.ldexp(x, 8 - e)), e - 8)


def stored(precision: str, x: np.ndarray) -> np.ndarray:
    """`x` rounded to the storage precision, as float64."""
    if precision == "float16":
        return np.asarray(x).astype(np.float16).astype(np.float64)
    if precision == "bfloat16":
        return round_bf16(x)
    return np.asarray(x).astype(np.float32).astype(np.float64)


def _example(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"{name}_example_mp", ROOT / "examples" /
                                                  f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# ---- host data ----------------------------------------------------------------------------


@pytest.mark.parametrize("precision", HALF)
def test_set_rounds_once_to_nearest_even_and_get_gives_the_stored_values(precision: str) -> None:
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.standard_normal(200) * 10.0 ** rng.integers(-6, 4, 200),
                        [0.0, -0.0, np.inf, -np.inf, 1e6, 1 + 2.0**-8, 1 + 3 * 2.0**-9,
                         1 + 2.0**-8 + 2.0**-40]])
    ctx = oc.Context(precision=precision)
    t = oc.ndarray(np.zeros(x.size), label="t")
    with np.errstate(over="ignore"):
        ctx.set(t, x)
        got = ctx.get(t)
        want = stored(precision, x)
    assert got.dtype == (np.float16 if precision == "float16" else np.float32)
    np.testing.assert_array_equal(got.astype(np.float64), want)
    if precision == "bfloat16":  # ties to even, and no double rounding through float32
        assert got[-3] == 1.0 and got[-2] == 1 + 2.0**-7 and got[-1] == 1 + 2.0**-7
    ctx.set(t, np.full(x.size, np.nan))
    assert np.isnan(ctx.get(t)).all()


def test_unknown_precision_is_a_located_argument_error() -> None:
    with pytest.raises(oc.ArgumentError, match="bfloat16") as info:
        oc.Context(precision="half")
    assert "test_mixed_precision.py" in str(info.value)


# ---- values and gradients -----------------------------------------------------------------


@pytest.mark.parametrize("precision", HALF)
def test_mlp_forward_and_gradients_match_numpy(precision: str) -> None:
    """loss = sum(tanh(W x + b) ** 2) / n: every stored intermediate is rounded, so values
    agree with the float64 reference on the rounded inputs within a few units of the
    storage roundoff (relative to each result's scale)."""
    rng = np.random.default_rng(1)
    w0, b0, x0 = rng.standard_normal((6, 5)) * 0.5, rng.standard_normal(6) * 0.1, rng.standard_normal((8, 5))
    ctx = oc.Context(precision=precision)
    w = oc.param("w", init=w0)
    b = oc.param("b", init=b0)
    x = oc.ndarray(x0, label="x")
    h = oc.tanh(oc.einsum("oi;bi=>bo", w, x) + b)
    loss = oc.einsum("bo=>", h * h) * (1.0 / 8)
    value, (gw, gb) = oc.value_and_grad(loss, [w, b], ctx=ctx)

    ws, bs, xs = stored(precision, w0), stored(precision, b0), stored(precision, x0)
    hr = np.tanh(xs @ ws.T + bs)
    want = (hr**2).sum() / 8
    dz = 2 * hr * (1 - hr**2) / 8
    tol = 8 * EPS[precision]
    np.testing.assert_allclose(np.float64(np.asarray(value).reshape(())), want, rtol=tol)
    np.testing.assert_allclose(gw.astype(np.float64), dz.T @ xs, rtol=0,
                               atol=tol * np.abs(dz.T @ xs).max())
    np.testing.assert_allclose(gb.astype(np.float64), dz.sum(0), rtol=0,
                               atol=tol * np.abs(dz.sum(0)).max())
    # and the gradients are those of the float64 function, to the storage precision
    ref64 = oc.value_and_grad(loss, [w, b], precision="float64")[1]
    np.testing.assert_allclose(gw.astype(np.float64), ref64[0], rtol=0,
                               atol=16 * EPS[precision] * np.abs(ref64[0]).max())


# ---- checkpoints --------------------------------------------------------------------------


@pytest.mark.parametrize("precision", HALF)
def test_checkpoint_entries_have_the_storage_dtype(precision: str, tmp_path: Path) -> None:
    oc.set_seed(2)
    ctx = oc.Context(precision=precision)
    w = oc.param("w", input_dims=[3], output_dims=[4])
    y = w @ oc.ndarray(np.ones(3), label="ones")
    ctx.compile(y.forward)()
    path = tmp_path / "m.safetensors"
    ctx.save(path)
    data = path.read_bytes()
    header = json.loads(data[8:8 + int.from_bytes(data[:8], "little")])
    assert header["w"]["dtype"] == {"float16": "F16", "bfloat16": "BF16"}[precision]
    again = oc.Context(precision=precision)
    again.compile(y.forward)
    again.load(path)
    np.testing.assert_array_equal(again.get(w), ctx.get(w))
    other = oc.Context(precision="float32" if precision == "bfloat16" else "bfloat16")
    other.compile(y.forward)
    with pytest.raises(oc.CheckpointError, match="bfloat16"):
        other.load(path)


def test_bfloat16_checkpoint_reads_in_torch(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch", reason="the BF16 file cross-checked with PyTorch")
    from safetensors.torch import load_file

    oc.set_seed(3)
    ctx = oc.Context(precision="bfloat16")
    w = oc.param("w", input_dims=[5], output_dims=[2])
    ctx.compile((w @ oc.ndarray(np.ones(5), label="ones")).forward)()
    ctx.save(tmp_path / "m.safetensors")
    t = load_file(str(tmp_path / "m.safetensors"))["w"]
    assert t.dtype == torch.bfloat16
    np.testing.assert_array_equal(t.float().numpy(), ctx.get(w))


# ---- training -----------------------------------------------------------------------------


def _train_moons(precision: str, n: int = 512, batch: int = 32, epochs: int = 20,
                 params: str | None = None) -> float:
    """Accuracy of the moons MLP trained in a context of `precision`, its params stored in
    `params` (None: the context's precision)."""
    mo = _example("moons")
    oc.set_seed(1)
    xs, ys = mo.half_moons(n, 0.1, 1)
    nb = n // batch
    x_all = oc.ndarray(xs.reshape(nb, batch, 2), batch_axes=2, label="moons_x")
    y_all = oc.ndarray(ys.reshape(nb, batch, 1), batch_axes=2, label="moons_y")
    b, step = oc.static_index("batch"), oc.static_index("step")
    model = mo.make_model()
    margin = oc.relu(1.0 - y_all.batch_slice(b) * model(x_all.batch_slice(b)))
    loss = oc.einsum("b|o=>o", margin) * (1.0 / batch)
    for p in loss.params() if params is not None else ():
        oc.set_precision(p, params)
    lr = oc.node("learning_rate", output_dims=[1])
    ctx = oc.Context(precision=precision)
    train = ctx.compile([oc.grad_update(loss), mo.decaying_lr(lr, 0.1, step, float(epochs * nb)),
                         oc.sgd_update(loss, learning_rate=lr, momentum=0.9)])
    k = 0
    for _ in range(epochs):
        for i in range(nb):
            train(batch=i, step=k)
            k += 1
    assert np.isfinite(np.asarray(ctx.get(loss), np.float64)).all()
    scores = model(x_all)
    ctx.compile(scores.forward)()
    pred = np.sign(np.asarray(ctx.get(scores), np.float64).reshape(-1))
    return float(np.mean(pred == ys))


def test_moons_mlp_trains_in_16_bit_storage() -> None:
    ref = _train_moons("float32")
    assert ref >= 0.95
    for precision in HALF:
        acc = _train_moons(precision)
        assert acc >= ref - ACCURACY_TOLERANCE, (precision, acc, ref)


def _train_digits(precision: str, eps: float, epochs: int = 3, params: str | None = None
                  ) -> float:
    """Test accuracy of the digits conv net trained with Adam in a context of `precision`,
    its params stored in `params` (None: the context's precision)."""
    dg = _example("digits")
    oc.set_seed(0)
    x_train, y_train, x_test, y_test = dg.load_digits_split(0.2, 0)
    rng = np.random.default_rng(0)
    xs, ts = dg.batched(x_train, y_train, 32, rng)
    x_all = oc.ndarray(xs, batch_axes=2, label="digits_x")
    t_all = oc.ndarray(ts, batch_axes=2, label="digits_t")
    b = oc.static_index("batch")
    model = dg.make_model(8)
    loss = oc.nn.cross_entropy(model(x_all.batch_slice(b)), t_all.batch_slice(b))
    for p in loss.params() if params is not None else ():
        oc.set_precision(p, params)
    ctx = oc.Context(precision=precision)
    train = ctx.compile([oc.grad_update(loss), oc.adam_update(loss, learning_rate=0.01, eps=eps)])
    for epoch in range(epochs):
        if epoch:
            xs, ts = dg.batched(x_train, y_train, 32, rng)
            ctx.set(x_all, xs)
            ctx.set(t_all, ts)
        for i in range(xs.shape[0]):
            train(batch=i)
    return float(dg.evaluate(ctx, model, x_test, y_test))


def test_digits_conv_net_trains_in_16_bit_storage() -> None:
    pytest.importorskip("sklearn", reason="the digits data set ships with scikit-learn")
    ref = _train_digits("float32", 1e-8)
    assert ref >= 0.9
    # bfloat16 has float32's range: Adam's defaults work. float16's smallest subnormal is
    # 6e-8: the second moment of gradients below ~2e-4 underflows to 0, so Adam needs an
    # eps float16 can tell from 0 next to it (docs/precision.md).
    for precision, eps in (("bfloat16", 1e-8), ("float16", 1e-4)):
        acc = _train_digits(precision, eps)
        assert acc >= ref - ACCURACY_TOLERANCE, (precision, acc, ref)


#: (context precision, params precision): float32 master weights under bfloat16 activations
#: (docs/precision.md recommends it), float16 ones likewise, and the reverse, bfloat16
#: weights under float32 activations
MIXED = (("bfloat16", "float32"), ("float16", "float32"), ("float32", "bfloat16"))


def test_moons_mlp_trains_with_mixed_precisions() -> None:
    """320 SGD steps per configuration: each within ACCURACY_TOLERANCE of float32."""
    ref = _train_moons("float32")
    assert ref >= 0.95
    for ctx_prec, params in MIXED:
        acc = _train_moons(ctx_prec, params=params)
        assert acc >= ref - ACCURACY_TOLERANCE, (ctx_prec, params, acc, ref)


def test_digits_conv_net_trains_with_mixed_precisions() -> None:
    """5 epochs (220 Adam steps) per configuration: each within ACCURACY_TOLERANCE of
    float32. Adam's state has the context's precision: in float16 the default eps needs
    raising there too (docs/precision.md)."""
    pytest.importorskip("sklearn", reason="the digits data set ships with scikit-learn")
    ref = _train_digits("float32", 1e-8, epochs=5)
    assert ref >= 0.9
    for ctx_prec, params in MIXED:
        eps = 1e-4 if ctx_prec == "float16" else 1e-8
        acc = _train_digits(ctx_prec, eps, epochs=5, params=params)
        assert acc >= ref - ACCURACY_TOLERANCE, (ctx_prec, params, acc, ref)


def test_mixed_checkpoint_reads_in_torch(tmp_path: Path) -> None:
    """A float32 context holding bfloat16, float16 and float32 params writes each entry
    in its own dtype: PyTorch's safetensors reader gets those dtypes and values."""
    torch = pytest.importorskip("torch", reason="the mixed file cross-checked with PyTorch")
    from safetensors.torch import load_file

    oc.set_seed(3)
    ctx = oc.Context()
    ws = {p: oc.param(f"w_{p}", input_dims=[5], output_dims=[2], precision=p)
          for p in ("bfloat16", "float16", "float32")}
    ones = oc.ndarray(np.ones(5), label="ones")
    ctx.compile([(w @ ones).forward for w in ws.values()])()
    ctx.save(tmp_path / "m.safetensors")
    got = load_file(str(tmp_path / "m.safetensors"))
    for p, w in ws.items():
        t = got[f"w_{p}"]
        assert t.dtype == getattr(torch, p)
        np.testing.assert_array_equal(t.float().numpy(), ctx.get(w).astype(np.float32))


def test_16_bit_context_is_not_data_parallel() -> None:
    ocd = pytest.importorskip("ocannl_ast.distributed")
    w = oc.param("w", input_dims=[2], output_dims=[1])
    loss = oc.einsum("o=>", w @ oc.ndarray(np.ones(2), label="ones"))
    with pytest.raises(oc.ArgumentError, match="bfloat16 context cannot be data-parallel"):
        ocd.data_parallel(oc.Context(precision="bfloat16"), loss,
                          oc.sgd_update(loss, learning_rate=0.1))


@pytest.mark.parametrize("precision", HALF)
def test_default_init_is_the_float32_draw_rounded_where_stored(precision: str) -> None:
    """The init computes in float32 (4 uniforms per threefry word, as a float32 context)
    and rounds what it stores: the uniforms, then the scaled values, so each param value is
    within 3 units of the storage roundoff of the float32 value (the uniform's rounding,
    doubled by the scale to [-1, 1), plus the final one)."""
    from ocannl_ast.tensor.random_init import reference_values

    oc.set_seed(5)
    w = oc.param("w", output_dims=[16], input_dims=[9])
    ctx = oc.Context(precision=precision)
    ctx.compile((w * 1.0).forward)()
    ref = reference_values(w.init_key or ("w", 0), 5, w.dims(), precision)
    assert ref.dtype == np.float32
    np.testing.assert_allclose(ctx.get(w).astype(np.float64), ref, rtol=0,
                               atol=3 * EPS[precision])


def test_memory_report_counts_16_bit_cells() -> None:
    """A 16-bit context's arrays and its live-peak bound take half the float32 bytes (the
    16-byte threefry words of the init aside)."""
    reports = {}
    for precision in ("float32", "bfloat16"):
        oc.set_seed(0)
        x = oc.ndarray(np.linspace(0, 1, 4 * 16 * 8 * 8).reshape(4, 16, 8, 8, 1), batch_axes=2,
                       label="x")
        b = oc.static_index("batch")
        y = oc.nn.linear(10)(oc.nn.flatten(oc.relu(oc.nn.conv2d(8, 3, padding="same")(
            x.batch_slice(b)))))
        loss = oc.einsum("b|o=>", y * y)
        ctx = oc.Context(precision=precision)
        ctx.compile([oc.grad_update(loss), oc.sgd_update(loss, learning_rate=0.01)])(batch=0)
        reports[precision] = ctx.memory_report()
    full, half_ = reports["float32"], reports["bfloat16"]
    assert half_.allocated_bytes <= 0.55 * full.allocated_bytes
    assert half_.live_peak_bytes * 2 == full.live_peak_bytes > 0


# ---- optimizer state that counts: stored in the compute precision -------------------------


def _entry(path: Path, key: str) -> np.ndarray:
    """One checkpoint entry (NumPy cannot read the file's bfloat16 ones)."""
    with safe_open(str(path), framework="np") as f:
        return f.get_tensor(key)


@pytest.mark.parametrize("precision", [*HALF, "float32", "float64"])
def test_step_counter_and_adam_corrections_keep_counting(precision: str,
                                                         tmp_path: Path) -> None:
    """A 16-bit cell stops counting at 256 (bfloat16) or 2048 (float16), and Adam's
    `c <- beta * c + (1 - beta)` stalls (bfloat16's c2 at 0.25 instead of 1 - 0.999**t):
    counters and the bias corrections are stored in the compute precision, so a schedule
    and Adam's step sizes match float32 training (torch computes them in Python floats)."""
    oc.set_seed(0)
    x = oc.ndarray(np.linspace(-1, 1, 8).reshape(4, 2), batch_axes=1, label="x")
    w = oc.param("w", output_dims=[1], input_dims=[2])
    step = oc.step_counter("seen")
    loss = oc.einsum("..b..|o => 0", (w @ x) * (w @ x)) + 0.0 * step
    ctx = oc.Context(precision=precision)
    code = [oc.grad_update(loss), oc.adam_update(loss, learning_rate=0.0)]
    train = ctx.compile(code)  # a zero rate: the weights stay put, the state advances
    n = 600
    for _ in range(n):
        train()
    assert ctx.get(step).tolist() == [float(n)]
    path = tmp_path / "state.safetensors"
    ctx.save(path)
    compute = np.float64 if precision == "float64" else np.float32
    for key, beta in (("w/adam_c1", 0.9), ("w/adam_c2", 0.999)):
        got = _entry(path, key)  # the weights are 16-bit entries, these float32
        assert got.dtype == compute
        np.testing.assert_allclose(got, 1.0 - beta**n, rtol=2e-5)
    again = oc.Context(precision=precision)  # and they load back
    again.compile(code)
    again.load(path)
    assert again.get(step).tolist() == [float(n)]


@oc.cd
def _count_updates(p):
    {updates_seen, precision := "compute"}[...] = updates_seen + 1.0


@oc.cd
def _bad_precision_node(p):
    {bad_seen, precision := "float8"}[...] = bad_seen + 1.0


def test_a_user_node_may_be_stored_in_the_compute_precision(tmp_path: Path) -> None:
    """`{x, precision := "compute"}` in a user's @cd code: float32 cells in a bfloat16
    context, so it counts past 256; another word is a located ArgumentError."""
    p = oc.param("p", output_dims=[1])
    ctx = oc.Context(precision="bfloat16")
    run = ctx.compile(_count_updates(p))
    for _ in range(300):
        run()
    ctx.save(tmp_path / "n.safetensors")
    seen = _entry(tmp_path / "n.safetensors", "updates_seen")
    assert seen.dtype == np.float32 and seen.tolist() == [300.0]
    with pytest.raises(oc.ArgumentError, match="node: precision must be one of") as e:
        _bad_precision_node(p)
    assert "test_mixed_precision.py" in str(e.value)
