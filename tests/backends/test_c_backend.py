"""C backend: rendered source (golden), results against NumPy, cache, errors, threefry."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from ocannl_ast.backends import c_backend, compiler
from ocannl_ast.backends.c_backend import c_const, c_ident, compile_c, render_c
from ocannl_ast.errors import BackendError, RuntimeDataError
from ocannl_ast.lowering.loop_ir import (
    Binary,
    BinOp,
    Buffer,
    CheckIndex,
    Comment,
    Const,
    DeclLocal,
    Expr,
    Fill,
    ForLoop,
    Get,
    GetLocal,
    IndexExpr,
    LoopProgram,
    Precision,
    Seq,
    SetCell,
    SetLocal,
    Symbol,
    SymbolValue,
    Ternary,
    TernOp,
    ThreefryUniform,
    Unary,
    UnOp,
    const_index,
    index_of,
)
from ocannl_ast.lowering.loop_print import print_program
from ocannl_ast.lowering.loop_verify import verify_program
from ocannl_ast.lowering.threefry import uniform_cells

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from golden_util import assert_golden

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed")

I, J, K = Symbol(101, "i"), Symbol(102, "j"), Symbol(103, "k")
BATCH = Symbol(200, "batch")
F32, F64 = Precision.FLOAT32, Precision.FLOAT64
PRECISIONS = [pytest.param(F32, id="f32"), pytest.param(F64, id="f64")]
DTYPE = {F32: np.float32, F64: np.float64}


def ix(*syms: Symbol) -> tuple[IndexExpr, ...]:
    return tuple(index_of(s) for s in syms)


def add(a: Expr, b: Expr) -> Binary:
    return Binary(BinOp.ADD, a, b)


def mul(a: Expr, b: Expr) -> Binary:
    return Binary(BinOp.MUL, a, b)


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("c_cache")


@pytest.fixture
def build(cache: Path) -> Callable[[LoopProgram], c_backend.CompiledRoutine]:
    def _build(prog: LoopProgram) -> c_backend.CompiledRoutine:
        verify_program(prog)
        return compile_c(prog, cache_dir=cache)

    return _build


# ---- the hand-built programs ---------------------------------------------------------


def matmul(p: Precision = F32) -> LoopProgram:
    c, a, b = Buffer(1, "c", (2, 4)), Buffer(2, "a", (2, 3)), Buffer(3, "b", (3, 4))
    step = SetCell(c, ix(I, J), add(Get(c, ix(I, J)), mul(Get(a, ix(I, K)), Get(b, ix(K, J)))))
    body = Seq((Fill(c, 0.0), ForLoop(I, 2, ForLoop(J, 4, ForLoop(K, 3, step)))))
    return LoopProgram("matmul", (c, a, b), (), body, p)


def broadcast_add(p: Precision = F32) -> LoopProgram:
    y, x, s = Buffer(1, "y", (3, 5)), Buffer(2, "x", (3, 5)), Buffer(3, "s", ())
    value = add(Get(x, ix(I, J)), add(Get(s, ()), Const(0.5)))
    body = ForLoop(I, 3, ForLoop(J, 5, SetCell(y, ix(I, J), value)))
    return LoopProgram("bcast", (y, x, s), (), body, p)


def row_sum(p: Precision = F32) -> LoopProgram:
    r, x = Buffer(1, "r", (4,)), Buffer(2, "x", (4, 6))
    step = SetCell(r, ix(I), add(Get(r, ix(I)), Get(x, ix(I, J))))
    body = Seq((Fill(r, 0.0), ForLoop(I, 4, ForLoop(J, 6, step))))
    return LoopProgram("row_sum", (r, x), (), body, p)


GOLDEN_PROGRAMS = {"matmul": matmul, "broadcast": broadcast_add, "reduction": row_sum}


@pytest.mark.parametrize("name", sorted(GOLDEN_PROGRAMS))
def test_golden_loop_ir_and_c_source(name: str) -> None:
    prog = GOLDEN_PROGRAMS[name]()
    verify_program(prog)
    assert_golden(f"loop_print_{name}.txt", print_program(prog))
    assert_golden(f"c_backend_{name}.c", render_c(prog))
    assert render_c(prog) == render_c(GOLDEN_PROGRAMS[name]())


# ---- numerics against NumPy ----------------------------------------------------------


@pytest.mark.parametrize("p", PRECISIONS)
def test_matmul_broadcast_reduction(build, p: Precision) -> None:
    rng = np.random.default_rng(0)
    dt = DTYPE[p]
    a, b = rng.standard_normal((2, 3)).astype(dt), rng.standard_normal((3, 4)).astype(dt)
    c = np.full((2, 4), np.nan, dt)  # Fill must clear it
    build(matmul(p))([c, a, b])
    expected = np.zeros((2, 4), dt)
    for k in range(3):  # the same summation order as the loops: exact agreement
        expected = expected + a[:, k : k + 1] * b[k : k + 1, :]
    np.testing.assert_array_equal(c, expected)

    x, s, y = rng.standard_normal((3, 5)).astype(dt), np.array(2.25, dt), np.empty((3, 5), dt)
    build(broadcast_add(p))([y, x, s])
    np.testing.assert_array_equal(y, x + (s + dt(0.5)))

    x, r = rng.standard_normal((4, 6)).astype(dt), np.empty(4, dt)
    build(row_sum(p))([r, x])
    np.testing.assert_allclose(r, x.sum(axis=1), rtol=1e-5 if p is F32 else 1e-12)


@pytest.mark.parametrize("p", PRECISIONS)
def test_strided_write(build, p: Precision) -> None:
    y, x = Buffer(1, "y", (9,)), Buffer(2, "x", (4,))
    strided = (IndexExpr(((2, I),), 1),)  # y[2*i + 1] = x[i]
    body = Seq((Fill(y, -1.0), ForLoop(I, 4, SetCell(y, strided, Get(x, ix(I))))))
    prog = LoopProgram("strided", (y, x), (), body, p)
    assert "y[2*i0 + 1] = x[i0];" in render_c(prog)
    dt = DTYPE[p]
    xs, ys = np.arange(1, 5, dtype=dt), np.zeros(9, dt)
    build(prog)([ys, xs])
    expected = np.full(9, -1.0, dt)
    expected[1::2] = xs
    np.testing.assert_array_equal(ys, expected)


@pytest.mark.parametrize("p", PRECISIONS)
def test_where_relu_exp_expression(build, p: Precision) -> None:
    y, x = Buffer(1, "y", (7,)), Buffer(2, "x", (7,))
    xi = Get(x, ix(I))
    positive = Binary(BinOp.LT, Const(0.0), xi)
    doubled_relu = mul(Unary(UnOp.RELU, xi), Const(2.0))
    value: Expr = Ternary(TernOp.WHERE, positive, Unary(UnOp.EXP, xi), doubled_relu)
    value = add(value, Binary(BinOp.RELU_GATE, xi, Const(10.0)))
    prog = LoopProgram("wre", (y, x), (), ForLoop(I, 7, SetCell(y, ix(I), value)), p)
    dt = DTYPE[p]
    xs, ys = np.array([-3, -1, -0.0, 0, 0.5, 1, 2], dt), np.empty(7, dt)
    build(prog)([ys, xs])
    expected = np.where(xs > 0, np.exp(xs), np.maximum(xs, 0) * 2) + np.where(xs > 0, 10, 0)
    np.testing.assert_allclose(ys, expected.astype(dt), rtol=1e-6 if p is F32 else 1e-15)


def _np_where(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    return np.where(a != 0, b, c)


def _np_ops() -> dict[UnOp | BinOp | TernOp, Callable[..., np.ndarray]]:
    def as_float(fn: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
        return lambda *xs: fn(*xs).astype(xs[0].dtype)

    return {
        UnOp.IDENTITY: lambda x: x, UnOp.NEG: np.negative, UnOp.RELU: lambda x: np.maximum(x, 0),
        UnOp.EXP: np.exp, UnOp.LOG: np.log, UnOp.TANH: np.tanh, UnOp.SIN: np.sin,
        UnOp.COS: np.cos, UnOp.SQRT: np.sqrt, UnOp.RECIP: lambda x: 1 / x,
        UnOp.NOT: as_float(lambda x: x == 0), UnOp.SIGN: np.sign,
        BinOp.ADD: np.add, BinOp.SUB: np.subtract, BinOp.MUL: np.multiply,
        BinOp.DIV: np.divide, BinOp.POW: np.power, BinOp.MAX: np.maximum,
        BinOp.MIN: np.minimum, BinOp.LT: as_float(np.less), BinOp.LE: as_float(np.less_equal),
        BinOp.EQ: as_float(np.equal), BinOp.NE: as_float(np.not_equal),
        BinOp.ARG1: lambda a, b: a, BinOp.ARG2: lambda a, b: b,
        BinOp.RELU_GATE: lambda a, b: np.where(a > 0, b, 0).astype(a.dtype),
        TernOp.WHERE: _np_where, TernOp.FMA: lambda a, b, c: a * b + c,
    }


NP_OPS = _np_ops()
INEXACT = {UnOp.EXP, UnOp.LOG, UnOp.TANH, UnOp.SIN, UnOp.COS, BinOp.POW, TernOp.FMA}
POSITIVE_ARG = {UnOp.LOG, UnOp.SQRT, BinOp.POW}


def _op_program(op: UnOp | BinOp | TernOp, p: Precision, n: int) -> LoopProgram:
    y = Buffer(0, "y", (n,))
    args = tuple(Buffer(k + 1, f"a{k}", (n,)) for k in range(3))
    gets = [Get(b, ix(I)) for b in args]
    expr: Expr
    if isinstance(op, UnOp):
        expr = Unary(op, gets[0])
    elif isinstance(op, BinOp):
        expr = Binary(op, gets[0], gets[1])
    else:
        expr = Ternary(op, *gets)
    return LoopProgram(f"op_{op.value}", (y, *args), (), ForLoop(I, n, SetCell(y, ix(I), expr)), p)


@pytest.mark.parametrize("p", PRECISIONS)
@pytest.mark.parametrize("op", list(NP_OPS), ids=lambda op: op.value)
def test_every_op_against_numpy(build, op: UnOp | BinOp | TernOp, p: Precision) -> None:
    dt = DTYPE[p]
    a = np.array([-2.5, -1, 0, 0, 0.5, 1, 3, 7], dt)
    b = np.array([1.5, -1, 0, 2, 0.5, -4, 3, 0.25], dt)
    c = np.array([3, 2, 1, 0, -1, -2, -3, 0.125], dt)
    if op in POSITIVE_ARG:
        a = np.abs(a) + dt(0.25)
    if op is BinOp.DIV:
        b = b + dt(10)
    y = np.empty_like(a)
    build(_op_program(op, p, len(a)))([y, a, b, c])
    arity = 1 if isinstance(op, UnOp) else 2 if isinstance(op, BinOp) else 3
    with np.errstate(divide="ignore"):
        expected = NP_OPS[op](*(a, b, c)[:arity])
    if op in INEXACT:
        np.testing.assert_allclose(y, expected, rtol=1e-6 if p is F32 else 1e-14)
    else:
        np.testing.assert_array_equal(y, expected)


@pytest.mark.parametrize("op", [UnOp.RELU, UnOp.SIGN, BinOp.MAX, BinOp.MIN], ids=str)
def test_nan_propagates_like_numpy(build, op: UnOp | BinOp) -> None:
    nan = np.nan
    a = np.array([nan, 1, nan, -1], np.float32)
    b = np.array([2, nan, nan, -3], np.float32)
    y = np.empty_like(a)
    build(_op_program(op, F32, 4))([y, a, b, b])
    expected = NP_OPS[op](a, b) if isinstance(op, BinOp) else NP_OPS[op](a)
    np.testing.assert_array_equal(y, expected)


@pytest.mark.parametrize("p", PRECISIONS)
def test_constants_are_exact(build, p: Precision) -> None:
    inf, nan = float("inf"), float("nan")
    values = [0.1, -0.0, inf, -inf, nan, 1 / 3, 1e-45, 3.4e38, 1e39, -2.0]
    y = Buffer(0, "y", (len(values),))
    sets = tuple(SetCell(y, (const_index(k),), Const(v)) for k, v in enumerate(values))
    ys = np.zeros(len(values), DTYPE[p])
    with np.errstate(over="ignore"):
        expected = np.array(values, DTYPE[p])
    build(LoopProgram("consts", (y,), (), Seq(sets), p))([ys])
    np.testing.assert_array_equal(ys, expected)
    assert np.array_equal(np.signbit(ys), np.signbit(expected))
    assert c_const(-0.5, F32) == "(-0.5f)" and c_const(float("-inf"), F64) == "(-INFINITY)"


@pytest.mark.parametrize("p", PRECISIONS)
def test_locals_symbol_values_and_nested_blocks(build, p: Precision) -> None:
    r, x = Buffer(1, "r", (3,)), Buffer(2, "x", (3, 4))
    per_row = Seq((
        DeclLocal("acc", Const(0.0)),
        ForLoop(J, 4, SetLocal("acc", add(GetLocal("acc"), Get(x, ix(I, J))))),
        Seq((
            DeclLocal("t", SymbolValue(I)),
            SetCell(r, ix(I), add(GetLocal("acc"), GetLocal("t"))),
        )),
        Seq((DeclLocal("t", Const(0.0)), Comment("a */ comment"))),  # a second `t`, own block
    ))
    prog = LoopProgram("locals", (r, x), (), ForLoop(I, 3, per_row), p)
    dt = DTYPE[p]
    xs, rs = np.arange(12, dtype=dt).reshape(3, 4), np.empty(3, dt)
    build(prog)([rs, xs])
    np.testing.assert_array_equal(rs, xs.sum(axis=1) + np.arange(3, dtype=dt))


@pytest.mark.parametrize("p", PRECISIONS)
def test_check_index_with_static_arg(build, p: Precision) -> None:
    y, x = Buffer(1, "y", (4,)), Buffer(2, "x", (3, 4))
    body = Seq((
        CheckIndex(index_of(BATCH), 3, code=7),
        ForLoop(J, 4, SetCell(y, ix(J), add(Get(x, ix(BATCH, J)), SymbolValue(BATCH)))),
    ))
    routine = build(LoopProgram("slice", (y, x), (BATCH,), body, p))
    dt = DTYPE[p]
    xs, ys = np.arange(12, dtype=dt).reshape(3, 4), np.empty(4, dt)
    for batch in range(3):
        routine([ys, xs], [batch])
        np.testing.assert_array_equal(ys, xs[batch] + batch)
    for batch in (3, -1, 1 << 40):
        with pytest.raises(RuntimeDataError, match=r"code 7: index s_batch must lie in \[0, 3\)"):
            routine([ys, xs], [batch])
    with pytest.raises(BackendError, match="1 static ints"):
        routine([ys, xs])


@pytest.mark.parametrize("p", PRECISIONS)
def test_threefry_uniform_bit_identical_to_numpy(build, p: Precision) -> None:
    key = (0x12345678, 0x9ABCDEF0, 17, 0xFFFFFFFF)
    y = Buffer(1, "y", (16, 64))
    counter = IndexExpr(((64, I), (1, J)), 0)
    body = ForLoop(I, 16, ForLoop(J, 64, SetCell(y, ix(I, J), ThreefryUniform(key, counter))))
    ys = np.empty((16, 64), DTYPE[p])
    build(LoopProgram("rand", (y,), (), body, p))([ys])
    expected = uniform_cells(key, 16 * 64).astype(DTYPE[p]).reshape(16, 64)
    assert np.array_equal(ys.view(np.uint8), expected.view(np.uint8))


def test_unsafe_names_are_renamed(build) -> None:
    e, g, k = Buffer(1, "exp", (2,)), Buffer(2, "w.grad", (2,)), Buffer(3, "i0", (2,))
    value = Unary(UnOp.EXP, add(Get(g, ix(I)), GetLocal("i0")))  # a local named like a buffer
    body = Seq((DeclLocal("i0", Get(k, ix(I))), SetCell(e, ix(I), value)))
    prog = LoopProgram("exp", (e, g, k), (), ForLoop(I, 2, body))
    src = render_c(prog)
    params = "float* restrict b_exp, float* restrict w_grad, float* restrict b_i0"
    assert f"int ocannl_exp_f0({params})" in src  # the function the entry point calls
    assert "int ocannl_exp(float* const* bufs, const int64_t* statics)" in src
    es, gs, ks = np.empty(2, np.float32), np.array([0, 1], np.float32), np.array([1, 1], np.float32)
    build(prog)([es, gs, ks])
    np.testing.assert_allclose(es, np.exp(gs + ks), rtol=1e-6)
    assert c_ident("2d") == "b_2d" and c_ident("float") == "b_float" and c_ident("ok") == "ok"
    build(LoopProgram("nothing", (), (), Seq(())))([])


# ---- calling errors ------------------------------------------------------------------


def test_wrong_arrays_raise(build) -> None:
    routine = build(row_sum())
    r, x = np.empty(4, np.float32), np.ones((4, 6), np.float32)
    routine([r, x])
    bad_calls = {
        "float64": [r, x.astype(np.float64)],
        "elements": [r, np.ones((4, 5), np.float32)],
        "c_contiguous=False": [r, np.ones((4, 12), np.float32)[:, ::2]],
        "c_contiguous=False, writeable": [r, np.asfortranarray(x)],
        "got list": [r, x.tolist()],
        "takes 2 arrays": [r],
    }
    for expected, arrays in bad_calls.items():
        with pytest.raises(BackendError, match=expected):
            routine(arrays)
    read_only = x.copy()
    read_only.flags.writeable = False
    routine([r, read_only])  # x is only read
    frozen = r.copy()
    frozen.flags.writeable = False
    with pytest.raises(BackendError, match="writeable=False"):
        routine([frozen, x])
    bcast, y, s = build(broadcast_add()), np.ones((3, 5), np.float32), np.ones((), np.float32)
    with pytest.raises(BackendError, match="written buffer 'y' aliases another"):
        bcast([y, y, s])


def test_repeated_calls_reuse_pointers_safely(build) -> None:
    routine = build(row_sum())
    r, x = np.empty(4, np.float32), np.ones((4, 6), np.float32)
    routine([r, x])
    x[:] = 2.0  # same arrays, new contents: the reused pointers see them
    routine([r, x])
    np.testing.assert_array_equal(r, np.full(4, 12.0, np.float32))
    x.resize((4, 7), refcheck=False)  # the data may move: the call must re-validate
    with pytest.raises(BackendError, match="24 elements"):
        routine([r, x])


# ---- compiling and the cache ---------------------------------------------------------


def test_cache_reuse_in_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = compile_c(matmul(), cache_dir=tmp_path)
    mtime = first.library_path.stat().st_mtime_ns

    def no_gcc(cmd: list[str]) -> subprocess.CompletedProcess[str]:
        raise AssertionError("gcc must not run for a cached routine")

    monkeypatch.setattr(compiler, "_run_gcc", no_gcc)
    second = compile_c(matmul(), cache_dir=tmp_path)
    assert second.library_path == first.library_path
    assert second.library_path.stat().st_mtime_ns == mtime
    assert first.source_path.read_text() == render_c(matmul())
    assert sorted(f.suffix for f in tmp_path.iterdir()) == [".c", ".json", ".so"]


CHILD = """
import sys
from ocannl_ast.backends import c_backend as cb, compiler
from ocannl_ast.lowering.loop_ir import Buffer, Fill, LoopProgram
if sys.argv[2] == "forbid":
    compiler._run_gcc = lambda cmd: sys.exit("gcc invoked")
y = Buffer(0, "y", (3,))
routine = cb.compile_c(LoopProgram("fill3", (y,), (), Fill(y, 2.0)), cache_dir=sys.argv[1])
print(routine.library_path)
"""


def _child(cache: Path, mode: str) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-c", CHILD, str(cache), mode]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_cache_shared_between_processes(tmp_path: Path) -> None:
    racers = [_child(tmp_path, "build") for _ in range(4)]  # concurrent first builds
    outputs = [proc.communicate(timeout=120) for proc in racers]
    assert all(proc.returncode == 0 for proc in racers), outputs
    paths = {out.strip() for out, _ in outputs}
    assert len(paths) == 1
    out, err = _child(tmp_path, "forbid").communicate(timeout=120)
    assert err == "" and out.strip() in paths
    assert not [f for f in tmp_path.iterdir() if f.name.endswith(".tmp")]


def test_compile_failure_names_the_c_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(BackendError) as info:
        compile_c(row_sum(), opt_flags=("-fno-such-flag-ocannl",), cache_dir=tmp_path)
    msg = str(info.value)
    c_files = list(tmp_path.glob("*.c"))
    assert len(c_files) == 1 and str(c_files[0]) in msg
    assert "-fno-such-flag-ocannl" in msg and "error" in msg
    assert not list(tmp_path.glob("*.so")) and not list(tmp_path.glob(".*.tmp"))
    monkeypatch.setenv("OCANNL_AST_CFLAGS", "-O1 -fbogus-env-flag")
    with pytest.raises(BackendError, match="fbogus-env-flag"):
        compile_c(row_sum(), cache_dir=tmp_path)


def test_env_flags_change_the_cache_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    default = compile_c(row_sum(), cache_dir=tmp_path)
    monkeypatch.setenv("OCANNL_AST_CFLAGS", "-O0")
    plain = compile_c(row_sum(), cache_dir=tmp_path)
    assert plain.library_path != default.library_path
    monkeypatch.delenv("OCANNL_AST_CFLAGS")
    monkeypatch.setenv("OCANNL_AST_CACHE", str(tmp_path / "env_cache"))
    assert compile_c(row_sum()).library_path.parent == tmp_path / "env_cache"


def test_verify_runs_first(tmp_path: Path) -> None:
    y = Buffer(0, "y", (2,))
    bad = LoopProgram("bad", (y,), (), ForLoop(I, 3, SetCell(y, ix(I), Const(1.0))))
    with pytest.raises(ValueError, match="outside"):
        compile_c(bad, cache_dir=tmp_path, verify=True)
    assert not list(tmp_path.iterdir())


def test_unbound_symbol_is_a_backend_error() -> None:
    y = Buffer(0, "y", (2,))
    with pytest.raises(BackendError, match="not bound"):
        render_c(LoopProgram("free", (y,), (), SetCell(y, ix(I), Const(0.0))))



def test_dialect_overrides_change_only_their_spellings() -> None:
    """A C dialect (as a CUDA one would) overrides qualifiers and spellings of CSyntax."""
    from ocannl_ast.backends.c_syntax import CSyntax

    class Dialect(CSyntax):
        def for_header(self, name: str, extent: int) -> str:
            return f"for (long {name} = 0; {name} != {extent}; {name}++) {{"

    dialect = Dialect(restrict="__restrict__", helper_qualifier="static __inline__",
                      kernel_qualifier="__attribute__((used)) ", index_type="long")
    y, x = Buffer(1, "y", (3,)), Buffer(2, "x", (3,))
    prog = LoopProgram("dia", (y, x), (BATCH,), ForLoop(I, 3, SetCell(
        y, ix(I), Binary(BinOp.MAX, Get(x, ix(I)), SymbolValue(BATCH)))))
    src = render_c(prog, dialect)
    assert "static __attribute__((noinline)) int dia_f0(float* __restrict__ y, " \
           "float* __restrict__ x, long s_batch) {" in src
    assert "__attribute__((used)) int dia(float* const* bufs, const long* statics) {" in src
    assert "for (long i0 = 0; i0 != 3; i0++) {" in src
    assert "static __inline__ float ocannl_select_f(" in src and "static inline" not in src
    assert render_c(prog) == render_c(prog, CSyntax())  # the default dialect is plain C
