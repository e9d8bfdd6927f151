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

from typing import assert_never

from ..records import record
from .arena import full_write
from .loop_ir import (
    Buffer,
    CheckIndex,
    Comment,
    DeclLocal,
    Expr,
    Fill,
    ForLoop,
    Get,
    GetLocal,
    LoopProgram,
    Noop,
    Seq,
    SetCell,
    SetFromVec,
    SetLocal,
    Stmt,
)
from .nests import Access, body_units, buffer_accesses, noted
from .walk import map_expr, map_stmt, stmt_nodes


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
    table = [buffer_accesses(u) for u in us]
    units_of: dict[int, list[int]] = {}
    for k, t in enumerate(table):
        for bid in t:
            units_of.setdefault(bid, []).append(k)
    vec = {x.buffer.id for u in us for x in stmt_nodes(u) if isinstance(x, SetFromVec)}
    taken = {x.name for u in us for x in stmt_nodes(u) if isinstance(x, DeclLocal)}
    # Whether one buffer becomes a local does not change the answer for another (their
    # accesses stay where they are), so each unit is decided first, then rebuilt once.
    local: dict[int, dict[int, str]] = {}  # unit -> buffer id -> the local's name
    done: set[int] = set()
    for b in prog.buffers:
        ks = units_of.get(b.id)
        if ks is None or len(ks) != 1 or b.id in keep or b.id in padded or b.id in vec \
                or b.uint4x32:
            continue
        k = ks[0]
        acs = table[k][b.id]
        if not any(reads for _, _, reads, _ in acs):
            continue  # a result: the caller may read it
        if not _localizable(acs, b) or not full_write(us[k], b):
            continue
        name = _fresh(f"v_{b.name}", taken)
        local.setdefault(k, {})[b.id] = name
        taken.add(name)
        done.add(b.id)
    if not done:
        return Scalarized(prog, frozenset())
    out = [_localized(u, local[k], set()) if k in local else u for k, u in enumerate(us)]
    note = f"scalarized: {len(done)} buffers live within one loop body became locals"
    return Scalarized(noted(prog, notes, [note], out, frozenset(done)), frozenset(done))


def _fresh(name: str, taken: set[str]) -> str:
    k, out = 1, name
    while out in taken:
        out, k = f"{name}_{k}", k + 1
    return out


def _localizable(acs: tuple[Access, ...], b: Buffer) -> bool:
    """Whether `b` (its accesses in one unit, in order) can be a local declared at its first
    access: a `SetCell` of it (not a fill) not reading it, directly in a block (`Seq`), and
    every other access in that block after it (nested deeper or not)."""
    first, _, reads, path = acs[0]
    if not isinstance(first, SetCell) or first.buffer.id != b.id or reads:
        return False
    if not path or path[-1] < 0:
        return False  # not in a block: the unit itself, or a loop's whole body
    block = path[:-1]
    return all(p[:len(block)] == block for _, _, _, p in acs)


def _localized(s: Stmt, names: dict[int, str], declared: set[int]) -> Stmt:
    """`s` with each buffer of `names` on its local: the first write (in program order)
    declares it, the later ones set it, the reads read it (`declared`: those already
    declared, updated)."""
    def expr(e: Expr) -> Expr | None:
        if isinstance(e, Get) and e.buffer.id in names:
            return GetLocal(names[e.buffer.id])
        return None

    match s:
        case Seq(stmts=stmts):
            new = [_localized(x, names, declared) for x in stmts]
            return s if all(a is b for a, b in zip(stmts, new, strict=True)) else Seq(tuple(new))
        case ForLoop(symbol=sym, extent=n, body=body, threads=th):
            inner = _localized(body, names, declared)
            return s if inner is body else ForLoop(sym, n, inner, th)
        case SetCell(buffer=b, value=v) if b.id in names:
            v2 = map_expr(v, expr)
            if b.id in declared:
                return SetLocal(names[b.id], v2)
            declared.add(b.id)
            return DeclLocal(names[b.id], v2)
        case (Noop() | Comment() | SetCell() | DeclLocal() | SetLocal() | Fill() | CheckIndex()
              | SetFromVec()):
            return map_stmt(s, expr=expr)
        case _:
            assert_never(s)
