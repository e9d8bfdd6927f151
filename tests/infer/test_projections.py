"""Projection inference (seed 000, the stride part of seed 001): `derive_projections` on the
worked examples, size-one axes, fixed indices, batch slices, slot views and affine indices.

Index maps are read back as `Iter(sym)` / `Fix(c)` / affine triples so the tests state the
seed's own notation: pi_c = (i*, k*), pi_s = (Fix 0, Fix 0), ...
"""

from __future__ import annotations

import pytest

from ocannl_ast.errors import ShapeError
from ocannl_ast.infer.logic import BatchSlice, Compose, Einsum, Pointwise, Transpose
from ocannl_ast.infer.projections import derive_projections, fresh_symbol
from ocannl_ast.infer.spec_parser import parse_spec
from ocannl_ast.lowering.assignments import Projections
from ocannl_ast.lowering.loop_ir import IndexExpr, Symbol


def out(*dims: int) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """Closed dims of an output-only tensor (batch, output, input)."""
    return (), tuple(dims), ()


def einsum(spec: str) -> Einsum:
    return Einsum(parse_spec(spec))


def read(ix: IndexExpr) -> object:
    """`Symbol` for Iter(s), ("fix", c) for Fix(c), ("affine", ...) otherwise."""
    if not ix.terms:
        return ("fix", ix.offset)
    if len(ix.terms) == 1 and ix.terms[0][0] == 1 and ix.offset == 0:
        return ix.terms[0][1]
    return ("affine", tuple(ix.terms), ix.offset)


def maps(p: Projections) -> tuple[list[object], list[list[object]]]:
    return [read(x) for x in p.lhs], [[read(x) for x in r] for r in p.rhs]


def extents(p: Projections) -> dict[Symbol, int]:
    return dict(p.product)


# ---- worked example 1: matrix multiplication ----------------------------------------------


def test_matmul_einsum() -> None:
    p = derive_projections(einsum("ij;jk=>ik"), out(2, 4), [out(2, 3), out(3, 4)])
    assert len(p.product) == 3
    lhs, (a, b) = maps(p)
    i, k = lhs
    assert a[0] == i and b[1] == k
    j = a[1]
    assert b[0] == j
    assert len({i, j, k}) == 3 and all(isinstance(s, Symbol) for s in (i, j, k))
    assert extents(p) == {i: 2, j: 3, k: 4}
    assert p.reduction_iterators() == (j,)  # contraction is emergent: c never mentions j
    assert not p.lhs_injective()  # the same c[i, k] is written for every j
    assert p.lhs_surjective()


def test_matmul_compose() -> None:
    """`a @ b`: a is 3->2, b is 4->3, the result 4->2 (layout: batch, output, input)."""
    p = derive_projections(Compose(), ((), (2,), (4,)), [((), (2,), (3,)), ((), (3,), (4,))])
    lhs, (a, b) = maps(p)
    i, k = lhs
    j = a[1]
    assert a == [i, j] and b == [j, k]
    assert extents(p) == {i: 2, j: 3, k: 4}
    assert p.reduction_iterators() == (j,)
    assert not p.lhs_injective() and p.lhs_surjective()


# ---- worked example 2: pointwise broadcast ------------------------------------------------


def test_scalar_times_matrix() -> None:
    p = derive_projections(Pointwise(), out(2, 3), [out(1), out(2, 3)])
    lhs, (s, m) = maps(p)
    assert s == [("fix", 0)]  # broadcasting severs: the scalar is read at 0
    assert m == lhs and len(set(lhs)) == 2
    assert sorted(extents(p).values()) == [2, 3]
    assert p.reduction_iterators() == ()
    assert p.lhs_injective() and p.lhs_surjective()


def test_scalar_with_two_unit_axes_is_pinned_twice() -> None:
    p = derive_projections(Pointwise(), out(2, 3), [out(1, 1), out(2, 3)])
    _, (s, _) = maps(p)
    assert s == [("fix", 0), ("fix", 0)]


def test_vector_broadcasts_along_the_leading_axis() -> None:
    p = derive_projections(Pointwise(), out(2, 3), [out(2, 3), out(3)])
    lhs, (m, v) = maps(p)
    assert m == lhs and v == [lhs[1]]
    assert p.lhs_injective() and p.lhs_surjective()


# ---- worked example 3: summing by a vector of ones ----------------------------------------


def test_sum_by_ones_einsum() -> None:
    p = derive_projections(einsum("pq;q=>p"), out(2), [out(2, 3), out(3)])
    (pp,), (m, ones) = maps(p)
    q = m[1]
    assert m == [pp, q] and ones == [q]
    assert extents(p)[q] == 3
    assert p.reduction_iterators() == (q,)


def test_sum_by_ones_compose() -> None:
    p = derive_projections(Compose(), out(2), [((), (2,), (3,)), out(3)])
    (pp,), (m, ones) = maps(p)
    assert m[0] == pp and ones == [m[1]]
    assert p.reduction_iterators() == (m[1],)


# ---- the size-one invariant ----------------------------------------------------------------


def test_size_one_axes_never_get_a_loop() -> None:
    p = derive_projections(einsum("ij;jk=>ik"), out(2, 4), [out(2, 1), out(1, 4)])
    assert len(p.product) == 2
    _, (a, b) = maps(p)
    assert a[1] == ("fix", 0) and b[0] == ("fix", 0)
    assert p.reduction_iterators() == ()
    assert p.lhs_injective() and p.lhs_surjective()


def test_all_size_one_has_an_empty_product() -> None:
    p = derive_projections(Pointwise(), out(1, 1), [out(1, 1), out(1)])
    assert p.product == ()
    lhs, rhs = maps(p)
    assert lhs == [("fix", 0), ("fix", 0)]
    assert all(x == ("fix", 0) for r in rhs for x in r)


# ---- global sizes, local identities ---------------------------------------------------------


def test_equal_sizes_do_not_fuse_loops() -> None:
    """An outer product of two length-3 vectors: equal sizes, independent loops."""
    p = derive_projections(einsum("i;j=>ij"), out(3, 3), [out(3), out(3)])
    lhs, (a, b) = maps(p)
    assert lhs[0] != lhs[1] and a == [lhs[0]] and b == [lhs[1]]
    assert p.lhs_injective() and p.lhs_surjective()


def test_each_derivation_mints_fresh_iterators() -> None:
    spec = einsum("ij;jk=>ik")
    p1 = derive_projections(spec, out(2, 4), [out(2, 3), out(3, 4)])
    p2 = derive_projections(spec, out(2, 4), [out(2, 3), out(3, 4)])
    assert not set(extents(p1)) & set(extents(p2))


def test_contracted_axes_must_agree_in_size() -> None:
    with pytest.raises(ShapeError, match="sizes 3 and 4"):
        derive_projections(einsum("i;i=>i"), out(3), [out(3), out(4)])


# ---- diagonals and transposition ------------------------------------------------------------


def test_diagonal_read_shares_one_iterator() -> None:
    p = derive_projections(einsum("ii=>i"), out(3), [out(3, 3)])
    (i,), (a,) = maps(p)
    assert a == [i, i] and len(p.product) == 1


def test_diagonal_write_is_not_surjective() -> None:
    p = derive_projections(einsum("i=>ii"), out(3, 3), [out(3)])
    lhs, (a,) = maps(p)
    assert lhs == [a[0], a[0]]
    assert p.reduction_iterators() == ()
    assert not p.lhs_surjective()  # off-diagonal cells are never written: zero-filled


def test_transpose_logic_swaps_rows() -> None:
    p = derive_projections(Transpose(), ((), (3,), (2,)), [((), (2,), (3,))])
    (o, i), ((ao, ai),) = maps(p)
    assert (ao, ai) == (i, o)


# ---- fixed indices and batch slices ----------------------------------------------------------


def test_fixed_index_pins_a_read() -> None:
    p = derive_projections(einsum("1j=>j"), out(4), [out(3, 4)])
    (j,), (a,) = maps(p)
    assert a == [("fix", 1), j]
    assert len(p.product) == 1


def test_fixed_index_pins_a_write() -> None:
    p = derive_projections(einsum("i=>i1"), out(3, 2), [out(3)])
    (i, c), (a,) = maps(p)
    assert c == ("fix", 1) and a == [i]
    assert p.lhs_injective() and not p.lhs_surjective()


def test_fixed_index_out_of_range() -> None:
    with pytest.raises(ShapeError, match="fixed index 3"):
        derive_projections(einsum("3j=>j"), out(4), [out(3, 4)])


def test_batch_slice_pins_to_the_runtime_symbol() -> None:
    sym = fresh_symbol("batch")
    p = derive_projections(BatchSlice(sym), ((2,), (3,), ()), [((5, 2), (3,), ())])
    lhs, (a,) = maps(p)
    assert a[0] == sym and a[1:] == lhs
    assert sym not in extents(p)  # supplied from outside: no loop of its own
    assert sorted(extents(p).values()) == [2, 3]


# ---- the gradient section: slot views move the reduction --------------------------------------


def test_slot_views_move_the_contraction() -> None:
    p = derive_projections(einsum("ij;jk=>ik"), out(2, 4), [out(2, 3), out(3, 4)])
    (i, k), ((_, j), _) = maps(p)
    g1 = p.view(1, (0, 2))  # g1 =+ g * v2: lhs is a's map (i, j)
    assert [read(x) for x in g1.lhs] == [i, j]
    assert [[read(x) for x in r] for r in g1.rhs] == [[i, k], [j, k]]
    assert g1.lhs_dims == (2, 3) and g1.rhs_dims == ((2, 4), (3, 4))
    assert g1.reduction_iterators() == (k,)
    g2 = p.view(2, (1, 0))  # g2 =+ v1 * g: lhs is b's map (j, k)
    assert [read(x) for x in g2.lhs] == [j, k]
    assert g2.reduction_iterators() == (i,)
    assert g1.product == g2.product == p.product  # the maps are not recomputed


# ---- seed 001: the stride-only affine index -----------------------------------------------------


def test_interleave_odd_write_is_injective_not_surjective() -> None:
    p = derive_projections(einsum("..., i => ..., 2*i + 1"), out(6), [out(3)])
    (w,), ((i,),) = maps(p)
    assert w == ("affine", ((2, i),), 1)
    assert extents(p) == {i: 3}
    assert p.lhs_injective() and not p.lhs_surjective()


def test_interleave_even_write() -> None:
    p = derive_projections(einsum("..., i => ..., 2*i"), out(2, 6), [out(2, 3)])
    (b, w), ((b2, i),) = maps(p)
    assert b == b2 and w == ("affine", ((2, i),), 0)
    assert p.lhs_injective() and not p.lhs_surjective()


def test_extraction_reads_the_affine_index() -> None:
    p = derive_projections(einsum("..., 2*i + 1 => ..., i"), out(3), [out(6)])
    (i,), ((r,),) = maps(p)
    assert r == ("affine", ((2, i),), 1)
    assert p.lhs_injective() and p.lhs_surjective()


# ---- row variables ------------------------------------------------------------------------------


def test_ellipsis_rows_are_independent_per_kind() -> None:
    """`...` in the batch, input and output rows are three different row variables."""
    p = derive_projections(einsum("...|...->... => ...|...->..."), ((2,), (3, 5), (4,)),
                           [((2,), (3, 5), (4,))])
    lhs, (a,) = maps(p)
    assert a == lhs and len(set(lhs)) == 4


def test_row_variable_covers_different_ranks_in_each_row() -> None:
    p = derive_projections(einsum("...|i->o => ...|o->i"), ((2, 7), (3,), (4,)),
                           [((2, 7), (4,), (3,))])
    (b1, b2, x, y), (a,) = maps(p)
    assert a == [b1, b2, y, x] and len({b1, b2, x, y}) == 4


# ---- how lowering reads the two properties ---------------------------------------------------


def _lowered(spec: str, lhs_dims: tuple[int, ...], rhs_dims: tuple[int, ...], accum: object,
             initialize_neutral: bool) -> list[object]:
    """The top-level loop-IR statements of one assignment `lhs <accum> rhs` over `spec`."""
    from ocannl_ast.lowering.assignments import Accum, Arg
    from ocannl_ast.lowering.loop_ir import Buffer
    from ocannl_ast.lowering.loop_ir import Seq as LSeq
    from ocannl_ast.lowering.lower import lower

    p = derive_projections(einsum(spec), out(*lhs_dims), [out(*rhs_dims)])
    a = Accum(Buffer(1, "lhs", lhs_dims), accum, initialize_neutral, Arg(0),  # type: ignore[arg-type]
              (Buffer(2, "rhs", rhs_dims),), p)
    body = lower(a, "r").body
    return list(body.stmts) if isinstance(body, LSeq) else [body]


def test_non_surjective_accumulation_is_pre_cleared() -> None:
    from ocannl_ast.lowering.loop_ir import BinOp, Fill

    stmts = _lowered("i=>ii", (3, 3), (3,), BinOp.ADD, True)
    assert isinstance(stmts[0], Fill) and stmts[0].value == 0.0


def test_non_surjective_plain_assignment_is_pre_cleared() -> None:
    """OCANNL's `=:` (Arg2 with initialize_neutral) also erases the cells it never writes."""
    from ocannl_ast.lowering.loop_ir import BinOp, Fill

    stmts = _lowered("i=>ii", (3, 3), (3,), BinOp.ARG2, True)
    assert isinstance(stmts[0], Fill) and stmts[0].value == 0.0
    assert not any(isinstance(s, Fill) for s in _lowered("ij=>ji", (3, 2), (2, 3),
                                                         BinOp.ARG2, True))


def test_diagonal_write_is_injective() -> None:
    p = derive_projections(einsum("i=>ii"), out(3, 3), [out(3)])
    assert p.reduction_iterators() == ()
    assert p.lhs_injective()


@pytest.mark.parametrize("logic, lhs, rhs", [
    (Compose(), out(2), [((), (2,), (3,)), out(3)]),
    (Pointwise(), ((4,), (2,), ()), [((4,), (2,), ()), out(2)]),
    (einsum("ij;jk=>ik"), out(2, 4), [out(2, 3), out(3, 4)]),
])
def test_a_repeated_derivation_is_the_same_with_iterators_of_its_own(
        logic: object, lhs: tuple[tuple[int, ...], ...], rhs: list[tuple[tuple[int, ...], ...]]
) -> None:
    """Deriving the same operation over the same dims again (every layer of a deep network
    does) gives the same projections over fresh iterators, created in the same order."""
    a = derive_projections(logic, lhs, rhs)  # type: ignore[arg-type]
    b = derive_projections(logic, lhs, rhs)  # type: ignore[arg-type]
    sa, sb = [s for s, _ in a.product], [s for s, _ in b.product]
    assert len(sa) == len(sb) > 0 and not set(sa) & set(sb)
    assert [s.id for s in sb] == sorted(s.id for s in sb) and min(s.id for s in sb) > max(
        s.id for s in sa)
    rename = dict(zip(sa, sb, strict=True))

    def renamed(ix: IndexExpr) -> IndexExpr:
        return IndexExpr(tuple((c, rename.get(s, s)) for c, s in ix.terms), ix.offset)

    assert [n for _, n in a.product] == [n for _, n in b.product]
    assert tuple(renamed(x) for x in a.lhs) == b.lhs
    assert tuple(tuple(renamed(x) for x in r) for r in a.rhs) == b.rhs
    assert (a.lhs_dims, a.rhs_dims, a.debug) == (b.lhs_dims, b.rhs_dims, b.debug)
    c = derive_projections(logic, lhs, rhs)  # type: ignore[arg-type]
    assert not set(sb) & {s for s, _ in c.product}  # a third time: fresh ones again
