"""Programs the CUDA tests share: one loop program per primitive, the moons training step
(as examples/moons.py builds it) and a valid convolution (an affine einsum)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

import ocannl_ast as oc
from ocannl_ast.lowering.loop_ir import (
    Binary,
    BinOp,
    Buffer,
    Expr,
    ForLoop,
    Get,
    LoopProgram,
    Precision,
    SetCell,
    Symbol,
    Ternary,
    TernOp,
    Unary,
    UnOp,
    index_of,
)

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "moons.py"
CONV_SPEC = "b| oh<+kh, ow<+kw, ic; kh, kw, ic -> oc => b| oh, ow, oc"
OPS: list[UnOp | BinOp | TernOp] = [*UnOp, *BinOp, *TernOp]


def op_program(op: UnOp | BinOp | TernOp, n: int, precision: Precision) -> LoopProgram:
    """``out[i] = op(a[i], b[i], c[i])`` over `n` cells (as many operands as `op` takes)."""
    i = Symbol(0, "i")
    ins = [Buffer(k + 1, name, (n,)) for k, name in enumerate("abc")]
    out = Buffer(0, "out", (n,))
    args: list[Expr] = [Get(b, (index_of(i),)) for b in ins]
    value: Expr
    if isinstance(op, UnOp):
        value = Unary(op, args[0])
    elif isinstance(op, BinOp):
        value = Binary(op, args[0], args[1])
    else:
        value = Ternary(op, args[0], args[1], args[2])
    body = ForLoop(i, n, SetCell(out, (index_of(i),), value))
    return LoopProgram(f"op_{op.name.lower()}", (out, *ins), (), body, precision)


def op_inputs(op: UnOp | BinOp | TernOp, n: int, dtype: Any) -> list[np.ndarray]:
    """Operands in each op's domain (positive for log/sqrt/pow bases, a few zeros)."""
    rng = np.random.default_rng(len(op.name))
    positive = op in (UnOp.LOG, UnOp.LOG2, UnOp.SQRT, UnOp.RECIP_SQRT, BinOp.POW)
    xs = []
    for _ in range(3):
        x = rng.uniform(0.1, 3.0, n) if positive else rng.uniform(-3.0, 3.0, n)
        x[::7] = 0.0 if not positive else x[::7]
        xs.append(x.astype(dtype))
    return xs


def load_moons() -> ModuleType:
    spec = importlib.util.spec_from_file_location("moons_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def moons_step(n: int = 64, batch: int = 16, seed: int = 1) -> dict[str, Any]:
    """The training step of examples/moons.py: code, loss, params, static argument names."""
    moons = load_moons()
    oc.set_seed(seed)
    xs, ys = moons.half_moons(n, 0.1, seed)
    nb = n // batch
    x_all = oc.ndarray(xs.reshape(nb, batch, 2), batch_axes=2, label="moons_x")
    y_all = oc.ndarray(ys.reshape(nb, batch, 1), batch_axes=2, label="moons_y")
    b, step = oc.static_index("batch"), oc.static_index("step")
    model = moons.make_model()
    x, y = x_all.batch_slice(b), y_all.batch_slice(b)
    margin = oc.relu(1.0 - y * model(x))
    loss = oc.einsum("b|o=>o", margin) * (1.0 / batch)
    lr = oc.node("learning_rate", output_dims=[1])
    code = [oc.grad_update(loss), moons.decaying_lr(lr, 0.1, step, 100.0),
            oc.sgd_update(loss, learning_rate=lr, momentum=0.9)]
    return {"code": code, "loss": loss, "n_batches": nb, "model": model, "x_all": x_all}


def conv(size: tuple[int, ...] = (2, 6, 3, 4, 3)) -> tuple[oc.Tensor, np.ndarray]:
    """A valid 2-D convolution as an affine einsum, and its float64 reference."""
    b, n, ci, co, k = size
    rng = np.random.default_rng(0)
    x = rng.standard_normal((b, n, n, ci)).astype(np.float32)
    w = rng.standard_normal((co, k, k, ci)).astype(np.float32)
    y = oc.einsum(CONV_SPEC, oc.ndarray(x, batch_axes=1, label="img"),
                  oc.ndarray(w, input_axes=3, label="kernel"))
    win = np.lib.stride_tricks.sliding_window_view(x.astype(np.float64), (k, k), axis=(1, 2))
    ref = np.einsum("bhwcij,oijc->bhwo", win, w.astype(np.float64))
    return y, ref
