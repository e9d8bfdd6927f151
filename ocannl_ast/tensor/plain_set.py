"""The assignments stage's check of plain sets over a reduction (issue 23 item 5): a `=:`
(`v[...] = v1 * v2`, no reducer) whose product space has an iterator of extent > 1 that the
written index omits but the read values depend on writes each cell once per value of that
iterator, keeping only the last. That is never what the user means: a located ShapeError
naming the reduced label (or axis) and telling to write a reducer.

Input: an assignment (`AccumItem`), the projections it reads, its operation's projections.
Output: nothing, or the error.
"""

from __future__ import annotations

from ..errors import ShapeError
from ..infer.relations import Einsum, logic_name
from ..infer.spec_ast import Affine, AxisSpec, Label, ShapeSpec
from ..lowering import assignments as A
from ..lowering.loop_ir import BinOp, IndexExpr, Symbol
from .node import AccumItem, NodeKind, OpRecord, Tensor

_ROWS = ("batch", "output", "input")  #: layout order of a tensor's rows


def check_plain_set(it: AccumItem, p: A.Projections, record_p: A.Projections) -> None:
    """Raise when `it` is a plain set (`=:`) that reduces: see the module docstring. `p`:
    the projections the assignment reads (a slot view of `record_p`, same iterators)."""
    if it.accum is not BinOp.ARG2 or not it.initialize_neutral:
        return
    written = _symbols(p.lhs)
    if all(n <= 1 or s in written for s, n in p.product):
        return  # (the common case: it writes along every iterator)
    args = _args(it.expr)
    if any(r.tensor is it.lhs.tensor and r.kind is it.lhs.kind
           for k, r in enumerate(it.rhs) if k in args):
        return  # reads the cell it writes: each iteration builds on the one before
    read = set().union(*(_symbols(p.rhs[k]) for k in args if k < len(p.rhs)))
    reduced = [(s, n) for s, n in p.product if n > 1 and s not in written and s in read]
    if not reduced:
        return
    rec = it.record
    names = _label_names(rec, record_p)
    what = ", ".join(names.get(s) or _axis_name(s, rec, record_p) or f"an axis of size {n}"
                     for s, n in reduced)
    sizes = ", ".join(str(n) for _, n in reduced)
    one = len(reduced) == 1
    target = it.lhs.tensor.label + (".grad" if it.lhs.kind is NodeKind.GRAD else "")
    raise ShapeError(
        f"'{rec.name}' ({logic_name(rec.logic)}): the plain set `=:` into '{target}' "
        f"iterates over {what} (size{'' if one else 's'} {sizes}), which '{target}' "
        f"{'has no axis for' if one else 'have no axes for'}: every iteration overwrites the "
        f"cell the one before wrote, so only the last value would stay. To reduce over "
        f"{what}, write a reducer: `v[...] = sum(...)` (`=:+`), or `max`, `min`, `prod`",
        rec.span)


def _args(expr: A.RhsExpr) -> set[int]:
    """The RHS operands an expression reads."""
    match expr:
        case A.Arg(k=k):
            return {k}
        case A.Prim(args=args):
            return set().union(*(_args(a) for a in args))
        case _:
            return set()


def _symbols(index: tuple[A.ProjIndex, ...]) -> set[Symbol]:
    out: set[Symbol] = set()
    for ix in index:
        if isinstance(ix, IndexExpr):
            out.update(s for _, s in ix.terms)
        else:
            out.update(s for s, _ in ix.parts)
    return out


def _spec_axes(t: Tensor, ss: ShapeSpec) -> list[tuple[int, AxisSpec]]:
    """(flat layout position, spec axis) of every axis the spec names in tensor `t`."""
    out: list[tuple[int, AxisSpec]] = []
    start = 0
    for rs, row in zip((ss.batch, ss.output, ss.input), t.layout_rows(), strict=True):
        n = len(row)
        if rs is not None and len(rs.beg) + len(rs.end) <= n:
            positions = [*range(len(rs.beg)), *range(n - len(rs.end), n)]
            out.extend((start + pos, ax) for pos, ax in zip(positions, rs.beg + rs.end,
                                                            strict=True))
        start += n
    return out


def _label_names(rec: OpRecord, p: A.Projections) -> dict[Symbol, str]:
    """Iterator -> the spec label it iterates (quoted), for an einsum operation."""
    if not isinstance(rec.logic, Einsum):
        return {}
    spec = rec.logic.spec
    tensors = [rec.result, *rec.operands]
    if len(tensors) != len(spec.operands) + 1 or len(p.rhs) != len(rec.operands):
        return {}
    axes = [(p.slot(k)[0], _spec_axes(t, ss))
            for k, (t, ss) in enumerate(zip(tensors, [spec.result, *spec.operands],
                                            strict=True))]
    names: dict[Symbol, str] = {}
    for index, found in axes:  # plain labels first: they name the affine axes' parts
        for pos, ax in found:
            ix = index[pos] if pos < len(index) else None
            if isinstance(ax, Label) and isinstance(ix, IndexExpr) and len(ix.terms) == 1:
                names.setdefault(ix.terms[0][1], ax.name)
    for index, found in axes:
        for pos, ax in found:
            ix = index[pos] if pos < len(index) else None
            if isinstance(ax, Affine) and isinstance(ix, IndexExpr):
                _name_affine(ax, ix, names)
    return {s: f"'{n}'" for s, n in names.items()}


def _name_affine(ax: Affine, ix: IndexExpr, names: dict[Symbol, str]) -> None:
    """Name the iterators of `stride*over + dilation*kernel + offset` not named yet: by the
    part already named, else by coefficient."""
    kernel = ax.conv.kernel if ax.conv else None
    unnamed = [(c, s) for c, s in ix.terms if s not in names]
    known = set(names.values())
    for c, s in unnamed:
        if kernel is None:
            names[s] = ax.over
        elif len(unnamed) == 1 and ax.over in known and kernel not in known:
            names[s] = kernel
        elif len(unnamed) == 1 and kernel in known and ax.over not in known:
            names[s] = ax.over
        elif ax.conv is not None and ax.stride != ax.conv.dilation:
            names[s] = ax.over if c == ax.stride else kernel


def _axis_name(s: Symbol, rec: OpRecord, p: A.Projections) -> str | None:
    """The first operand axis iterated by `s` alone, as "the input axis 0 of 'a'"."""
    for k, t in enumerate(rec.operands):
        if k >= len(p.rhs):
            break
        pos = 0
        for kind, row in zip(_ROWS, t.layout_rows(), strict=True):
            for j in range(len(row)):
                ix = p.rhs[k][pos] if pos < len(p.rhs[k]) else None
                if isinstance(ix, IndexExpr) and [x for _, x in ix.terms] == [s]:
                    return f"the {kind} axis {j} of '{t.label}'"
                pos += 1
    return None
