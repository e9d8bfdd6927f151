"""`Projections.lhs_injective` / `lhs_surjective` on affine LHS maps with several iterators
per axis (a pooling window that tiles, ``2*o + k``): checked against brute-force
enumeration of every product point. Both may say False where the truth is True
(conservative), never True where it is False: a wrong True drops a zero fill or turns an
accumulation into a plain store, a silently wrong number."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from ocannl_ast.lowering.assignments import Projections
from ocannl_ast.lowering.loop_ir import IndexExpr, Symbol

SYMS = [Symbol(100 + k, f"s{k}") for k in range(4)]


@st.composite
def projections(draw: st.DrawFn) -> Projections:
    n = draw(st.integers(1, 3))
    syms = SYMS[:n]
    product = tuple((s, draw(st.integers(1, 4))) for s in syms)
    axes, dims = [], []
    for _ in range(draw(st.integers(1, 2))):
        chosen = draw(st.lists(st.sampled_from(syms), max_size=2, unique=True))
        terms = tuple((draw(st.sampled_from([1, 2, 3, 4, -1, -2])), s) for s in chosen)
        offset = draw(st.integers(0, 2))
        ext = dict(product)
        lo = offset + sum(min(0, c * (ext[s] - 1)) for c, s in terms)
        if lo < 0:  # keep every index inside the axis
            offset -= lo
        hi = offset + sum(max(0, c * (ext[s] - 1)) for c, s in terms)
        axes.append(IndexExpr(terms, offset))
        dims.append(hi + 1 + draw(st.integers(0, 1)))
    return Projections(product, tuple(axes), (), tuple(dims), ())


def _cells(p: Projections) -> list[tuple[int, ...]]:
    ranges = [range(e) for _, e in p.product]
    out = []
    for point in itertools.product(*ranges):
        env = {s: v for (s, _), v in zip(p.product, point, strict=True)}
        out.append(tuple(ix.offset + sum(c * env[s] for c, s in ix.terms)
                         for ix in p.lhs if isinstance(ix, IndexExpr)))
    return out


@settings(max_examples=400, deadline=None)
@given(projections())
def test_injective_and_surjective_never_claim_what_enumeration_denies(
        p: Projections) -> None:
    cells = _cells(p)
    if p.lhs_injective():
        assert len(set(cells)) == len(cells), p
    if p.lhs_surjective():
        every = set(itertools.product(*(range(d) for d in p.lhs_dims)))
        assert set(cells) == every, p


def test_a_tiling_pool_window_is_injective_and_surjective() -> None:
    o, k = SYMS[:2]
    p = Projections(((o, 3), (k, 2)), (IndexExpr(((2, o), (1, k)), 0),), (), (6,), ())
    assert p.lhs_injective() and p.lhs_surjective()


def test_overlapping_or_strided_windows_are_not() -> None:
    o, k = SYMS[:2]
    overlap = Projections(((o, 4), (k, 3)), (IndexExpr(((1, o), (1, k)), 0),), (), (6,), ())
    assert not overlap.lhs_injective() and not overlap.lhs_surjective()
    gaps = Projections(((o, 3), (k, 2)), (IndexExpr(((3, o), (1, k)), 0),), (), (8,), ())
    assert gaps.lhs_injective() and not gaps.lhs_surjective()


def test_a_static_argument_in_the_index_is_not_surjective() -> None:
    o, batch = SYMS[0], Symbol(999, "batch")  # batch: a routine's static argument
    p = Projections(((o, 4),), (IndexExpr(((4, batch), (1, o)), 0),), (), (4,), ())
    assert p.lhs_injective() and not p.lhs_surjective()
