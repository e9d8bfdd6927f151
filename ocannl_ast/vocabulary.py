"""The operator vocabulary (leaf module, imports nothing from the package): the primitive
enums of the loop IR and their @cd spellings, and the accumulation operators.

The rewriter checks decorated code against these tables at decoration time and the
builders build from the same tables, so whatever decorates also builds. Semantics follow
OCANNL's `Ir.Ops` (arrayjit/lib/ops.ml), NaN-propagating like NumPy where they differ.
"""

from __future__ import annotations

import enum


class UnOp(enum.Enum):
    IDENTITY = "id"
    NEG = "neg"
    RELU = "relu"
    SAT01 = "sat01"  # clamp to [0, 1] (NaN stays NaN, as np.clip)
    EXP = "exp"
    LOG = "log"
    EXP2 = "exp2"  # 2 ** x
    LOG2 = "log2"
    TANH = "tanh"
    SIN = "sin"
    COS = "cos"
    SQRT = "sqrt"
    RECIP = "recip"
    RECIP_SQRT = "recip_sqrt"  # 1 / sqrt(x)
    NOT = "not"  # 1 if x == 0 else 0
    SIGN = "sign"  # -1, 0 or 1
    FLOOR = "floor"  # the largest integer <= x
    ROUND = "round"  # the nearest integer, halves to even (np.round, C rint)


class BinOp(enum.Enum):
    ADD = "add"
    SUB = "sub"
    MUL = "mul"
    DIV = "div"
    POW = "pow"
    MAX = "max"
    MIN = "min"
    LT = "lt"  # 1.0 if a < b else 0.0
    LE = "le"
    EQ = "eq"
    NE = "ne"
    ARG1 = "arg1"  # a
    ARG2 = "arg2"  # b
    RELU_GATE = "relu_gate"  # b if a > 0 else 0
    SAT01_GATE = "sat01_gate"  # b if 0 < a < 1 else 0 (the derivative gate of sat01)
    OR = "or"  # 1 if a != 0 or b != 0 else 0
    AND = "and"  # 1 if a != 0 and b != 0 else 0
    MOD = "mod"  # a - floor(a / b) * b, computed as np.mod: the sign of b (NaN for b == 0)
    #: Threefry-4x32-20 (OCANNL `^^^^`): key a, counter b, both uint4x32 (a float operand is
    #: converted: its integer value in words 0-1); the result is a uint4x32 word
    THREEFRY4X32 = "threefry4x32"


class TernOp(enum.Enum):
    WHERE = "where"  # b if a != 0 else c
    FMA = "fma"  # a * b + c


class VecUnOp(enum.Enum):
    """Vectorized unary operations (seed 001): one read writes several output cells."""

    #: a uint4x32 word -> 16 / bytes(precision) uniforms in [0, 1) (4 in f32, 2 in f64)
    UINT4X32_TO_PREC_UNIFORM = "uint4x32_to_prec_uniform"


Prim = UnOp | BinOp | TernOp

#: @cd spellings of the primitives (OCANNL's `unop_cd_syntax` / `binop_cd_fallback_syntax`;
#: `or_`/`and_`/`mod_` keep OCANNL's trailing underscore; `mod_` follows NumPy's `np.mod`:
#: the result takes the divisor's sign). `threefry4x32` is OCANNL's `^^^^`.
UNARY: dict[str, UnOp] = {op.value: op for op in UnOp}
BINARY: dict[str, BinOp] = {
    **{op.value: op for op in BinOp if op not in (BinOp.ARG1, BinOp.ARG2, BinOp.OR, BinOp.AND)},
    "fst": BinOp.ARG1, "snd": BinOp.ARG2, "arg1": BinOp.ARG1, "arg2": BinOp.ARG2,
    "or_": BinOp.OR, "and_": BinOp.AND, "mod_": BinOp.MOD,
}
TERNARY: dict[str, TernOp] = {op.value: op for op in TernOp}
#: Every primitive spelling; the arity follows from the enum of its value.
PRIMS: dict[str, Prim] = {**UNARY, **BINARY, **TERNARY}


#: OCANNL primitives this library does not build yet, and why (a located DslSyntaxError at
#: decoration time names the reason).
UNSUPPORTED: dict[str, str] = {}


def arity(op: Prim) -> int:
    """How many arguments a primitive takes."""
    return 1 if isinstance(op, UnOp) else 2 if isinstance(op, BinOp) else 3


#: Accumulators: the symbol after "=" (or "=:") in an accumulation operator.
ACCUM_SYMBOLS: dict[str, BinOp] = {
    "+": BinOp.ADD, "-": BinOp.SUB, "*": BinOp.MUL, "/": BinOp.DIV, "**": BinOp.POW,
    "@^": BinOp.MAX, "@-": BinOp.MIN, "||": BinOp.OR, "&&": BinOp.AND,
    "?/": BinOp.RELU_GATE, "?^": BinOp.SAT01_GATE,
}
#: Every accumulation operator -> (accumulator, initialize_neutral). "=:" alone assigns.
ACCUM_OPS: dict[str, tuple[BinOp, bool]] = {
    "=:": (BinOp.ARG2, True),
    **{f"={s}": (op, False) for s, op in ACCUM_SYMBOLS.items()},
    **{f"=:{s}": (op, True) for s, op in ACCUM_SYMBOLS.items()},
}
#: The neutral element each accumulator starts from with "=:" (OCANNL `neutral_elem`).
NEUTRAL: dict[BinOp, float] = {
    BinOp.ADD: 0.0, BinOp.SUB: 0.0, BinOp.MUL: 1.0, BinOp.DIV: 1.0, BinOp.POW: 1.0,
    BinOp.MAX: -float("inf"), BinOp.MIN: float("inf"), BinOp.ARG2: 0.0, BinOp.ARG1: 0.0,
    BinOp.OR: 0.0, BinOp.AND: 1.0, BinOp.RELU_GATE: 1.0, BinOp.SAT01_GATE: 0.5,
}


def accum_spelling(op: BinOp, initialize_neutral: bool) -> str:
    """The accumulation operator text of an accumulator (inverse of ACCUM_OPS)."""
    if op is BinOp.ARG2:
        return "=:"
    for text, (acc, init) in ACCUM_OPS.items():
        if acc is op and init == initialize_neutral:
            return text
    raise ValueError(f"{op} is not an accumulator")
