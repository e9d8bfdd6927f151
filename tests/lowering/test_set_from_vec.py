"""uint4x32 buffers, the threefry4x32 primitive and Set_from_vec, lowered and compiled
through the C backend, against the NumPy references of `lowering.threefry` (whose
Random123 known answers are in test_threefry.py)."""

from __future__ import annotations

import numpy as np
import pytest

from ocannl_ast.backends.c_backend import compile_c, render_c
from ocannl_ast.errors import ShapeError
from ocannl_ast.lowering import assignments as A
from ocannl_ast.lowering.loop_ir import (
    BinOp,
    Buffer,
    IndexExpr,
    Precision,
    Symbol,
    VecUnOp,
    cell_elems,
    vec_length,
)
from ocannl_ast.lowering.lower import lower
from ocannl_ast.lowering.threefry import threefry4x32_words, uniform_from_words


def _program(prec: Precision, n_cells: int, n_out: int) -> tuple[A.Asgn, list[Buffer]]:
    k, c = Buffer(1, "k", (n_cells,), True), Buffer(2, "c", (n_cells,), True)
    w, out = Buffer(3, "w", (n_cells,), True), Buffer(4, "out", (n_out,))
    i = Symbol(100, "i")
    ix = (IndexExpr(((1, i),), 0),)
    tf = A.Accum(w, BinOp.ARG2, True, A.Prim(BinOp.THREEFRY4X32, (A.Arg(0), A.Arg(1))), (k, c),
                 A.Projections(((i, n_cells),), ix, (ix, ix), (n_cells,), ((n_cells,),) * 2))
    vec = A.VecSet(out, VecUnOp.UINT4X32_TO_PREC_UNIFORM, w, vec_length(prec))
    return A.seq(tf, vec), [k, c, w, out]


@pytest.mark.parametrize(("prec", "n_out", "per_word"), [
    (Precision.FLOAT32, 12, 4), (Precision.FLOAT32, 10, 4),
    (Precision.FLOAT64, 6, 2), (Precision.FLOAT64, 5, 2)])
def test_threefry_then_unpack_matches_numpy(prec: Precision, n_out: int, per_word: int) -> None:
    assert vec_length(prec) == per_word
    n_cells = -(-n_out // per_word)
    code, _ = _program(prec, n_cells, n_out)
    prog = lower(code, "vec", precision=prec)
    dt = np.float32 if prec is Precision.FLOAT32 else np.float64
    rng = np.random.default_rng(7)
    kw = rng.integers(0, 2**32, (n_cells, 4), dtype=np.uint64).astype(np.uint32)
    cw = rng.integers(0, 2**32, (n_cells, 4), dtype=np.uint64).astype(np.uint32)
    arrs = {b.id: np.full(cell_elems(b, prec), -7.0, dt) for b in prog.buffers}
    arrs[1].view(np.uint32)[:] = kw.ravel()
    arrs[2].view(np.uint32)[:] = cw.ravel()
    compile_c(prog)([arrs[b.id] for b in prog.buffers])
    ref = threefry4x32_words(kw, cw)
    np.testing.assert_array_equal(arrs[3].view(np.uint32).reshape(n_cells, 4), ref)
    want = uniform_from_words(ref, prec.value)
    np.testing.assert_array_equal(arrs[4], want[:n_out].astype(dt))  # exact in both
    assert ((0 <= arrs[4]) & (arrs[4] < 1)).all()


def test_uint4x32_renders_as_a_struct_of_four_words() -> None:
    code, _ = _program(Precision.FLOAT32, 2, 8)
    src = render_c(lower(code, "vec"))
    assert "typedef struct { uint32_t v[4]; } ocannl_uint4x32;" in src
    assert "ocannl_threefry4x32(" in src and "ocannl_vec_uniform_f(" in src


def test_inconsistent_element_counts_are_a_shape_error() -> None:
    code, _ = _program(Precision.FLOAT32, 2, 12)  # 12 outputs need 3 words, not 2
    with pytest.raises(ShapeError, match="2 input cells cannot fill 12 output cells 4 at"):
        lower(code, "vec")
