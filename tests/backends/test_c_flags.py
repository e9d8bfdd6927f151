"""Results do not depend on gcc flags: -O2 and -O3 -march=native agree bit for bit.

gcc 12 at -O3 with AVX miscompiled the `c ? a[i] : b[i]` selects we used to emit (masked
loads with a reused mask: wrong `where` values and relu gradients); selects are now a
branch-free blend (see `ocannl_select` in the C dialect). These tests compile the same
programs under both flag sets, over shapes that exercise full vectors and epilogues.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import ocannl_ast as oc
from ocannl_ast.backends.c_backend import compile_c
from ocannl_ast.lowering.loop_ir import (
    Binary,
    BinOp,
    Buffer,
    Expr,
    ForLoop,
    Get,
    IndexExpr,
    LoopProgram,
    Precision,
    Seq,
    SetCell,
    Stmt,
    Symbol,
    Ternary,
    TernOp,
    Unary,
    UnOp,
    index_of,
)

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed")

O2, O3 = ("-O2",), ("-O3", "-march=native")
SHAPES = [(2, 3), (3, 3), (4, 5), (2, 7), (33,)]  # epilogues: the miscompiled cases
I, J = Symbol(1, "i"), Symbol(2, "j")


def _select_ops() -> dict[str, Callable[[Expr, Expr, Expr], Expr]]:
    def where(a: Expr, b: Expr, c: Expr) -> Expr:
        return Ternary(TernOp.WHERE, a, b, c)

    def chain(a: Expr, b: Expr, c: Expr) -> Expr:  # relu(a*b) gated, selected, compared
        gate = Binary(BinOp.RELU_GATE, a, Unary(UnOp.RELU, Binary(BinOp.MUL, a, b)))
        return where(Binary(BinOp.LT, b, c), gate, Binary(BinOp.MAX, c, Unary(UnOp.NEG, a)))

    return {
        "where": where,
        "relu_gate": lambda a, b, c: Binary(BinOp.RELU_GATE, a, b),
        "relu": lambda a, b, c: Unary(UnOp.RELU, a),
        "max": lambda a, b, c: Binary(BinOp.MAX, a, b),
        "min": lambda a, b, c: Binary(BinOp.MIN, a, b),
        "sign": lambda a, b, c: Unary(UnOp.SIGN, a),
        "lt": lambda a, b, c: Binary(BinOp.LT, a, b),
        "le": lambda a, b, c: Binary(BinOp.LE, a, b),
        "eq": lambda a, b, c: Binary(BinOp.EQ, a, b),
        "ne": lambda a, b, c: Binary(BinOp.NE, a, b),
        "not": lambda a, b, c: Unary(UnOp.NOT, a),
        "where_of_cmp": lambda a, b, c: where(Binary(BinOp.LE, a, c), b, c),
        "chain": chain,
    }


OPS = _select_ops()


def _nest(shape: tuple[int, ...], body: Callable[[tuple[IndexExpr, ...]], Stmt]) -> Stmt:
    syms = (I, J)[: len(shape)]
    stmt = body(tuple(index_of(s) for s in syms))
    for sym, extent in reversed(list(zip(syms, shape))):
        stmt = ForLoop(sym, extent, stmt)
    return stmt


def sweep_program(p: Precision) -> tuple[LoopProgram, list[tuple[str, tuple[int, ...]]]]:
    """One routine: for each op and shape, ``y[op, shape] = op(a, b, c)`` in its own nest."""
    buffers: list[Buffer] = []
    stmts: list[Stmt] = []
    cases: list[tuple[str, tuple[int, ...]]] = []
    for name, op in OPS.items():
        for shape in SHAPES:
            k = len(cases)
            y, a, b, c = (Buffer(4 * k + j, f"{v}{k}", shape) for j, v in enumerate("yabc"))
            buffers += [y, a, b, c]

            def body(ix: tuple[IndexExpr, ...], y=y, a=a, b=b, c=c, op=op) -> Stmt:
                return SetCell(y, ix, op(Get(a, ix), Get(b, ix), Get(c, ix)))

            stmts.append(_nest(shape, body))
            cases.append((name, shape))
    return LoopProgram(f"sweep_{p.value}", tuple(buffers), (), Seq(tuple(stmts)), p), cases


def _inputs(shape: tuple[int, ...], dt: type, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    special = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 0.5], dt)
    arrays = []
    for _ in range(3):
        x = rng.choice(special, size=shape).astype(dt)
        mask = rng.random(shape) < 0.5
        x[mask] = rng.standard_normal(int(mask.sum())).astype(dt)
        arrays.append(x)
    arrays[2][..., ::2] = arrays[0][..., ::2]  # ties between a and c
    return arrays


def _numpy(name: str, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    dt = a.dtype.type
    fl = lambda m: m.astype(a.dtype)  # noqa: E731
    where = lambda m, x, y: np.where(m != 0, x, y)  # noqa: E731
    table: dict[str, Callable[[], np.ndarray]] = {
        "where": lambda: where(a, b, c), "relu_gate": lambda: np.where(a > 0, b, dt(0)),
        "relu": lambda: np.maximum(a, dt(0)), "max": lambda: np.maximum(a, b),
        "min": lambda: np.minimum(a, b), "sign": lambda: np.sign(a),
        "lt": lambda: fl(a < b), "le": lambda: fl(a <= b), "eq": lambda: fl(a == b),
        "ne": lambda: fl(a != b), "not": lambda: fl(a == 0),
        "where_of_cmp": lambda: np.where(a <= c, b, c),
        "chain": lambda: np.where(b < c, np.where(a > 0, np.maximum(a * b, dt(0)), dt(0)),
                                  np.maximum(c, -a)),
    }
    with np.errstate(all="ignore"):
        return table[name]().astype(a.dtype)


@pytest.mark.parametrize("p", [Precision.FLOAT32, Precision.FLOAT64], ids=["f32", "f64"])
def test_selects_and_comparisons_identical_under_o2_and_o3(
    p: Precision, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OCANNL_AST_CFLAGS", raising=False)
    prog, cases = sweep_program(p)
    dt = np.float32 if p is Precision.FLOAT32 else np.float64
    results = {}
    for flags in (O2, O3):
        arrays: list[np.ndarray] = []
        for k, (_, shape) in enumerate(cases):
            arrays += [np.full(shape, 7.0, dt), *_inputs(shape, dt, seed=k)]
        compile_c(prog, opt_flags=flags, cache_dir=tmp_path)(arrays)
        results[flags] = arrays
    bad = []
    for k, (name, shape) in enumerate(cases):
        y2, a, b, c = results[O2][4 * k : 4 * k + 4]
        y3 = results[O3][4 * k]
        if y2.tobytes() != y3.tobytes():
            bad.append(f"{name} {shape}: -O2 {y2.ravel()} vs -O3 {y3.ravel()}")
        elif not np.array_equal(y2, _numpy(name, a, b, c), equal_nan=True):
            bad.append(f"{name} {shape}: {y2.ravel()} vs NumPy {_numpy(name, a, b, c).ravel()}")
    assert not bad, "\n".join(bad)


# ---- the same, from the user's side: float64 gradients must not depend on flags ------


def _rnd(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape)


def _loss(out: oc.Tensor, w: np.ndarray) -> oc.Tensor:
    return oc.einsum("ij;ij=>", out, oc.ndarray(w))


LOSSES: dict[str, Callable[[oc.Tensor, oc.Tensor, oc.Tensor], oc.Tensor]] = {
    "relu": lambda a, b, c: oc.relu(a * b) + c,
    "where_lt": lambda a, b, c: oc.where(oc.lt(a, b), a * 2.0, oc.exp(c)),
    "where_const": lambda a, b, c: oc.where(oc.ndarray((_rnd(3, 5, seed=9) > 0) * 1.0), a * a,
                                                c * b),
    "relu_chain": lambda a, b, c: oc.relu(oc.tanh(a) - oc.relu(b) * c) + oc.relu(-a),
    "max_pool": lambda a, b, c: oc.einsum_max("ij;ij=>ij", a, b) * c,
}


def _grads(name: str, flags: tuple[str, ...], cache: Path,
           monkeypatch: pytest.MonkeyPatch) -> list[np.ndarray]:
    monkeypatch.setenv("OCANNL_AST_CFLAGS", " ".join(flags))
    monkeypatch.setenv("OCANNL_AST_CACHE", str(cache))
    inits = [_rnd(3, 5, seed=s) for s in range(3)]
    ps = [oc.param(f"p{k}", output_dims=[3, 5], init=x) for k, x in enumerate(inits)]
    loss = _loss(LOSSES[name](*ps), _rnd(3, 5, seed=7))
    value, grads = oc.value_and_grad(loss, ps, precision="float64")
    return [np.asarray(value), *map(np.asarray, grads)]


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_float64_gradients_identical_under_o2_and_o3(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    o2 = _grads(name, O2, tmp_path, monkeypatch)
    o3 = _grads(name, O3, tmp_path, monkeypatch)
    for x2, x3 in zip(o2, o3):
        assert x2.tobytes() == x3.tobytes(), (name, x2, x3)
    if name == "relu":  # and against the exact gradient
        a, b, w = _rnd(3, 5, seed=0), _rnd(3, 5, seed=1), _rnd(3, 5, seed=7)
        np.testing.assert_array_equal(o3[1], np.where(a * b > 0, w * b, 0.0))
