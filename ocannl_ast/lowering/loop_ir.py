"""Loop IR: the lowered form every backend consumes (For / Set / Get / scalar locals).

Input: produced by `lowering.lower` from the assignments IR. Output: rendered by
`backends.*`. Nodes are frozen slotted dataclasses; walk them with exhaustive `match`.
"""

from __future__ import annotations

import enum

# The primitive enums are the shared operator vocabulary (re-exported for the backends).
from ..records import record
from ..vocabulary import BinOp, TernOp, UnOp, VecUnOp

#: Sum-of-products loop nests doing at least this many multiply-adds run as contraction
#: kernels in the C backend (`backends.c_contraction`); the lowering's epilogue fusion
#: (`virtualize`) leaves them alone there (`fusion_limit`) so that it does not hide them.
C_KERNEL_MIN_WORK = 16 * 16 * 16
#: The epilogue fusion's limit for a backend without contraction kernels (CUDA), and the
#: default: reductions of at least this many multiply-adds keep their own loop nest.
CONTRACTION_MIN_WORK = 32 * 32 * 32
#: Reductions of at most this many terms per cell are unrolled by the scheduling passes
#: (`lowering.schedule`); the C backend's lane-blocked sums (`backends.c_lanes`) take only
#: longer loops, so that no path unrolls what another sums in lanes.
MAX_UNROLL = 16


class Precision(enum.Enum):
    """A routine's precision: how its buffers' cells are stored, and (`compute`) the type
    its arithmetic, locals and constants use. FLOAT16 (IEEE binary16) and BFLOAT16 store
    16-bit cells and compute in float32: a load widens exactly, a store rounds to nearest
    even (`backends.c_syntax`). A buffer may have its own storage precision
    (`Buffer.precision`), one of these or an integer one (UINT32, UINT64, INT32: ids,
    never a routine's precision); a load converts it to the routine's compute precision,
    a store rounds to it. COMPUTE, a buffer's only: stored in the routine's compute
    precision (float32 in a 16-bit routine), for state whose small increments a 16-bit
    cell would lose (step counters, Adam's bias corrections)."""

    FLOAT32 = "float32"
    FLOAT64 = "float64"
    FLOAT16 = "float16"
    BFLOAT16 = "bfloat16"
    UINT32 = "uint32"
    UINT64 = "uint64"
    INT32 = "int32"
    COMPUTE = "compute"

    @property
    def compute(self) -> Precision:
        """The precision of the arithmetic: FLOAT64 for FLOAT64, else FLOAT32."""
        return Precision.FLOAT64 if self is Precision.FLOAT64 else Precision.FLOAT32

    @property
    def cell_bytes(self) -> int:
        """Bytes of one stored number: 4, 8, 2, 2."""
        return {Precision.FLOAT32: 4, Precision.FLOAT64: 8, Precision.UINT32: 4,
                Precision.UINT64: 8, Precision.INT32: 4}.get(self, 2)

    @property
    def is_half(self) -> bool:
        """Whether cells are 16-bit floats (stored other than they are computed)."""
        return self.cell_bytes == 2

    @property
    def is_integer(self) -> bool:
        """Whether cells are integers (ids): storage only, never computed in."""
        return self in (Precision.UINT32, Precision.UINT64, Precision.INT32)


#: the precisions a routine (a context) may have; the integer ones are buffers' only
ROUTINE_PRECISIONS = (Precision.FLOAT32, Precision.FLOAT64, Precision.FLOAT16,
                      Precision.BFLOAT16)


@record
class Symbol:
    """A loop iterator or a static integer argument of a routine."""

    id: int  #: unique within a program after renumbering
    name: str  #: readable stem, e.g. "i" or "batch"

    def __hash__(self) -> int:  # equal symbols have equal ids: hash the id alone (hot)
        return hash(self.id)


@record
class Buffer:
    """A dense array the routine reads or writes (layout: row-major over `dims`)."""

    id: int  #: identity of the tensor node (value or grad)
    name: str  #: readable, C-identifier-safe name, unique within a program
    dims: tuple[int, ...]  #: logical extents; () is a scalar of one cell
    #: cells are uint4x32 words (16 bytes: `vec_length(precision)` elements of the
    #: routine's array per cell) rather than numbers of the routine's precision
    uint4x32: bool = False
    #: a batch slice's view: the cells are another buffer's (`View`); only the assignments
    #: IR carries views, lowering resolves them (`lowering.views`): never in a LoopProgram
    view: View | None = None
    #: how the cells are stored where that differs from the routine's precision (a tensor
    #: of its own precision: `oc.param(..., precision=)`, `oc.cast`); None: the routine's
    precision: Precision | None = None

    def __hash__(self) -> int:  # equal buffers have equal ids: hash the id alone (hot)
        return hash(self.id)


@record
class View:
    """OCANNL's batch-slice view (`x @| i`): cell `ix` of the viewing buffer is cell
    `lead + (ix[k] + shift[k])` of `parent` (leading axes fixed at runtime indices, the rest
    moved by the parent's left padding margins). Writes through it reach the parent."""

    parent: Buffer  #: the buffer holding the cells (never itself a view)
    lead: tuple[IndexExpr, ...]  #: the parent's leading axes: fixed static indices
    shift: tuple[int, ...]  #: per remaining axis, the parent's left margin
    #: (static symbol, bound) each leading index must lie in (checked before any access)
    checks: tuple[tuple[Symbol, int], ...]


def storage_id(buf: Buffer) -> int:
    """The id of the buffer whose cells `buf` names: its view's parent, else itself."""
    return buf.view.parent.id if buf.view is not None else buf.id


@record
class IndexExpr:
    """An affine index: sum(coeff * symbol) + offset."""

    terms: tuple[tuple[int, Symbol], ...]  #: (coefficient, symbol) pairs, coefficient != 0
    offset: int = 0  #: constant term


# ---- scalar expressions ------------------------------------------------------------


@record
class Const:
    value: float  #: a constant of the routine's precision


@record
class Get:
    buffer: Buffer  #: array read
    index: tuple[IndexExpr, ...]  #: one entry per axis of the buffer


@record
class GetLocal:
    name: str  #: a scalar local declared by DeclLocal


@record
class SymbolValue:
    symbol: Symbol  #: the integer value of an iterator or static argument, as a float


@record
class Unary:
    op: UnOp
    arg: Expr


@record
class Binary:
    op: BinOp
    lhs: Expr
    rhs: Expr


@record
class Ternary:
    op: TernOp
    a: Expr
    b: Expr
    c: Expr


@record
class ThreefryUniform:
    """Uniform [0, 1) number: word 0 of threefry4x32(key, (counter, 0, 0, 0)), top 24 bits."""

    key: tuple[int, int, int, int]  #: 32-bit unsigned key words
    counter: IndexExpr  #: the cell's linear offset (uint32)


Expr = Const | Get | GetLocal | SymbolValue | Unary | Binary | Ternary | ThreefryUniform


# ---- statements --------------------------------------------------------------------


@record
class Noop:
    pass


@record
class Comment:
    text: str  #: rendered as a comment line


@record
class Seq:
    stmts: tuple[Stmt, ...]


@record
class ForLoop:
    symbol: Symbol  #: iterator, runs 0 .. extent-1
    extent: int
    body: Stmt
    #: more than 1: the iterations are independent and run on this many threads (an OpenMP
    #: parallel loop in C; `lowering.parallel` decides); 1: in order, on the caller's thread
    threads: int = 1


@record
class SetCell:
    buffer: Buffer
    index: tuple[IndexExpr, ...]
    value: Expr


@record
class DeclLocal:
    name: str  #: scalar local of the routine's precision, scoped to the enclosing block
    init: Expr


@record
class SetLocal:
    name: str
    value: Expr


@record
class Fill:
    """Set every cell of a buffer to one constant (a pre-clear to the neutral element)."""

    buffer: Buffer
    value: float


@record
class CheckIndex:
    """Abort the routine with an error code if 0 <= index < bound does not hold."""

    index: IndexExpr  #: usually a static argument, e.g. a batch number
    bound: int
    code: int  #: nonzero error code the routine returns


@record
class SetFromVec:
    """Seed 001's Set_from_vec: one read of the uint4x32 `value` writes `length` consecutive
    cells of `buffer`, from flat cell `length * vector` on (fewer at the buffer's end)."""

    buffer: Buffer
    vector: IndexExpr  #: which vector: flat offset in units of `length` cells
    op: VecUnOp
    value: Expr
    length: int


Stmt = (Noop | Comment | Seq | ForLoop | SetCell | DeclLocal | SetLocal | Fill | CheckIndex
        | SetFromVec)


@record
class LoopProgram:
    """One compiled routine: a C function over the buffers and static integer arguments.

    Signature in C: ``int name(T* b0, ..., int64_t s0, ...)``; returns 0, or a CheckIndex
    code on failure.
    """

    name: str  #: C identifier
    buffers: tuple[Buffer, ...]  #: every buffer the body touches, in parameter order
    static_args: tuple[Symbol, ...]  #: integer arguments, in parameter order
    body: Stmt
    precision: Precision = Precision.FLOAT32


def index_of(sym: Symbol, coeff: int = 1, offset: int = 0) -> IndexExpr:
    """``coeff * sym + offset``. Example: ``index_of(Symbol(0, 'i'))``."""
    return IndexExpr(((coeff, sym),), offset) if coeff != 0 else IndexExpr((), offset)


def const_index(offset: int) -> IndexExpr:
    """A fixed index. Example: ``const_index(0)``."""
    return IndexExpr((), offset)


def vec_length(precision: Precision) -> int:
    """Cells one uint4x32 word (16 bytes) yields: 4 in float32 compute, 2 in float64."""
    return 16 // (4 if precision.compute is Precision.FLOAT32 else 8)


def storage(buf: Buffer, precision: Precision) -> Precision:
    """How `buf`'s cells are stored in a routine of `precision`."""
    own = buf.precision
    if own is None or buf.uint4x32:
        return precision
    return precision.compute if own is Precision.COMPUTE else own


def cell_elems(buf: Buffer, precision: Precision) -> int:
    """Elements of the routine's stored precision the buffer's array holds (a uint4x32
    cell is 16 bytes of them)."""
    n = 1
    for d in buf.dims:
        n *= d
    return n * (16 // precision.cell_bytes if buf.uint4x32 else 1)
