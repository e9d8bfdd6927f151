"""The scheduling passes (`lowering.schedule`, `lowering.fuse_nests`, `lowering.parallel`):
what each may change and what it must leave alone (a hazard would silently change values),
checked by compiling both versions and comparing the bits; random pointwise/reduction
programs against the unscheduled ones; and from the user's side, a conv net and an
attention step with Adam give the same bits with the passes on and off, and with 1 and 2
threads."""

# mypy: disable-error-code="operator, arg-type"

from __future__ import annotations

import random
import shutil

import numpy as np
import pytest

import ocannl_ast as oc
from ocannl_ast.backends.c_backend import compile_c, render_c
from ocannl_ast.lowering.fuse_nests import fuse_nests
from ocannl_ast.lowering.fuse_rows import fuse_rows
from ocannl_ast.lowering.loop_ir import (
    Binary,
    BinOp,
    Buffer,
    Const,
    DeclLocal,
    Expr,
    ForLoop,
    Get,
    GetLocal,
    IndexExpr,
    LoopProgram,
    Precision,
    Seq,
    SetCell,
    SetLocal,
    Stmt,
    Symbol,
    Unary,
    UnOp,
    index_of,
)
from ocannl_ast.lowering.nests import units
from ocannl_ast.lowering.parallel import mark_parallel
from ocannl_ast.lowering.schedule import holds_contraction, interchange, unroll_reductions
from ocannl_ast.lowering.walk import stmt_nodes

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed")

_ids = iter(range(1000, 1_000_000))


def _sym(name: str = "i") -> Symbol:
    return Symbol(next(_ids), name)


def _prog(*stmts: Stmt, bufs: tuple[Buffer, ...]) -> LoopProgram:
    return LoopProgram("sched", bufs, (), Seq(stmts), Precision.FLOAT32)


def _run(prog: LoopProgram, init: dict[int, np.ndarray]) -> list[bytes]:
    arrays = [init[b.id].copy() for b in prog.buffers]
    compile_c(prog)(arrays)
    return [a.tobytes() for a in arrays]


def _inputs(bufs: tuple[Buffer, ...], seed: int) -> dict[int, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {}
    for b in bufs:
        a = rng.normal(size=b.dims).astype(np.float32)
        a.reshape(-1)[:: 7] = np.float32(-np.inf) if b.id % 2 else np.float32(np.nan)
        out[b.id] = a
    return out


def _pointwise(dst: Buffer, value: object, dims: tuple[int, int] = (4, 6)) -> Stmt:
    """``for i, j: dst[i, j] = value(i, j)`` (value: a function of the two index exprs)."""
    i, j = _sym("i"), _sym("j")
    ix = (index_of(i), index_of(j))
    assert callable(value)
    return ForLoop(i, dims[0], ForLoop(j, dims[1], SetCell(dst, ix, value(*ix))))


A, B, C, D = (Buffer(k, n, (4, 6)) for k, n in enumerate("abcd", start=1))
SQ = Buffer(5, "sq", (5, 5))
SQ2 = Buffer(6, "sq2", (5, 5))


# ---- fusion ---------------------------------------------------------------------------


def test_fusion_merges_a_chain_and_keeps_the_bits() -> None:
    s1 = _pointwise(B, lambda i, j: Binary(BinOp.MUL, Get(A, (i, j)), Const(2.0)))
    s2 = _pointwise(C, lambda i, j: Binary(BinOp.ADD, Get(B, (i, j)), Get(A, (i, j))))
    s3 = _pointwise(B, lambda i, j: Unary(UnOp.EXP, Get(C, (i, j))))  # B rewritten in place
    prog = _prog(s1, s2, s3, bufs=(A, B, C))
    out = fuse_nests(prog)
    assert out.changed == 2
    assert len([u for u in units(out.prog.body) if isinstance(u, ForLoop)]) == 1
    init = _inputs(prog.buffers, 0)
    assert _run(prog, init) == _run(out.prog, init)


@pytest.mark.parametrize("hazard", ["shifted", "transposed", "reads_later_write",
                                    "different_extents"])
def test_fusion_refuses_cross_iteration_dependences(hazard: str) -> None:
    if hazard == "shifted":  # c[i, j] reads a[i, j + 1]: not yet written when fused
        i, j, i2, j2 = _sym(), _sym(), _sym(), _sym()
        s1 = ForLoop(i2, 4, ForLoop(j2, 5, SetCell(
            A, (index_of(i2), index_of(j2)), Get(B, (index_of(i2), index_of(j2))))))
        s2 = ForLoop(i, 4, ForLoop(j, 5, SetCell(C, (index_of(i), index_of(j)),
                                                 Get(A, (index_of(i), index_of(j, 1, 1))))))
        bufs: tuple[Buffer, ...] = (A, B, C)
    elif hazard == "transposed":  # sq2[i, j] reads sq[j, i]
        s1 = _pointwise(SQ, lambda i, j: Const(1.0), (5, 5))
        s2 = _pointwise(SQ2, lambda i, j: Get(SQ, (j, i)), (5, 5))
        bufs = (SQ, SQ2)
    elif hazard == "reads_later_write":  # the first reads b[i, 5 - j], the second writes b
        i, j = _sym(), _sym()
        s1 = ForLoop(i, 4, ForLoop(j, 6, SetCell(A, (index_of(i), index_of(j)),
                                                 Get(B, (index_of(i), index_of(j, -1, 5))))))
        s2 = _pointwise(B, lambda i, j: Const(3.0))
        bufs = (A, B)
    else:
        s1 = _pointwise(A, lambda i, j: Const(1.0))
        s2 = _pointwise(C, lambda i, j: Get(A, (i, j)), (4, 5))
        bufs = (A, C)
    prog = _prog(s1, s2, bufs=bufs)
    out = fuse_nests(prog)
    assert out.changed == 0
    init = _inputs(bufs, 1)
    assert _run(prog, init) == _run(out.prog, init)


def test_fusion_merges_pointwise_accumulating_products() -> None:
    """``c[i, j] = c[i, j] + a[i, j] * b[i, j]`` (a gradient several readers add into) reads
    one cell per iteration: no contraction kernel can take it, so it fuses with its
    neighbours; a summed one (a loop it does not index) stays a nest of its own."""
    def acc(dst: Buffer, x: Buffer, y: Buffer) -> Stmt:
        return _pointwise(dst, lambda i, j: Binary(BinOp.ADD, Get(dst, (i, j)), Binary(
            BinOp.MUL, Get(x, (i, j)), Get(y, (i, j)))))

    s1 = _pointwise(B, lambda i, j: Binary(BinOp.MUL, Get(A, (i, j)), Const(2.0)))
    prog = _prog(s1, acc(C, A, B), acc(C, B, B), bufs=(A, B, C))
    out = fuse_nests(prog)
    assert out.changed == 2
    assert not holds_contraction(prog.body)
    init = _inputs(prog.buffers, 7)
    assert _run(prog, init) == _run(out.prog, init)
    row = Buffer(8, "row", (4,))
    i, j = _sym("i"), _sym("j")
    summed = ForLoop(i, 4, ForLoop(j, 6, SetCell(row, (index_of(i),), Binary(
        BinOp.ADD, Get(row, (index_of(i),)), Binary(BinOp.MUL, Get(A, (index_of(i), index_of(j))),
                                                   Get(B, (index_of(i), index_of(j))))))))
    prog2 = _prog(s1, summed, bufs=(A, B, row))
    assert holds_contraction(summed)
    assert fuse_nests(prog2).changed == 0


def _row_max_then_shift(shift: int) -> LoopProgram:
    """m[i] = max_k x[i, k]; y[i, k] = x[i, k] - m[i + shift] (shift 1 reads the next row's
    max, not yet computed when fused row by row)."""
    x, y, m = Buffer(30, "x", (4, 20)), Buffer(31, "y", (4, 20)), Buffer(32, "m", (5,))
    i, k, i2, k2 = _sym("i"), _sym("k"), _sym("i"), _sym("k")
    step = Binary(BinOp.MAX, GetLocal("mx"), Get(x, (index_of(i), index_of(k))))
    red = ForLoop(i, 4, Seq((DeclLocal("mx", Const(-np.inf)), ForLoop(k, 20, SetLocal("mx", step)),
                             SetCell(m, (index_of(i),), GetLocal("mx")))))
    sub = ForLoop(i2, 4, ForLoop(k2, 20, SetCell(y, (index_of(i2), index_of(k2)), Binary(
        BinOp.SUB, Get(x, (index_of(i2), index_of(k2))), Get(m, (index_of(i2, 1, shift),))))))
    return _prog(red, sub, bufs=(x, y, m))


@pytest.mark.parametrize("shift", [0, 1])
def test_row_fusion_merges_rows_only_when_each_row_is_its_own(shift: int) -> None:
    prog = _row_max_then_shift(shift)
    out = fuse_rows(prog)
    assert out.changed == (1 if shift == 0 else 0)
    init = _inputs(prog.buffers, 5)
    assert _run(prog, init) == _run(out.prog, init)


# ---- interchange and unrolling --------------------------------------------------------


def test_interchange_puts_the_unit_stride_innermost() -> None:
    i, j = _sym("i"), _sym("j")
    # for j: for i: a[i, j] = a[i, j] + b[i, j]: strides (1 for j) inner after interchange
    body = SetCell(A, (index_of(i), index_of(j)),
                   Binary(BinOp.ADD, Get(A, (index_of(i), index_of(j))),
                          Get(B, (index_of(i), index_of(j)))))
    prog = _prog(ForLoop(j, 6, ForLoop(i, 4, body)), bufs=(A, B))
    out = interchange(prog)
    assert out.changed == 1
    loops = [x for x in stmt_nodes(out.prog.body) if isinstance(x, ForLoop)]
    assert [lp.symbol for lp in loops] == [i, j]
    init = _inputs(prog.buffers, 2)
    assert _run(prog, init) == _run(out.prog, init)


def test_interchange_leaves_a_repeated_write_alone() -> None:
    i, k = _sym("i"), _sym("k")
    acc = Buffer(9, "acc", (4,))
    # for k: for i: acc[i] = acc[i] + b[i, k]: the order of each cell's terms matters
    body = SetCell(acc, (index_of(i),), Binary(BinOp.ADD, Get(acc, (index_of(i),)),
                                               Get(B, (index_of(i), index_of(k)))))
    prog = _prog(ForLoop(k, 6, ForLoop(i, 4, body)), bufs=(acc, B))
    assert interchange(prog).changed == 0


def _reduction(op: BinOp, extent: int, init: float = 0.0) -> tuple[LoopProgram, Buffer]:
    out = Buffer(10, "out", (4,))
    i, r = _sym("i"), _sym("r")
    src = Buffer(11, "src", (4, extent))
    step = Binary(op, GetLocal("acc"), Unary(UnOp.EXP, Get(src, (index_of(i), index_of(r)))))
    body = Seq((DeclLocal("acc", Const(init)), ForLoop(r, extent, SetLocal("acc", step)),
                SetCell(out, (index_of(i),), GetLocal("acc"))))
    return _prog(ForLoop(i, 4, body), bufs=(out, src)), out


@pytest.mark.parametrize("op", [BinOp.ADD, BinOp.MAX])
def test_unrolling_small_reductions_keeps_the_order(op: BinOp) -> None:
    prog, _ = _reduction(op, 5, -np.inf if op is BinOp.MAX else 0.0)
    out = unroll_reductions(prog)
    assert out.changed == 1
    assert not any(isinstance(x, SetLocal) for x in stmt_nodes(out.prog.body))
    init = _inputs(prog.buffers, 3)
    assert _run(prog, init) == _run(out.prog, init)


def test_no_unrolling_of_long_reductions_or_products() -> None:
    assert unroll_reductions(_reduction(BinOp.ADD, 40)[0]).changed == 0
    out = Buffer(12, "o", (4,))
    i, r = _sym(), _sym()
    step = Binary(BinOp.ADD, GetLocal("p"), Binary(BinOp.MUL, Get(A, (index_of(i), index_of(r))),
                                                   Get(B, (index_of(i), index_of(r)))))
    body = Seq((DeclLocal("p", Const(0.0)), ForLoop(r, 6, SetLocal("p", step)),
                SetCell(out, (index_of(i),), GetLocal("p"))))
    assert unroll_reductions(_prog(ForLoop(i, 4, body), bufs=(out, A, B))).changed == 0


# ---- parallel loops -------------------------------------------------------------------


def test_parallel_marks_independent_nests_only() -> None:
    ok = _pointwise(B, lambda i, j: Unary(UnOp.EXP, Get(A, (i, j))))
    i, j = _sym(), _sym()
    stencil = ForLoop(i, 3, ForLoop(j, 6, SetCell(A, (index_of(i, 1, 1), index_of(j)),
                                                  Get(A, (index_of(i), index_of(j))))))
    prog = _prog(ok, stencil, bufs=(A, B))
    out = mark_parallel(prog, 2, min_work=1)
    marked = [u for u in units(out.prog.body) if isinstance(u, ForLoop) and u.threads > 1]
    assert out.changed == 1 and len(marked) == 1
    assert "omp parallel for" in render_c(out.prog)
    init = _inputs(prog.buffers, 4)
    assert _run(prog, init) == _run(out.prog, init)


def _matmul(out_b: Buffer, x: Buffer, w: Buffer, dims: tuple[int, int, int],
            outer: tuple[Symbol, int] | None = None) -> Stmt:
    """``out[(o,) i, j] = sum_k x[(o,) i, k] * w[k, j]`` (a local accumulator), inside a loop
    over `outer` when given."""
    i, j, k = _sym("i"), _sym("j"), _sym("k")
    pre = (index_of(outer[0]),) if outer else ()
    step = Binary(BinOp.ADD, GetLocal("s"), Binary(BinOp.MUL, Get(x, (*pre, index_of(i),
                                                                     index_of(k))),
                                                   Get(w, (index_of(k), index_of(j)))))
    body = Seq((DeclLocal("s", Const(0.0)), ForLoop(k, dims[2], SetLocal("s", step)),
                SetCell(out_b, (*pre, index_of(i), index_of(j)), GetLocal("s"))))
    return ForLoop(i, dims[0], ForLoop(j, dims[1], body))


def test_parallel_contractions_stay_with_the_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    """A sum of products is marked like any independent nest; the C backend shares it out
    only where its contraction kernel takes neither the nest nor a loop inside it (a kernel
    call rounds differently from the loops, and threads itself): the same bits as serial."""
    small_o, small_x, small_w = Buffer(40, "o", (4, 6)), Buffer(41, "x", (4, 5)), \
        Buffer(42, "w", (5, 6))
    big_o, big_x, big_w = Buffer(43, "bo", (3, 32, 32)), Buffer(44, "bx", (3, 32, 32)), \
        Buffer(45, "bw", (32, 32))
    big_o2 = Buffer(46, "bo2", (3, 32, 32))
    b = _sym("b")  # two products per b: the kernel takes each, not the loop over b
    inner = ForLoop(b, 3, Seq((_matmul(big_o, big_x, big_w, (32, 32, 32), (b, 3)),
                               _matmul(big_o2, big_x, big_w, (32, 32, 32), (b, 3)))))
    prog = _prog(_matmul(small_o, small_x, small_w, (4, 6, 5)), inner,
                 bufs=(small_o, small_x, small_w, big_o, big_x, big_w, big_o2))
    out = mark_parallel(prog, 2, min_work=1)
    assert out.changed == 2
    for threads in ("2", "1"):
        monkeypatch.setenv("OCANNL_AST_THREADS", threads)
        src = render_c(out.prog)
        functions = src[src.index("sched_f0("):src.index("\nint sched(")]  # after the kernel
        assert functions.count("#pragma omp") == 1  # the small product's loop only
        assert functions.count("ocannl_mm_run") == 2  # the kernel took the inner products
        init = _inputs(out.prog.buffers, 5)
        assert _run(prog, init) == _run(out.prog, init)

# ---- random programs vs the unscheduled pipeline ----------------------------------------


def _random_program(rng: random.Random) -> LoopProgram:
    bufs = tuple(Buffer(20 + k, f"r{k}", (4, 4)) for k in range(5))
    stmts: list[Stmt] = []
    for _ in range(rng.randint(3, 8)):
        dst = rng.choice(bufs)
        i, j = _sym("i"), _sym("j")
        ii, jj = index_of(i), index_of(j)

        def read(ii: IndexExpr = ii, jj: IndexExpr = jj) -> Expr:
            src = rng.choice(bufs)
            kind = rng.random()
            if kind < 0.6:
                return Get(src, (ii, jj))
            if kind < 0.8:
                return Get(src, (jj, ii))
            return Get(src, (ii, IndexExpr((), rng.randrange(4))))

        if rng.random() < 0.3:  # a small reduction over a third loop
            r = _sym("r")
            step = Binary(rng.choice([BinOp.ADD, BinOp.MAX]), GetLocal("acc"),
                          Get(rng.choice(bufs), (ii, index_of(r))))
            body: Stmt = Seq((DeclLocal("acc", read()), ForLoop(r, 4, SetLocal("acc", step)),
                              SetCell(dst, (ii, jj), GetLocal("acc"))))
        else:
            value = Binary(rng.choice([BinOp.ADD, BinOp.MUL, BinOp.SUB, BinOp.MAX]),
                           read(), read())
            body = SetCell(dst, (ii, jj), value)
        loops = [(i, 4), (j, 4)]
        if rng.random() < 0.3:
            loops.reverse()
        for sym, n in reversed(loops):
            body = ForLoop(sym, n, body)
        stmts.append(body)
    return _prog(*stmts, bufs=bufs)


@pytest.mark.parametrize("seed", range(12))
def test_random_programs_same_bits(seed: int) -> None:
    prog = _random_program(random.Random(seed))
    sched = unroll_reductions(prog).prog
    sched = interchange(sched).prog
    sched = fuse_nests(sched).prog
    sched = fuse_rows(sched).prog
    sched = mark_parallel(sched, 2, min_work=1).prog
    init = _inputs(prog.buffers, seed)
    assert _run(prog, init) == _run(sched, init)


# ---- from the user's side -----------------------------------------------------------------


def _fixed_params(loss: oc.Tensor) -> oc.Context:
    """A context whose params are set from a fixed generator (the same in every build)."""
    oc.infer_shapes(loss)
    ctx = oc.Context()
    rng = np.random.default_rng(9)
    for p in sorted(loss.params(), key=lambda p: p.name):
        ctx.set(p, rng.normal(scale=0.5, size=p.dims()).astype(np.float32))
    return ctx


def _conv_step(steps: int = 3) -> list[bytes]:
    oc.set_seed(3)
    rng = np.random.default_rng(5)
    x = oc.ndarray(rng.random((8, 6, 6, 1)).astype(np.float32), batch_axes=1)
    t = oc.ndarray(np.eye(4, dtype=np.float32)[rng.integers(0, 4, 8)], batch_axes=1)
    conv = oc.nn.conv2d(4, 3, padding="same")
    logits = oc.nn.linear(4)(oc.nn.flatten(oc.nn.max_pool2d(2)(oc.relu(conv(x)))))
    loss = oc.nn.cross_entropy(logits, t)
    ctx = _fixed_params(loss)
    step = ctx.compile([oc.grad_update(loss), oc.adam_update(loss, learning_rate=0.05)])
    for _ in range(steps):
        step()
    return [ctx.get(p).tobytes() for p in loss.params()] + [ctx.get(loss).tobytes()]


def _attention_step(steps: int = 2) -> list[bytes]:
    oc.set_seed(4)
    rng = np.random.default_rng(6)
    x = oc.ndarray(rng.normal(size=(2, 6, 8)).astype(np.float32), batch_axes=1)
    h = oc.nn.layer_norm()(x)
    h = x + oc.nn.multi_head_attention(2, 4, causal=True)(h)
    y = oc.nn.gelu(h)
    loss = oc.nn.mse(y, oc.ndarray(rng.normal(size=(2, 6, 8)).astype(np.float32),
                                   batch_axes=1))
    ctx = _fixed_params(loss)
    step = ctx.compile([oc.grad_update(loss),
                        oc.adam_update(loss, learning_rate=0.01, weight_decay=0.01)])
    for _ in range(steps):
        step()
    return [ctx.get(p).tobytes() for p in loss.params()] + [ctx.get(loss).tobytes()]


@pytest.mark.parametrize("model", [_conv_step, _attention_step], ids=["conv", "attention"])
def test_model_steps_same_bits_with_the_passes_on_and_off(model: object,
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    assert callable(model)
    monkeypatch.setenv("OCANNL_AST_SCHEDULE", "0")
    off = model()
    monkeypatch.setenv("OCANNL_AST_SCHEDULE", "1")
    on = model()
    assert on == off


@pytest.mark.parametrize("model", [_conv_step, _attention_step], ids=["conv", "attention"])
def test_model_steps_same_bits_with_1_and_2_threads(model: object,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    assert callable(model)
    monkeypatch.setattr("ocannl_ast.lowering.parallel.MIN_WORK", 1)  # every nest it can
    monkeypatch.setenv("OCANNL_AST_THREADS", "1")
    one = model()
    monkeypatch.setenv("OCANNL_AST_THREADS", "2")
    two = model()
    assert one == two


def test_adam_updates_become_one_nest_per_param() -> None:
    w = oc.param("sched_w", output_dims=[6], input_dims=[5],
                 init=np.random.default_rng(7).normal(size=(6, 5)))
    x = oc.ndarray(np.random.default_rng(8).normal(size=(3, 5)), batch_axes=1)
    loss = oc.nn.mse(w @ x, oc.ndarray(np.zeros((3, 6)), batch_axes=1))
    src = oc.render([oc.grad_update(loss), oc.adam_update(loss, learning_rate=0.1)])
    # the moments, the denominator and the parameter update share one loop body
    writes_w = [k for k, ln in enumerate(src.splitlines()) if "sched_w[" in ln and "] = " in ln
                and "sched_w_grad" not in ln.split("=")[0]]
    assert len(writes_w) == 1
    lines = src.splitlines()
    block = lines[max(0, writes_w[0] - 6): writes_w[0]]
    assert any("adam_m" in ln for ln in block) and any("adam_v" in ln for ln in block)
