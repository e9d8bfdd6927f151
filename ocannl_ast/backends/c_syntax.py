"""The C dialect: how the loop IR is spelled in C (types, qualifiers, math functions,
operator templates, helpers, loops, the threefry generator).

`CSyntax` holds every spelling as an attribute or method, so a dialect of C (CUDA, say)
subclasses it and overrides what differs: type names, the kernel/helper qualifiers,
`restrict`, math spellings (`ops`), or how a loop header, parameter or fill is written
(like tinygrad's CStyleLanguage/CUDARenderer or OCANNL's c_syntax.ml config). Its
capability fields (`contraction_kernels`, `reorder_loops`, `fusion_limit`, ...) say what the
renderer may do beyond spelling each statement. The renderer (`c_renderer.CRenderer`) walks
the IR and asks the dialect for text.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np

from ocannl_ast import config
from ocannl_ast.backends import c_lane_combine, c_math, c_uint4x32
from ocannl_ast.lowering.loop_ir import (
    C_KERNEL_MIN_WORK,
    BinOp,
    Precision,
    TernOp,
    UnOp,
)
from ocannl_ast.lowering.threefry import KS_PARITY, ROTATIONS, ROUNDS

# ---- spellings ---------------------------------------------------------------------


class Word(StrEnum):
    """The placeholders of the spelling templates besides the operands ``{0} {1} {2}``:
    ``"(({type})({0} < {1}))"``. `CSyntax.words` gives each its text for a precision."""

    TYPE = "type"  #: the C element type ("float", "double")
    LIBM = "libm"  #: the libm suffix of that type ("f" or "")
    SUFFIX = "suffix"  #: the suffix of our helpers' names ("f" or "d")
    ZERO = "zero"  #: the literal 0 of the type ("0.0f")
    ONE = "one"  #: the literal 1 of the type ("1.0f")
    UINT = "uint"  #: the unsigned integer type of the same width ("uint32_t")
    QUALIFIER = "qualifier"  #: of helper definitions ("static inline")
    STORAGE = "storage"  #: the element type of buffers ("float"; "unsigned short" if 16-bit)


@dataclass(frozen=True, slots=True)
class Spelling:
    template: str  #: C expression text
    helper: str | None = None  #: name of a static inline helper it calls (key of HELPERS)


OPS: dict[UnOp | BinOp | TernOp, Spelling] = {
    UnOp.IDENTITY: Spelling("{0}"),
    UnOp.NEG: Spelling("(-{0})"),
    UnOp.RELU: Spelling("ocannl_max_{suffix}({0}, {zero})", "max"),  # NaN propagates, as np.maximum
    UnOp.EXP: Spelling("exp{libm}({0})"),
    UnOp.LOG: Spelling("log{libm}({0})"),
    UnOp.TANH: Spelling("tanh{libm}({0})"),
    UnOp.SIN: Spelling("sin{libm}({0})"),
    UnOp.COS: Spelling("cos{libm}({0})"),
    UnOp.SQRT: Spelling("sqrt{libm}({0})"),
    UnOp.RECIP: Spelling("({one} / {0})"),
    UnOp.NOT: Spelling("(({type})({0} == {zero}))"),
    UnOp.SIGN: Spelling("ocannl_sign_{suffix}({0})", "sign"),
    UnOp.SAT01: Spelling("ocannl_sat01_{suffix}({0})", "sat01"),
    UnOp.EXP2: Spelling("exp2{libm}({0})"),
    UnOp.LOG2: Spelling("log2{libm}({0})"),
    UnOp.RECIP_SQRT: Spelling("({one} / sqrt{libm}({0}))"),
    UnOp.FLOOR: Spelling("floor{libm}({0})"),
    UnOp.ROUND: Spelling("rint{libm}({0})"),  # halves to even in the default rounding mode
    BinOp.ADD: Spelling("({0} + {1})"),
    BinOp.SUB: Spelling("({0} - {1})"),
    BinOp.MUL: Spelling("({0} * {1})"),
    BinOp.DIV: Spelling("({0} / {1})"),
    BinOp.POW: Spelling("pow{libm}({0}, {1})"),
    BinOp.MAX: Spelling("ocannl_max_{suffix}({0}, {1})", "max"),
    BinOp.MIN: Spelling("ocannl_min_{suffix}({0}, {1})", "min"),
    BinOp.LT: Spelling("(({type})({0} < {1}))"),
    BinOp.LE: Spelling("(({type})({0} <= {1}))"),
    BinOp.EQ: Spelling("(({type})({0} == {1}))"),
    BinOp.NE: Spelling("(({type})({0} != {1}))"),
    BinOp.ARG1: Spelling("{0}"),
    BinOp.ARG2: Spelling("{1}"),
    BinOp.RELU_GATE: Spelling("ocannl_select_{suffix}({0} > {zero}, {1}, {zero})", "select"),
    BinOp.SAT01_GATE: Spelling("ocannl_sat01_gate_{suffix}({0}, {1})", "sat01_gate"),
    BinOp.OR: Spelling("(({type})(({0} != {zero}) | ({1} != {zero})))"),  # no short-circuit branch
    BinOp.AND: Spelling("(({type})(({0} != {zero}) & ({1} != {zero})))"),
    BinOp.MOD: Spelling("ocannl_mod_{suffix}({0}, {1})", "mod"),
    BinOp.THREEFRY4X32: Spelling("ocannl_threefry4x32({0}, {1})", "threefry4x32"),
    TernOp.WHERE: Spelling("ocannl_select_{suffix}({0} != {zero}, {1}, {2})", "select"),
    TernOp.FMA: Spelling("fma{libm}({0}, {1}, {2})"),
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
    "select": "{qualifier} {type} ocannl_select_{suffix}(int c, {type} a, {type} b) {{\n"
    "  union {{ {type} v; {uint} u; }} x = {{ a }}, y = {{ b }};\n"
    "  {uint} m = ({uint})0 - ({uint})(c != 0);\n"
    "  x.u = (x.u & m) | (y.u & ~m);\n"
    "  return x.v;\n}}",
    "max": "{qualifier} {type} ocannl_max_{suffix}({type} a, {type} b) "
    "{{ return ocannl_select_{suffix}((a > b) | (a != a), a, b); }}",
    "min": "{qualifier} {type} ocannl_min_{suffix}({type} a, {type} b) "
    "{{ return ocannl_select_{suffix}((a < b) | (a != a), a, b); }}",
    "sign": "{qualifier} {type} ocannl_sign_{suffix}({type} x) "
    "{{ return ocannl_select_{suffix}(x != x, x, ({type})((x > {zero}) - (x < {zero}))); }}",
    "sat01": "{qualifier} {type} ocannl_sat01_{suffix}({type} x) "
    "{{ return ocannl_select_{suffix}(x < {zero}, {zero}, "
    "ocannl_select_{suffix}(x > {one}, {one}, x)); }}",  # NaN compares false both ways: stays NaN
    "sat01_gate": "{qualifier} {type} ocannl_sat01_gate_{suffix}({type} a, {type} b) "
    "{{ return ocannl_select_{suffix}((a > {zero}) & (a < {one}), b, {zero}); }}",
    # np.mod: fmod, moved to the divisor's sign when they differ; a zero takes b's sign
    "mod": "{qualifier} {type} ocannl_mod_{suffix}({type} a, {type} b) {{\n"
    "  {type} r = fmod{libm}(a, b);\n"
    "  {type} s = ocannl_select_{suffix}((r != {zero}) & ((r < {zero}) != (b < {zero})), r + b, r);\n"
    "  return ocannl_select_{suffix}(r == {zero}, copysign{libm}({zero}, b), s);\n}}",
}
#: 16-bit storage (`Precision.is_half`): a load widens to float exactly, a store rounds to
#: nearest even. bfloat16 is the top half of a float32 (a NaN stays a quiet NaN of its sign).
#: IEEE half: NVRTC's PTX conversions, else gcc's `_Float16` (gcc >= 12 on x86-64), else
#: the same conversions by bit manipulation (``-DOCANNL_NO_FLOAT16`` forces those).
_HALF_BITS = (
    "{qualifier} float ocannl_h2f(unsigned short h) {{\n"
    "  union {{ uint32_t u; float f; }} x;\n"
    "  uint32_t s = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;\n"
    "  if (e == 0x1fu) x.u = s | 0x7f800000u | (m << 13);\n"
    "  else if (e != 0u) x.u = s | ((e + 112u) << 23) | (m << 13);\n"
    "  else {{ x.f = (float)m * 0x1p-24f; x.u |= s; }}\n"
    "  return x.f;\n}}\n"
    "{qualifier} unsigned short ocannl_f2h(float f) {{\n"
    "  union {{ float f; uint32_t u; }} x;\n"
    "  x.f = f;\n"
    "  uint32_t s = (x.u >> 16) & 0x8000u, a = x.u & 0x7fffffffu;\n"
    "  if (a > 0x7f800000u) return (unsigned short)(s | 0x7e00u | ((a >> 13) & 0x3ffu));\n"
    "  if (a >= 0x477ff000u) return (unsigned short)(s | 0x7c00u);\n"
    "  if (a < 0x38800000u) {{ x.u = a; return (unsigned short)(s | (uint32_t)rintf(x.f * 0x1p24f)); }}\n"
    "  return (unsigned short)(s | ((a + 0xfffu + ((a >> 13) & 1u) - 0x38000000u) >> 13));\n}}"
)
HELPERS["half"] = (
    "#if defined(__CUDACC__)\n"
    "{qualifier} float ocannl_h2f(unsigned short h) {{\n"
    "  float f;\n  asm(\"cvt.f32.f16 %0, %1;\" : \"=f\"(f) : \"h\"(h));\n  return f;\n}}\n"
    "{qualifier} unsigned short ocannl_f2h(float f) {{\n"
    "  unsigned short h;\n  asm(\"cvt.rn.f16.f32 %0, %1;\" : \"=h\"(h) : \"f\"(f));\n"
    "  return h;\n}}\n"
    "#elif defined(__FLT16_MAX__) && !defined(OCANNL_NO_FLOAT16)\n"
    "{qualifier} float ocannl_h2f(unsigned short h) "
    "{{ union {{ unsigned short u; _Float16 v; }} x; x.u = h; return (float)x.v; }}\n"
    "{qualifier} unsigned short ocannl_f2h(float f) "
    "{{ union {{ _Float16 v; unsigned short u; }} x; x.v = (_Float16)f; return x.u; }}\n"
    "#else\n" + _HALF_BITS + "\n#endif"
)
HELPERS["bfloat16"] = (
    "{qualifier} float ocannl_bf2f(unsigned short h) "
    "{{ union {{ uint32_t u; float f; }} x; x.u = (uint32_t)h << 16; return x.f; }}\n"
    "{qualifier} unsigned short ocannl_f2bf(float f) {{\n"
    "  union {{ float f; uint32_t u; }} x;\n"
    "  x.f = f;\n"
    "  if ((x.u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((x.u >> 16) | 0x40u);\n"
    "  return (unsigned short)((x.u + 0x7fffu + ((x.u >> 16) & 1u)) >> 16);\n}}"
)
#: The C types of the integer (id) storage precisions.
INTEGER_TYPES = {Precision.UINT32: "uint32_t", Precision.UINT64: "uint64_t",
                 Precision.INT32: "int32_t"}
#: Per 16-bit precision: its helper, the load function, the store function.
HALF_CONVERSIONS: dict[Precision, tuple[str, str, str]] = {
    Precision.FLOAT16: ("half", "ocannl_h2f", "ocannl_f2h"),
    Precision.BFLOAT16: ("bfloat16", "ocannl_bf2f", "ocannl_f2bf"),
}
HELPERS.update(c_uint4x32.HELPERS)
HELPERS.update(c_lane_combine.HELPERS)
HELPER_DEPS: dict[str, tuple[str, ...]] = {"max": ("select",), "min": ("select",),
                                            "sign": ("select",), "sat01": ("select",),
                                            "sat01_gate": ("select",), "mod": ("select",),
                                            **c_uint4x32.DEPS}

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
    # -0.0 == 0.0 and 1 == 1.0 (whose repr differs): the sign and the type are in the key
    return _c_const(value, math.copysign(1.0, value) < 0, precision, type(value).__name__)


@functools.lru_cache(maxsize=4096)
def _c_const(value: float, negative: bool, precision: Precision, _kind: str) -> str:
    if precision is Precision.FLOAT32:
        with np.errstate(over="ignore"):
            v32 = np.float32(value)
        text = "INFINITY" if np.isinf(v32) else f"{v32}f"  # str(): shortest round-trip
    else:
        text = "INFINITY" if math.isinf(value) else repr(value)
    if text == "INFINITY" and negative:
        return "(-INFINITY)"
    return f"({text})" if negative else text


def threefry_c(words: Mapping[str, str]) -> list[str]:
    """Threefry-4x32-20 unrolled from the reference's constants, and the uniform helper."""
    lines = [
        f"{words[Word.QUALIFIER]} uint32_t ocannl_rotl32(uint32_t x, int r) {{",
        "  return (x << r) | (x >> (32 - r));",
        "}",
        "",
        "/* Threefry-4x32-20 (Random123): word 0 of the output, as a uniform in [0, 1). */",
        (
            f"{words[Word.QUALIFIER]} {words[Word.TYPE]} ocannl_uniform_{words[Word.SUFFIX]}("
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
    t, libm = words[Word.TYPE], words[Word.LIBM]
    lines.append(f"  return ({t})(x0 >> 8) * 0x1p-24{libm};  /* exact */")
    return [*lines, "}"]


def _is_half(precision: Precision) -> bool:
    """`precision.is_half` by identity (hot: the enum's property builds a dict per call)."""
    return precision is Precision.FLOAT16 or precision is Precision.BFLOAT16


def _is_plain(precision: Precision) -> bool:
    """Whether cells stored in `precision` are numbers computed in as they are (float32,
    float64): loads and stores convert nothing."""
    return precision is Precision.FLOAT32 or precision is Precision.FLOAT64


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
    #: names a buffer may not take beyond C's (renamed ``b_<name>``): C++ keywords, built-ins
    reserved_names: frozenset[str] = frozenset()
    #: a line put before every innermost loop the renderer writes (e.g. ``#pragma GCC
    #: ivdep``); empty for none
    inner_loop_pragma: str = ""
    #: a line put before an innermost loop of at most `tiny_loop` iterations writing only
    #: locals (a short sum), ``{n}`` its extent: at -O2 gcc unrolls it first, then vectorizes
    #: the loop around it (a 2-term dot product per cell was scalar code without); empty for
    #: none
    tiny_loop_pragma: str = "#pragma GCC unroll {n}"
    tiny_loop: int = 3
    #: gcc flags the dialect's source needs (``-fopenmp-simd`` for ``#pragma omp simd``)
    compile_flags: tuple[str, ...] = ()
    # ---- capabilities: what the renderer does beyond spelling each statement ----------
    #: run contractions as calls of the blocked kernel (`c_contraction`): a C host compiler
    contraction_kernels: bool = True
    #: hoist small reductions outside their output loops (`c_reorder`), unless
    #: ``OCANNL_AST_REORDER=0``
    reorder_loops: bool = True
    #: reductions of at least this many multiply-adds are not epilogue-fused by the lowering
    #: (they stay loop nests the renderer may run as contraction kernels)
    fusion_limit: int = C_KERNEL_MIN_WORK
    #: exp, log, tanh as our vectorizable inline functions (`c_math`) instead of libm
    #: calls, unless ``OCANNL_AST_LIBM=1``
    own_math: bool = True

    def words(self, precision: Precision) -> dict[str, str]:
        """The template placeholders (`Word`) of `precision` (of its compute precision,
        but for `Word.STORAGE`)."""
        compute = precision.compute
        is32 = compute is Precision.FLOAT32
        storage = "unsigned short" if precision.is_half else self.type_names[compute]
        return {
            Word.TYPE: self.type_names[compute], Word.STORAGE: storage,
            Word.LIBM: "f" if is32 else "",
            Word.SUFFIX: "f" if is32 else "d", Word.ZERO: "0.0f" if is32 else "0.0",
            Word.ONE: "1.0f" if is32 else "1.0", Word.UINT: "uint32_t" if is32 else "uint64_t",
            Word.QUALIFIER: self.helper_qualifier,
        }

    def fingerprint(self) -> str:
        """What the compile cache key covers of the dialect: its class and every field."""
        cls = type(self)
        return f"{cls.__module__}.{cls.__qualname__}: {self!r}"

    def const(self, value: float, precision: Precision) -> str:
        return c_const(value, precision.compute)

    def storage_type(self, precision: Precision) -> str:
        """The C element type of a buffer stored in `precision` (bfloat16, float16:
        ``unsigned short``; ids: ``uint32_t``, ``uint64_t``, ``int32_t``)."""
        if _is_half(precision):
            return "unsigned short"
        return INTEGER_TYPES.get(precision) or self.type_names[precision]

    def load(self, precision: Precision, cell: str,
             compute: Precision | None = None) -> tuple[str, str | None]:
        """A cell stored in `precision` as a number of the compute precision (`compute`,
        else `precision`'s), and the helper it calls."""
        if _is_plain(precision):
            return cell, None
        if precision.is_integer:
            return self.cast(self.type_names[compute or precision.compute], cell), None
        if not _is_half(precision):
            return cell, None
        helper, load, _ = HALF_CONVERSIONS[precision]
        return f"{load}({cell})", helper

    def store(self, precision: Precision, value: str) -> tuple[str, str | None]:
        """A computed number as a stored cell (rounded to nearest even), and its helper."""
        if _is_plain(precision):
            return value, None
        if precision.is_integer:  # only copies of ids are written (`tensor.precisions`)
            return self.cast(INTEGER_TYPES[precision], value), None
        if not _is_half(precision):
            return value, None
        helper, _, store = HALF_CONVERSIONS[precision]
        return f"{store}({value})", helper

    def op(self, op: UnOp | BinOp | TernOp, words: Mapping[str, str],
           args: tuple[str, ...]) -> tuple[str, tuple[str, ...]]:
        """The text of `op` applied to `args`, and the helpers it needs (with dependencies)."""
        template, helpers = self.op_template(op, words)
        return template.format(*args, **words), helpers

    def op_template(self, op: UnOp | BinOp | TernOp, words: Mapping[str, str]
                    ) -> tuple[str, tuple[str, ...]]:
        """`op`'s text with ``{0}``, ``{1}``, ... for its operands (and `Word` names, filled
        from `words`: ``template.format(*args, **words)``), and the helpers it needs."""
        if self.own_math and op in c_math.OWN_OPS and not config.libm():
            return c_math.spelling(op, words[Word.SUFFIX])  # type: ignore[arg-type]
        spelling = self.ops[op]
        needed: tuple[str, ...] = ()
        if spelling.helper is not None:
            needed = (spelling.helper, *self.helper_deps.get(spelling.helper, ()))
        return spelling.template, needed

    def helper_defs(self, used: set[str], words: Mapping[str, str]) -> list[str]:
        """Definitions of the `used` helpers, in dependency order, each followed by ''."""
        out: list[str] = []
        for name, text in self.helpers.items():
            if name in used:
                out += [text.format(**words), ""]
        return out + c_math.definitions(used, words)

    def threefry(self, words: Mapping[str, str]) -> list[str]:
        return threefry_c(words)

    def uniform_call(self, words: Mapping[str, str], key: tuple[int, ...], counter: str) -> str:
        args = [f"0x{k:08x}u" for k in key] + [f"(uint32_t)({counter})"]
        return f"ocannl_uniform_{words[Word.SUFFIX]}({', '.join(args)})"

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

    def value_entry(self, cname: str, type_name: str) -> list[str]:
        """A second entry point of a routine of one static int, ``<cname>_v``, taking it by
        value: cffi passes an int argument faster than it stores one into an array."""
        head = f"{self.kernel_qualifier}int {cname}_v({type_name}* const* bufs, "
        return [head + f"{self.index_type} s0) {{", f"  return {cname}(bufs, &s0);", "}", ""]

    def cdef(self, cname: str, type_name: str, by_value: bool = False) -> str:
        """The declaration of the entry point cffi needs (no qualifiers), and of the
        by-value one (`value_entry`) when `by_value`."""
        value = f" int {cname}_v({type_name} *const *, {self.index_type});" if by_value else ""
        return f"int {cname}({type_name} *const *, const {self.index_type} *);{value}"

    def epilogue(self) -> list[str]:
        return ["  return 0;", "}"]


#: The dialect of the gcc backend.
C = CSyntax()
