"""Verifier of the loop IR: run between passes (always in tests, or with OCANNL_AST_CHECK=1).

Stage: checks any `LoopProgram` a lowering pass produces, before a backend renders it.
Input: a `LoopProgram`. Output: None, or `LoopIRError` listing every problem found.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import assert_never

from ocannl_ast.errors import OcannlError
from ocannl_ast.lowering.loop_ir import (
    Binary,
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
    Noop,
    Seq,
    SetCell,
    SetFromVec,
    SetLocal,
    Stmt,
    Symbol,
    SymbolValue,
    Ternary,
    ThreefryUniform,
    Unary,
)
from ocannl_ast.lowering.walk import expr_nodes, walk_stmts

_U32 = 1 << 32
_C_INT_MAX = (1 << 31) - 1


class LoopIRError(OcannlError, ValueError):
    """A malformed loop program; the message lists each problem on its own line."""

    def __init__(self, routine: str, problems: list[str]) -> None:
        self.problems = problems
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"invalid loop program {routine!r}:\n{lines}")


def _sym(sym: Symbol) -> str:
    return f"{sym.name}#{sym.id}"


def _merged_terms(index: IndexExpr) -> dict[Symbol, int]:
    merged: dict[Symbol, int] = {}
    for coeff, sym in index.terms:
        merged[sym] = merged.get(sym, 0) + coeff
    return merged


def index_range(index: IndexExpr, extents: dict[Symbol, int | None]) -> tuple[int, int] | None:
    """[min, max] of an affine index over its iterators' ranges; None if a term is unbounded.

    Example: ``2*i + 1`` with ``i < 3`` gives ``(1, 5)``.
    """
    lo = hi = index.offset
    for sym, coeff in _merged_terms(index).items():
        extent = extents.get(sym)
        if extent is None:
            return None
        lo += min(0, coeff * (extent - 1))
        hi += max(0, coeff * (extent - 1))
    return lo, hi


@dataclass(slots=True)
class _Scope:
    """What is visible at a point: symbols (extent, None for static args) and locals."""

    symbols: dict[Symbol, int | None]
    locals: set[str] = field(default_factory=set)
    #: False inside a loop of extent 0: its body never runs, so no access is made
    live: bool = True

    def nested(self) -> _Scope:
        return _Scope(dict(self.symbols), set(self.locals), self.live)


def _enter(s: Stmt, scope: _Scope) -> _Scope:
    """The scope of the statements nested in `s`."""
    inner = scope.nested()
    if isinstance(s, ForLoop):
        inner.symbols[s.symbol] = s.extent
        inner.live = scope.live and s.extent > 0
    return inner


@dataclass(slots=True)
class _Checker:
    prog: LoopProgram
    problems: list[str] = field(default_factory=list)

    def report(self, where: str, message: str) -> None:
        self.problems.append(f"{where}: {message}")

    def check_index(self, index: IndexExpr, scope: _Scope, where: str) -> None:
        for coeff, sym in index.terms:
            if coeff == 0:
                self.report(where, f"zero coefficient on {_sym(sym)}")
            if sym not in scope.symbols:
                self.report(where, f"symbol {_sym(sym)} used outside its loop")

    def check_buffer(self, buf: Buffer, where: str) -> None:
        if buf not in self.prog.buffers:
            self.report(where, f"buffer {buf.name!r} (id {buf.id}) is not in the program")
        if buf.view is not None:  # lowering resolves every view (`lowering.views`)
            self.report(where, f"buffer {buf.name!r} is a view of {buf.view.parent.name!r}")

    def check_access(
        self, buf: Buffer, index: tuple[IndexExpr, ...], scope: _Scope, where: str
    ) -> None:
        self.check_buffer(buf, where)
        if len(index) != len(buf.dims):
            self.report(where, f"{len(index)} indices for rank-{len(buf.dims)} {buf.name!r}")
        for axis, (e, dim) in enumerate(zip(index, buf.dims)):
            self.check_index(e, scope, where)
            rng = index_range(e, scope.symbols) if scope.live else None
            if rng is not None and not (0 <= rng[0] and rng[1] < dim):
                self.report(
                    where,
                    f"index of {buf.name!r} axis {axis} ranges over [{rng[0]}, {rng[1]}], "
                    f"outside [0, {dim})",
                )

    def check_expr(self, e: Expr, scope: _Scope, where: str) -> None:
        for x in expr_nodes(e):
            match x:
                case Const() | Unary() | Binary() | Ternary():
                    pass
                case Get(buffer=buf, index=index):
                    self.check_access(buf, index, scope, f"{where}, read of {buf.name!r}")
                case GetLocal(name=name):
                    if name not in scope.locals:
                        self.report(where, f"local {name!r} read before its declaration")
                case SymbolValue(symbol=sym):
                    if sym not in scope.symbols:
                        self.report(where, f"symbol {_sym(sym)} used outside its loop")
                case ThreefryUniform():
                    self.check_threefry(x, scope, where)
                case _:
                    assert_never(x)

    def check_threefry(self, e: ThreefryUniform, scope: _Scope, where: str) -> None:
        if len(e.key) != 4 or any(not 0 <= k < _U32 for k in e.key):
            self.report(where, f"threefry key {e.key} is not four 32-bit words")
        self.check_index(e.counter, scope, where)
        rng = index_range(e.counter, scope.symbols) if scope.live else None
        if rng is not None and not (0 <= rng[0] and rng[1] < _U32):
            self.report(where, f"threefry counter ranges over {list(rng)}, not 32-bit unsigned")

    def check_stmt(self, s: Stmt, scope: _Scope) -> None:
        """Check `s` itself (`walk_stmts` visits the statements nested in it); a DeclLocal
        adds to `scope.locals`, for the statements after it."""
        match s:
            case Noop() | Comment() | Seq():
                pass
            case ForLoop(symbol=sym, extent=extent):
                where = f"loop over {_sym(sym)}"
                if extent < 0:
                    self.report(where, f"negative extent {extent}")
                if sym in scope.symbols:
                    self.report(where, f"{_sym(sym)} is already bound (outer loop or static arg)")
            case SetCell(buffer=buf, index=index, value=value):
                where = f"write to {buf.name!r}"
                self.check_access(buf, index, scope, where)
                self.check_expr(value, scope, where)
            case DeclLocal(name=name, init=init):
                self.check_expr(init, scope, f"local {name!r}")
                if name in scope.locals:
                    self.report(f"local {name!r}", "declared twice in one scope")
                scope.locals.add(name)
            case SetLocal(name=name, value=value):
                self.check_expr(value, scope, f"local {name!r}")
                if name not in scope.locals:
                    self.report(f"local {name!r}", "assigned before its declaration")
            case Fill(buffer=buf):
                self.check_buffer(buf, f"fill of {buf.name!r}")
            case CheckIndex():
                self.check_check_index(s, scope)
            case SetFromVec():
                self.check_set_from_vec(s, scope)
            case _:
                assert_never(s)

    def check_set_from_vec(self, s: SetFromVec, scope: _Scope) -> None:
        where = f"vector write to {s.buffer.name!r}"
        self.check_buffer(s.buffer, where)
        self.check_index(s.vector, scope, where)
        self.check_expr(s.value, scope, where)
        if s.length < 1 or s.buffer.uint4x32:
            self.report(where, f"length {s.length} into a uint4x32={s.buffer.uint4x32} buffer")

    def check_check_index(self, s: CheckIndex, scope: _Scope) -> None:
        self.check_index(s.index, scope, "index check")
        if s.code == 0 or abs(s.code) > _C_INT_MAX:
            self.report("index check", f"error code {s.code} is not a nonzero C int")
        if s.bound < 0:
            self.report("index check", f"negative bound {s.bound}")

    def check_signature(self) -> None:
        seen: dict[str, Buffer] = {}
        for buf in self.prog.buffers:
            if buf.name in seen:
                self.report("parameters", f"buffer name {buf.name!r} appears twice")
            seen[buf.name] = buf
            if any(d < 0 for d in buf.dims):
                self.report("parameters", f"buffer {buf.name!r} has negative dims {buf.dims}")
        if len(set(self.prog.static_args)) != len(self.prog.static_args):
            self.report("parameters", "a static argument appears twice")


def verify_program(prog: LoopProgram) -> None:
    """Raise `LoopIRError` listing every problem of `prog`; return None if it is well formed.

    >>> from ocannl_ast.lowering.loop_ir import Buffer
    >>> x = Buffer(0, "x", (2,))
    >>> verify_program(LoopProgram("z", (x,), (), Fill(x, 0.0)))
    """
    checker = _Checker(prog)
    checker.check_signature()
    for s, scope in walk_stmts(prog.body, _Scope({s: None for s in prog.static_args}), _enter):
        checker.check_stmt(s, scope)
    if checker.problems:
        raise LoopIRError(prog.name, checker.problems)
