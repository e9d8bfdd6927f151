"""Buffers that never leave one loop body become scalar locals: no storage, no memory
traffic (OCANNL's virtual nodes computed into a local where their one computation lives).

A buffer becomes a local when the routine owns it (not kept: params, grads, optimizer
state, data, what the caller holds or another routine reads; not padded, not uint4x32, not
written from a random vector), one unit touches it and reads it (a buffer only written
is a result the caller may read), that unit's first access to it is a
write (a `SetCell`) covering every cell once, injectively, every other access names the
cell that write names, and those accesses all follow the write in the block holding it
(nested deeper or not); and the routine's cells are 32 or 64 bits (a 16-bit cell rounds
what it stores, a local would not). Then each iteration of the loops around the write writes its own
cell before any read of it, and no other iteration touches that cell: a local declared at
the write (`DeclLocal`), set (`SetLocal`) and read (`GetLocal`) in its place computes the
same values in the same order, bit for bit.

Stage: the first step of `pipeline_passes.share_storage`, before the arenas. Input: a
`LoopProgram`, the buffer ids kept, the padded buffer ids. Output: the program without
those buffers, and their ids (`Scalarized`).
"""

from __future__ import annotations

from ..records import record
from .arena import full_write
from .loop_ir import (
    Buffer,
    DeclLocal,
    Expr,
    ForLoop,
    Get,
    GetLocal,
    LoopProgram,
    Seq,
    SetCell,
    SetFromVec,
    SetLocal,
    Stmt,
)
from .nests import body_units, noted
from .walk import Accesses, gets, map_stmt, scoped, stmt_nodes


@record
class Scalarized:
    """The program after scalarizing, and the ids of the buffers that became locals."""

    prog: LoopProgram
    buffers: frozenset[int]


def scalarize(prog: LoopProgram, keep: frozenset[int], padded: frozenset[int]) -> Scalarized:
    """Turn the buffers that never leave one loop body into scalar locals (see the module).

    Example: ``scalarize(prog, frozenset({w.id}), frozenset()).buffers``.
    """
    if prog.precision.is_half:  # a 16-bit cell rounds what it stores, a local would not
        return Scalarized(prog, frozenset())
    notes, us = body_units(prog)
    acc = Accesses()
    units_of: dict[int, set[int]] = {}
    for k, u in enumerate(us):
        for bid in acc.read_ids(u) | acc.write_ids(u):
            units_of.setdefault(bid, set()).add(k)
    vec = {x.buffer.id for u in us for x in stmt_nodes(u) if isinstance(x, SetFromVec)}
    taken = {x.name for u in us for x in stmt_nodes(u) if isinstance(x, DeclLocal)}
    out = list(us)
    done: set[int] = set()
    for b in prog.buffers:
        ks = units_of.get(b.id, set())
        if len(ks) != 1 or b.id in keep or b.id in padded or b.id in vec or b.uint4x32:
            continue
        k = next(iter(ks))
        if b.id not in acc.read_ids(out[k]):
            continue  # a result: the caller may read it
        if not _first_is_set(out[k], b, acc) or not full_write(out[k], b):
            continue
        name = _fresh(f"v_{b.name}", taken)
        new = _localize(out[k], b, name, acc)
        if new is not None:
            out[k] = new
            taken.add(name)
            done.add(b.id)
    if not done:
        return Scalarized(prog, frozenset())
    note = f"scalarized: {len(done)} buffers live within one loop body became locals"
    return Scalarized(noted(prog, notes, [note], out, frozenset(done)), frozenset(done))


def _fresh(name: str, taken: set[str]) -> str:
    k, out = 1, name
    while out in taken:
        out, k = f"{name}_{k}", k + 1
    return out


def _touches(s: Stmt, b: Buffer, acc: Accesses) -> bool:
    return b.id in acc.read_ids(s) or b.id in acc.write_ids(s)


def _first_is_set(u: Stmt, b: Buffer, acc: Accesses) -> bool:
    """Whether the first statement of `u` touching `b` is a `SetCell` of it (not a fill)."""
    for x, _ in scoped(u):
        if isinstance(x, SetCell) and x.buffer.id == b.id:
            return True
        if not isinstance(x, Seq | ForLoop) and _touches(x, b, acc):
            return False
    return False


def _localize(s: Stmt, b: Buffer, name: str, acc: Accesses) -> Stmt | None:
    """`s` with `b` a local declared at its first write, or None when an access of `b`
    lies outside the block of that write (after it, nested or not)."""
    match s:
        case Seq(stmts=stmts):
            at = [i for i, x in enumerate(stmts) if _touches(x, b, acc)]
            if not at:
                return None
            i, first = at[0], stmts[at[0]]
            if isinstance(first, SetCell) and first.buffer.id == b.id:
                if any(g.buffer.id == b.id for g in gets(first.value)):
                    return None
                rest = tuple(_replace(x, b, name) for x in stmts[i + 1:])
                return Seq((*stmts[:i], DeclLocal(name, first.value), *rest))
            if len(at) > 1:
                return None
            inner = _localize(first, b, name, acc)
            return None if inner is None else Seq((*stmts[:i], inner, *stmts[i + 1:]))
        case ForLoop(symbol=sym, extent=n, body=body, threads=th):
            inner = _localize(body, b, name, acc)
            return None if inner is None else ForLoop(sym, n, inner, th)
        case _:
            return None


def _replace(s: Stmt, b: Buffer, name: str) -> Stmt:
    """`s` with reads and writes of `b` (all at the local's cell) on the local."""

    def expr(e: Expr) -> Expr | None:
        return GetLocal(name) if isinstance(e, Get) and e.buffer.id == b.id else None

    def stmt(x: Stmt) -> Stmt | None:
        return SetLocal(name, x.value) if isinstance(x, SetCell) and x.buffer.id == b.id \
            else None

    return map_stmt(s, expr=expr, stmt=stmt)
