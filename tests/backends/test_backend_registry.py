"""A new backend plugs in as one dialect class plus one registry line: a C dialect that puts
``#pragma GCC ivdep`` before every innermost loop trains a small MLP through the public API
with the same numbers as the default C backend (and a float64 NumPy oracle); a CUDA dialect
does the same on the driver emulator. Also: the registry's errors, the dialect in the
compile cache key, and both routines' `CompiledRoutine` protocol."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

import ocannl_ast as oc
from ocannl_ast.backends import (
    CBackend,
    CudaBackend,
    backend_names,
    get_backend,
    register_backend,
    unregister_backend,
)
from ocannl_ast.backends.c_backend import compile_c
from ocannl_ast.backends.c_syntax import C, CSyntax
from ocannl_ast.backends.compiler import cache_key
from ocannl_ast.backends.cuda_syntax import CudaSyntax
from ocannl_ast.errors import BackendError
from ocannl_ast.lowering.loop_ir import (
    Buffer,
    ForLoop,
    Get,
    LoopProgram,
    Precision,
    SetCell,
    Symbol,
    index_of,
)

PRAGMA = "#pragma GCC ivdep"


@dataclass(frozen=True, slots=True)
class IvdepC(CSyntax):
    """gcc's C with `PRAGMA` before innermost loops: the whole backend."""

    inner_loop_pragma: str = PRAGMA


@dataclass(frozen=True, slots=True)
class IvdepCuda(CudaSyntax):
    inner_loop_pragma: str = PRAGMA


@pytest.fixture
def c_ivdep() -> Iterator[str]:
    register_backend("c_ivdep", lambda: CBackend("c_ivdep", IvdepC()))
    yield "c_ivdep"
    unregister_backend("c_ivdep")


# ---- a small MLP, trained with SGD, and its NumPy oracle --------------------------------

RNG = np.random.default_rng(11)
X = RNG.standard_normal((8, 3))
Y = np.sin(X @ np.array([[1.0], [-2.0], [0.5]]))
W1, B1 = RNG.standard_normal((5, 3)) * 0.5, RNG.standard_normal(5) * 0.1
W2, B2 = RNG.standard_normal((1, 5)) * 0.5, np.zeros(1)
LR, STEPS = 0.1, 6


def _train(backend: str, precision: str = "float64") -> tuple[list[float], list[np.ndarray]]:
    """The losses of `STEPS` SGD steps of a 3-5-1 relu MLP on (X, Y), and the trained params."""
    w1 = oc.param("w1", input_dims=[3], output_dims=[5], init=W1)
    b1 = oc.param("b1", output_dims=[5], init=B1)
    w2 = oc.param("w2", input_dims=[5], output_dims=[1], init=W2)
    b2 = oc.param("b2", output_dims=[1], init=B2)
    x, y = oc.ndarray(X, batch_axes=1), oc.ndarray(Y, batch_axes=1)
    hidden = oc.relu(w1 @ x + b1)
    err = (w2 @ hidden + b2) - y
    loss = oc.einsum("b|o;b|o=>o", err, err) * (1.0 / len(X))
    ctx = oc.Context(backend, precision=precision)
    step = ctx.compile([oc.grad_update(loss), oc.sgd_update(loss, learning_rate=LR)])
    losses = []
    for _ in range(STEPS):
        step()
        losses.append(float(ctx.get(loss).reshape(())))
    return losses, [ctx.get(p) for p in (w1, b1, w2, b2)]


def _numpy_train() -> tuple[list[float], list[np.ndarray]]:
    w1, b1, w2, b2 = W1.copy(), B1.copy(), W2.copy(), B2.copy()
    losses = []
    for _ in range(STEPS):
        pre = X @ w1.T + b1
        h = np.maximum(pre, 0)
        err = h @ w2.T + b2 - Y
        losses.append(float((err ** 2).sum() / len(X)))
        g_out = 2 * err / len(X)
        g_h = (g_out @ w2) * (pre > 0)
        w2, b2 = w2 - LR * g_out.T @ h, b2 - LR * g_out.sum(0)
        w1, b1 = w1 - LR * g_h.T @ X, b1 - LR * g_h.sum(0)
    return losses, [w1, b1, w2, b2]


def _assert_same_training(backend: str) -> None:
    want_losses, want_params = _numpy_train()
    base_losses, base_params = _train("c")
    losses, params = _train(backend)
    np.testing.assert_allclose(losses, want_losses, rtol=1e-12)
    for got, base, want in zip(params, base_params, want_params, strict=True):
        np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-10, atol=1e-14)
        np.testing.assert_array_equal(got, base)  # the pragma changes no arithmetic
    assert losses == base_losses


# ---- a C dialect ------------------------------------------------------------------------


def test_registered_c_dialect_trains_like_the_default_c_backend(c_ivdep: str) -> None:
    assert c_ivdep in backend_names()
    _assert_same_training(c_ivdep)


def test_registered_c_dialect_renders_its_pragma_before_innermost_loops(c_ivdep: str) -> None:
    y = oc.einsum("ij;jk=>ik", oc.ndarray(RNG.standard_normal((3, 4))),
                  oc.ndarray(RNG.standard_normal((4, 2))))
    src, base = oc.render(y.forward, backend=c_ivdep), oc.render(y.forward)
    assert PRAGMA not in base
    lines = src.splitlines()
    pragmas = [k for k, ln in enumerate(lines) if ln.strip() == PRAGMA]
    assert pragmas and all(lines[k + 1].lstrip().startswith("for (") for k in pragmas)
    assert [ln for ln in lines if ln.strip() != PRAGMA] == base.splitlines()


def _copy_prog() -> LoopProgram:
    x, y, i = Buffer(1, "x", (4,)), Buffer(2, "y", (4,)), Symbol(1, "i")
    body = ForLoop(i, 4, SetCell(y, (index_of(i),), Get(x, (index_of(i),))))
    return LoopProgram("copy", (y, x), (), body, Precision.FLOAT32)


def test_cache_key_covers_the_dialect(tmp_path: Path) -> None:
    @dataclass(frozen=True, slots=True)
    class SameTextC(CSyntax):  # spells everything as C does: only the dialect differs
        pass

    assert cache_key("src", ("-O2",), C.fingerprint()) != cache_key(
        "src", ("-O2",), SameTextC().fingerprint())
    assert C.fingerprint() == CSyntax().fingerprint()
    a = compile_c(_copy_prog(), cache_dir=tmp_path)
    b = compile_c(_copy_prog(), SameTextC(), cache_dir=tmp_path)
    assert a.source_path.read_text() == b.source_path.read_text()
    assert a.library_path != b.library_path


def test_registry_errors() -> None:
    with pytest.raises(BackendError, match=r"unknown backend 'nope' \(known: 'c', 'cuda'"):
        get_backend("nope")
    with pytest.raises(BackendError, match="already registered"):
        register_backend("c", CBackend)
    with pytest.raises(BackendError, match="non-empty str"):
        register_backend("", CBackend)
    assert get_backend("c") == CBackend() and get_backend("cuda") == CudaBackend()


def test_compiled_routines_follow_the_protocol() -> None:
    routine = get_backend("c").compile(_copy_prog())
    x = np.arange(4, dtype=np.float32)
    y = np.zeros(4, dtype=np.float32)
    routine.bind((y, x))
    assert routine.bound is not None and routine.bound[0] is y
    routine.run_bound(())
    fn, table, statics, _failed = routine.entry()
    assert fn(table, statics) == 0
    np.testing.assert_array_equal(y, x)
    assert routine.name == "copy"


# ---- a CUDA dialect, on the driver emulator ----------------------------------------------


@pytest.mark.usefixtures("cuda_emu_driver")
def test_registered_cuda_dialect_trains_like_the_default_c_backend() -> None:
    register_backend("cuda_ivdep", lambda: CudaBackend("cuda_ivdep", IvdepCuda()))
    try:
        _assert_same_training("cuda_ivdep")
        y = oc.einsum("ij;jk=>ik", oc.ndarray(RNG.standard_normal((3, 4))),
                      oc.ndarray(RNG.standard_normal((4, 2))))
        src = oc.render(y.forward, backend="cuda_ivdep")  # the reduction loop of each thread
        assert PRAGMA in src and PRAGMA not in oc.render(y.forward, backend="cuda")
    finally:
        unregister_backend("cuda_ivdep")


@pytest.mark.usefixtures("cuda_emu_driver")
def test_cuda_routine_binds_and_runs_bound() -> None:
    routine = get_backend("cuda").compile(_copy_prog())
    x = np.arange(4, dtype=np.float32)
    y = np.zeros(4, dtype=np.float32)
    routine.bind([y, x])
    assert isinstance(routine.bound, tuple) and routine.bound[1] is x
    fn, table, statics, _failed = routine.entry()
    assert fn(table, statics) == 0
    get_backend("cuda").to_host(y)
    np.testing.assert_array_equal(y, x)
    with pytest.raises(BackendError, match="needs a writeable"):
        routine.bind([y.astype(np.float64), x])
