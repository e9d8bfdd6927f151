"""The C dialect: how the loop IR is spelled in C (types, qualifiers, math functions,
operator templates, helpers, loops, the threefry generator).

`CSyntax` holds every spelling as an attribute or method, so a dialect of C (CUDA, say)
subclasses it and overrides what differs: type names, the kernel/helper qualifiers,
`restrict`, math spellings (`ops`), or how a loop header, parameter or fill is written
(like tinygrad's CStyleLanguage/CUDARenderer or OCANNL's c_syntax.ml config). The renderer
(`c_backend`) walks the IR and asks the dialect for text.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from ocannl_ast.backends import c_uint4x32
from ocannl_ast.lowering.loop_ir import BinOp, Precision, TernOp, UnOp
from ocannl_ast.lowering.threefry import KS_PARITY, ROTATIONS, ROUNDS

# ---- spellings ---------------------------------------------------------------------
# Placeholders: {0} {1} {2} operands; {T} the C type; {f} the libm suffix ("f" or "");
# {p} the helper suffix ("f" or "d"); {z} and {o} the literals 0 and 1 of type {T}; {U} the
# unsigned integer type of the same width; {Q} the helper qualifier ("static inline").


@dataclass(frozen=True, slots=True)
class Spelling:
    template: str  #: C expression text
    helper: str | None = None  #: name of a static inline helper it calls (key of HELPERS)


OPS: dict[UnOp | BinOp | TernOp, Spelling] = {
    UnOp.IDENTITY: Spelling("{0}"),
    UnOp.NEG: Spelling("(-{0})"),
    UnOp.RELU: Spelling("ocannl_max_{p}({0}, {z})", "max"),  # NaN propagates, as np.maximum
    UnOp.EXP: Spelling("exp{f}({0})"),
    UnOp.LOG: Spelling("log{f}({0})"),
    UnOp.TANH: Spelling("tanh{f}({0})"),
    UnOp.SIN: Spelling("sin{f}({0})"),
    UnOp.COS: Spelling("cos{f}({0})"),
    UnOp.SQRT: Spelling("sqrt{f}({0})"),
    UnOp.RECIP: Spelling("({o} / {0})"),
    UnOp.NOT: Spelling("(({T})({0} == {z}))"),
    UnOp.SIGN: Spelling("ocannl_sign_{p}({0})", "sign"),
    UnOp.SAT01: Spelling("ocannl_sat01_{p}({0})", "sat01"),
    UnOp.EXP2: Spelling("exp2{f}({0})"),
    UnOp.LOG2: Spelling("log2{f}({0})"),
    UnOp.RECIP_SQRT: Spelling("({o} / sqrt{f}({0}))"),
    BinOp.ADD: Spelling("({0} + {1})"),
    BinOp.SUB: Spelling("({0} - {1})"),
    BinOp.MUL: Spelling("({0} * {1})"),
    BinOp.DIV: Spelling("({0} / {1})"),
    BinOp.POW: Spelling("pow{f}({0}, {1})"),
    BinOp.MAX: Spelling("ocannl_max_{p}({0}, {1})", "max"),
    BinOp.MIN: Spelling("ocannl_min_{p}({0}, {1})", "min"),
    BinOp.LT: Spelling("(({T})({0} < {1}))"),
    BinOp.LE: Spelling("(({T})({0} <= {1}))"),
    BinOp.EQ: Spelling("(({T})({0} == {1}))"),
    BinOp.NE: Spelling("(({T})({0} != {1}))"),
    BinOp.ARG1: Spelling("{0}"),
    BinOp.ARG2: Spelling("{1}"),
    BinOp.RELU_GATE: Spelling("ocannl_select_{p}({0} > {z}, {1}, {z})", "select"),
    BinOp.SAT01_GATE: Spelling("ocannl_sat01_gate_{p}({0}, {1})", "sat01_gate"),
    BinOp.OR: Spelling("(({T})(({0} != {z}) | ({1} != {z})))"),  # no short-circuit branch
    BinOp.AND: Spelling("(({T})(({0} != {z}) & ({1} != {z})))"),
    BinOp.THREEFRY4X32: Spelling("ocannl_threefry4x32({0}, {1})", "threefry4x32"),
    TernOp.WHERE: Spelling("ocannl_select_{p}({0} != {z}, {1}, {2})", "select"),
    TernOp.FMA: Spelling("fma{f}({0}, {1}, {2})"),
}

#: Helpers take each operand once (a C macro or select would evaluate it twice), in the
#: order they are emitted (a helper may call the ones above it); `_HELPER_DEPS` lists those.
#:
#: Every select is `ocannl_select`, a bitwise blend with no branch and no `?:`. A plain
#: `c ? a[i] : b[i]` loads each operand only on its own branch; at -O3 with AVX, gcc 12
#: if-converts that into masked loads (vmaskmovpd) and its SLP vectorizer then reuses the
#: first vector's mask for the following ones: `-O3 -march=native` gave wrong `where` values
#: and relu gradients. Here both operands are evaluated as call arguments (unconditional
#: loads) and blended with integer masks, so there is no control flow for gcc to if-convert
#: or to sink the loads into; it is exact for NaN, infinities and signed zeros, and gcc
#: still vectorizes it (to vblendvpd / vpternlog). tests/backends/test_c_flags.py checks
#: -O2 against -O3 -march=native bit for bit.
HELPERS: dict[str, str] = {
    "select": "{Q} {T} ocannl_select_{p}(int c, {T} a, {T} b) {{\n"
    "  union {{ {T} v; {U} u; }} x = {{ a }}, y = {{ b }};\n"
    "  {U} m = ({U})0 - ({U})(c != 0);\n"
    "  x.u = (x.u & m) | (y.u & ~m);\n"
    "  return x.v;\n}}",
    "max": "{Q} {T} ocannl_max_{p}({T} a, {T} b) "
    "{{ return ocannl_select_{p}((a > b) | (a != a), a, b); }}",
    "min": "{Q} {T} ocannl_min_{p}({T} a, {T} b) "
    "{{ return ocannl_select_{p}((a < b) | (a != a), a, b); }}",
    "sign": "{Q} {T} ocannl_sign_{p}({T} x) "
    "{{ return ocannl_select_{p}(x != x, x, ({T})((x > {z}) - (x < {z}))); }}",
    "sat01": "{Q} {T} ocannl_sat01_{p}({T} x) {{ return ocannl_select_{p}(x < {z}, {z}, "
    "ocannl_select_{p}(x > {o}, {o}, x)); }}",  # NaN compares false both ways: stays NaN
    "sat01_gate": "{Q} {T} ocannl_sat01_gate_{p}({T} a, {T} b) "
    "{{ return ocannl_select_{p}((a > {z}) & (a < {o}), b, {z}); }}",
}
HELPERS.update(c_uint4x32.HELPERS)
HELPER_DEPS: dict[str, tuple[str, ...]] = {"max": ("select",), "min": ("select",),
                                            "sign": ("select",), "sat01": ("select",),
                                            "sat01_gate": ("select",), **c_uint4x32.DEPS}

C_KEYWORDS = frozenset((
    "auto", "break", "case", "char", "const", "continue", "default", "do", "double", "else",
    "enum", "extern", "float", "for", "goto", "if", "inline", "int", "long", "register",
    "restrict", "return", "short", "signed", "sizeof", "static", "struct", "switch", "typedef",
    "union", "unsigned", "void", "volatile", "while", "main",
))
_MATH_BASES = (
    "acos", "asin", "atan", "atan2", "cos", "sin", "tan", "acosh", "asinh", "atanh", "cosh",
    "sinh", "tanh", "exp", "exp2", "expm1", "frexp", "ilogb", "ldexp", "log", "log10", "log1p",
    "log2", "logb", "modf", "scalbn", "scalbln", "cbrt", "fabs", "hypot", "pow", "sqrt", "erf",
    "erfc", "lgamma", "tgamma", "ceil", "floor", "nearbyint", "rint", "lrint", "llrint",
    "round", "lround", "llround", "trunc", "fmod", "remainder", "remquo", "copysign", "nan",
    "nextafter", "nexttoward", "fdim", "fmax", "fmin", "fma",
)
_MATH_MACROS = (
    "fpclassify", "isfinite", "isinf", "isnan", "isnormal", "signbit", "isgreater",
    "isgreaterequal", "isless", "islessequal", "islessgreater", "isunordered",
)
#: Names a buffer, routine or local may not take in C (prefixed instead).
_RESERVED = C_KEYWORDS | {m + s for m in _MATH_BASES for s in ("", "f", "l")} | set(_MATH_MACROS)
ASCII_WORD = re.compile(r"[^A-Za-z0-9_]")
_GENERATED = re.compile(r"^(i\d+|[sbl]_.*|ocannl_.*|_.*|.*_t|[A-Z0-9_]+)$")


def c_ident(name: str, prefix: str = "b_") -> str:
    """A C identifier for `name` that cannot clash with keywords, libm or generated names.

    Example: ``c_ident("w.grad") == "w_grad"``, ``c_ident("exp") == "b_exp"``.
    """
    ident = ASCII_WORD.sub("_", name) or "_"
    if ident[0].isdigit() or ident in _RESERVED or _GENERATED.match(ident):
        ident = prefix + ident
    return ident



# ---- literals and the threefry generator ------------------------------------------


def c_const(value: float, precision: Precision) -> str:
    """An exact C literal of `value` rounded to the routine's precision (``0.1f``, ``NAN``)."""
    if math.isnan(value):
        return "NAN"
    if precision is Precision.FLOAT32:
        with np.errstate(over="ignore"):
            v32 = np.float32(value)
        text = "INFINITY" if np.isinf(v32) else f"{v32}f"  # str(): shortest round-trip
    else:
        text = "INFINITY" if math.isinf(value) else repr(value)
    negative = math.copysign(1.0, value) < 0
    if text == "INFINITY" and negative:
        return "(-INFINITY)"
    return f"({text})" if negative else text


def threefry_c(words: Mapping[str, str]) -> list[str]:
    """Threefry-4x32-20 unrolled from the reference's constants, and the uniform helper."""
    lines = [
        f"{words['Q']} uint32_t ocannl_rotl32(uint32_t x, int r) {{",
        "  return (x << r) | (x >> (32 - r));",
        "}",
        "",
        "/* Threefry-4x32-20 (Random123): word 0 of the output, as a uniform in [0, 1). */",
        (
            f"{words['Q']} {words['T']} ocannl_uniform_{words['p']}("
            "uint32_t k0, uint32_t k1, uint32_t k2, uint32_t k3, uint32_t ctr) {"
        ),
        f"  const uint32_t k4 = 0x{KS_PARITY:08X}u ^ k0 ^ k1 ^ k2 ^ k3;",
        "  uint32_t x0 = ctr + k0, x1 = k1, x2 = k2, x3 = k3;",
    ]
    ks = ("k0", "k1", "k2", "k3", "k4")
    for r in range(ROUNDS):
        (ra, rb), (a, b) = ROTATIONS[r % 8], ((1, 3) if r % 2 == 0 else (3, 1))
        lines.append(
            f"  x0 += x{a}; x{a} = ocannl_rotl32(x{a}, {ra}) ^ x0; "
            f"x2 += x{b}; x{b} = ocannl_rotl32(x{b}, {rb}) ^ x2;"
        )
        if r % 4 == 3:
            s = r // 4 + 1
            adds = " ".join(f"x{j} += {ks[(s + j) % 5]};" for j in range(4))
            lines.append(f"  {adds} x3 += {s}u;")
    lines.append(f"  return ({words['T']})(x0 >> 8) * 0x1p-24{words['f']};  /* exact */")
    return [*lines, "}"]


@dataclass(frozen=True, slots=True)
class CSyntax:
    """Plain C11 (for gcc): ``int name(float* restrict b, ..., int64_t s)``, libm calls.

    Example: ``CSyntax().for_header("i0", 4) == "for (int64_t i0 = 0; i0 < 4; ++i0) {"``.
    """

    type_names: Mapping[Precision, str] = field(
        default_factory=lambda: {Precision.FLOAT32: "float", Precision.FLOAT64: "double"})
    includes: tuple[str, ...] = ("#include <math.h>", "#include <stdint.h>")
    kernel_qualifier: str = ""  #: before the routine's return type (CUDA: ``__global__``)
    #: of the functions a C routine's entry point calls in order (one per group of top-level
    #: statements): not inlined, so gcc optimizes each alone and its time stays linear
    function_qualifier: str = "static __attribute__((noinline))"
    helper_qualifier: str = "static inline"  #: of helpers (CUDA: ``__device__ inline``)
    restrict: str = "restrict"  #: pointer qualifier of buffers (CUDA: ``__restrict__``)
    index_type: str = "int64_t"  #: loop counters and static integer arguments
    ops: Mapping[UnOp | BinOp | TernOp, Spelling] = field(default_factory=lambda: OPS)
    helpers: Mapping[str, str] = field(default_factory=lambda: HELPERS)
    helper_deps: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: HELPER_DEPS)

    def words(self, precision: Precision) -> dict[str, str]:
        """The template placeholders of `precision` (see the table above)."""
        is32 = precision is Precision.FLOAT32
        return {
            "T": self.type_names[precision], "f": "f" if is32 else "", "p": "f" if is32 else "d",
            "z": "0.0f" if is32 else "0.0", "o": "1.0f" if is32 else "1.0",
            "U": "uint32_t" if is32 else "uint64_t", "Q": self.helper_qualifier,
        }

    def const(self, value: float, precision: Precision) -> str:
        return c_const(value, precision)

    def op(self, op: UnOp | BinOp | TernOp, words: Mapping[str, str],
           args: tuple[str, ...]) -> tuple[str, tuple[str, ...]]:
        """The text of `op` applied to `args`, and the helpers it needs (with dependencies)."""
        spelling = self.ops[op]
        needed: tuple[str, ...] = ()
        if spelling.helper is not None:
            needed = (spelling.helper, *self.helper_deps.get(spelling.helper, ()))
        return spelling.template.format(*args, **words), needed

    def helper_defs(self, used: set[str], words: Mapping[str, str]) -> list[str]:
        """Definitions of the `used` helpers, in dependency order, each followed by ''."""
        out: list[str] = []
        for name, text in self.helpers.items():
            if name in used:
                out += [text.format(**words), ""]
        return out

    def threefry(self, words: Mapping[str, str]) -> list[str]:
        return threefry_c(words)

    def uniform_call(self, words: Mapping[str, str], key: tuple[int, ...], counter: str) -> str:
        args = [f"0x{k:08x}u" for k in key] + [f"(uint32_t)({counter})"]
        return f"ocannl_uniform_{words['p']}({', '.join(args)})"

    def cell(self, name: str, offset: str) -> str:
        """A buffer element at a flat (row-major) offset."""
        return f"{name}[{offset}]"

    def cast(self, type_name: str, text: str) -> str:
        return f"(({type_name}){text})"

    def for_header(self, name: str, extent: int) -> str:
        return f"for ({self.index_type} {name} = 0; {name} < {extent}; ++{name}) {{"

    def fill(self, name: str, size: int, value: str) -> str:
        if size == 1:
            return f"{name}[0] = {value};"
        k = "ocannl_k"
        return f"{self.for_header(k, size)[:-2]} {name}[{k}] = {value};"

    def check(self, index: str, bound: int, code: int) -> str:
        return f"if (!(0 <= ({index}) && ({index}) < {bound})) return {code};"

    def buffer_param(self, type_name: str, name: str) -> str:
        return f"{type_name}* {self.restrict} {name}"

    def static_param(self, name: str) -> str:
        return f"{self.index_type} {name}"

    def signature(self, cname: str, params: list[str]) -> str:
        return f"{self.kernel_qualifier}int {cname}({', '.join(params) or 'void'}) {{"

    def function_signature(self, name: str, params: list[str]) -> str:
        """A part of a routine: ``static ... int name(float* restrict b, int64_t s) {``."""
        return f"{self.function_qualifier} int {name}({', '.join(params) or 'void'}) {{"

    def entry_signature(self, cname: str, type_name: str) -> str:
        """A routine's entry point: every buffer in one pointer table, statics in one array."""
        return (f"{self.kernel_qualifier}int {cname}({type_name}* const* bufs, "
                f"const {self.index_type}* statics) {{")

    def cdef(self, cname: str, type_name: str) -> str:
        """The declaration of the entry point cffi needs (no qualifiers)."""
        return f"int {cname}({type_name} *const *, const {self.index_type} *);"

    def epilogue(self) -> list[str]:
        return ["  return 0;", "}"]


#: The dialect of the gcc backend.
C = CSyntax()
