"""C backend: render the loop IR to C, compile it with gcc, load it with cffi (ABI mode).

Stage: last. Input: a verified `LoopProgram`. Output: C source (`render_c`) and a callable
`CompiledRoutine` over NumPy arrays (`compile_c`), cached on disk by a hash of its inputs.
"""

from __future__ import annotations

import functools
import hashlib
import math
import os
import re
import secrets
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, assert_never

import cffi
import numpy as np

from ocannl_ast.errors import BackendError, RuntimeDataError
from ocannl_ast.lowering.loop_ir import (
    Binary,
    BinOp,
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
    Precision,
    Seq,
    SetCell,
    SetLocal,
    Stmt,
    Symbol,
    SymbolValue,
    Ternary,
    TernOp,
    ThreefryUniform,
    Unary,
    UnOp,
)
from ocannl_ast.lowering.threefry import KS_PARITY, ROTATIONS, ROUNDS

# ---- spellings ---------------------------------------------------------------------
# Placeholders: {0} {1} {2} operands; {T} the C type; {f} the libm suffix ("f" or "");
# {p} the helper suffix ("f" or "d"); {z} and {o} the literals 0 and 1 of type {T}.


@dataclass(frozen=True, slots=True)
class _Spelling:
    template: str  #: C expression text
    helper: str | None = None  #: name of a static inline helper it calls (key of _HELPERS)


_OPS: dict[UnOp | BinOp | TernOp, _Spelling] = {
    UnOp.IDENTITY: _Spelling("{0}"),
    UnOp.NEG: _Spelling("(-{0})"),
    UnOp.RELU: _Spelling("ocannl_max_{p}({0}, {z})", "max"),  # NaN propagates, as np.maximum
    UnOp.SAT01: _Spelling("ocannl_sat01_{p}({0})", "sat01"),
    UnOp.EXP2: _Spelling("exp2{f}({0})"),
    UnOp.LOG2: _Spelling("log2{f}({0})"),
    UnOp.RECIP_SQRT: _Spelling("({o} / sqrt{f}({0}))"),
    UnOp.EXP: _Spelling("exp{f}({0})"),
    UnOp.LOG: _Spelling("log{f}({0})"),
    UnOp.TANH: _Spelling("tanh{f}({0})"),
    UnOp.SIN: _Spelling("sin{f}({0})"),
    UnOp.COS: _Spelling("cos{f}({0})"),
    UnOp.SQRT: _Spelling("sqrt{f}({0})"),
    UnOp.RECIP: _Spelling("({o} / {0})"),
    UnOp.NOT: _Spelling("(({T})({0} == {z}))"),
    UnOp.SIGN: _Spelling("ocannl_sign_{p}({0})", "sign"),
    BinOp.ADD: _Spelling("({0} + {1})"),
    BinOp.SUB: _Spelling("({0} - {1})"),
    BinOp.MUL: _Spelling("({0} * {1})"),
    BinOp.DIV: _Spelling("({0} / {1})"),
    BinOp.POW: _Spelling("pow{f}({0}, {1})"),
    BinOp.MAX: _Spelling("ocannl_max_{p}({0}, {1})", "max"),
    BinOp.MIN: _Spelling("ocannl_min_{p}({0}, {1})", "min"),
    BinOp.LT: _Spelling("(({T})({0} < {1}))"),
    BinOp.LE: _Spelling("(({T})({0} <= {1}))"),
    BinOp.EQ: _Spelling("(({T})({0} == {1}))"),
    BinOp.NE: _Spelling("(({T})({0} != {1}))"),
    BinOp.ARG1: _Spelling("{0}"),
    BinOp.ARG2: _Spelling("{1}"),
    BinOp.RELU_GATE: _Spelling("({0} > {z} ? {1} : {z})"),
    BinOp.SAT01_GATE: _Spelling("ocannl_sat01_gate_{p}({0}, {1})", "sat01_gate"),
    BinOp.OR: _Spelling("(({T})({0} != {z} || {1} != {z}))"),
    BinOp.AND: _Spelling("(({T})({0} != {z} && {1} != {z}))"),
    TernOp.WHERE: _Spelling("({0} != {z} ? {1} : {2})"),
    TernOp.FMA: _Spelling("fma{f}({0}, {1}, {2})"),
}

#: Helpers take each operand once (a C macro or select would evaluate it twice).
_HELPERS: dict[str, str] = {
    "max": "static inline {T} ocannl_max_{p}({T} a, {T} b) "
    "{{ return (a > b || a != a) ? a : b; }}",
    "min": "static inline {T} ocannl_min_{p}({T} a, {T} b) "
    "{{ return (a < b || a != a) ? a : b; }}",
    "sat01": "static inline {T} ocannl_sat01_{p}({T} x) "
    "{{ return x != x ? x : (x < {z} ? {z} : (x > {o} ? {o} : x)); }}",
    "sat01_gate": "static inline {T} ocannl_sat01_gate_{p}({T} a, {T} b) "
    "{{ return (a > {z} && a < {o}) ? b : {z}; }}",
    "sign": "static inline {T} ocannl_sign_{p}({T} x) "
    "{{ return x != x ? x : ({T})((x > {z}) - (x < {z})); }}",
}

_PRECISION_WORDS: dict[Precision, dict[str, str]] = {
    Precision.FLOAT32: {"T": "float", "f": "f", "p": "f", "z": "0.0f", "o": "1.0f"},
    Precision.FLOAT64: {"T": "double", "f": "", "p": "d", "z": "0.0", "o": "1.0"},
}
_NUMPY_DTYPE = {Precision.FLOAT32: np.dtype(np.float32), Precision.FLOAT64: np.dtype(np.float64)}

_C_KEYWORDS = frozenset((
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
_RESERVED = _C_KEYWORDS | {m + s for m in _MATH_BASES for s in ("", "f", "l")} | set(_MATH_MACROS)
_ASCII_WORD = re.compile(r"[^A-Za-z0-9_]")
_GENERATED = re.compile(r"^(i\d+|[sbl]_.*|ocannl_.*|_.*|.*_t|[A-Z0-9_]+)$")


def c_ident(name: str, prefix: str = "b_") -> str:
    """A C identifier for `name` that cannot clash with keywords, libm or generated names.

    Example: ``c_ident("w.grad") == "w_grad"``, ``c_ident("exp") == "b_exp"``.
    """
    ident = _ASCII_WORD.sub("_", name) or "_"
    if ident[0].isdigit() or ident in _RESERVED or _GENERATED.match(ident):
        ident = prefix + ident
    return ident


# ---- rendering ---------------------------------------------------------------------


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


def _strip_outer(text: str) -> str:
    """Drop one pair of parentheses enclosing the whole expression."""
    if not (text.startswith("(") and text.endswith(")")):
        return text
    depth = 0
    for pos, ch in enumerate(text):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth == 0 and pos < len(text) - 1:
            return text
    return text[1:-1]


@dataclass(slots=True)
class _Rendered:
    source: str  #: the translation unit
    cname: str  #: the C function's name
    cdef: str  #: its declaration, for cffi
    checks: dict[int, str] = field(default_factory=dict)  #: CheckIndex code -> description


@dataclass(slots=True)
class _CRenderer:
    prog: LoopProgram
    words: dict[str, str] = field(init=False)
    buffers: dict[Buffer, str] = field(default_factory=dict)
    symbols: dict[Symbol, str] = field(default_factory=dict)
    locals: dict[str, str] = field(default_factory=dict)
    helpers: set[str] = field(default_factory=set)
    threefry: bool = False
    checks: dict[int, str] = field(default_factory=dict)
    n_iters: int = 0

    def __post_init__(self) -> None:
        self.words = _PRECISION_WORDS[self.prog.precision]
        taken: set[str] = set()
        for buf in self.prog.buffers:
            self.buffers[buf] = _unique(c_ident(buf.name), taken)
        for sym in self.prog.static_args:
            self.symbols[sym] = _unique("s_" + _ASCII_WORD.sub("_", sym.name), taken)

    def sym(self, sym: Symbol) -> str:
        if sym not in self.symbols:
            raise BackendError(f"{self.prog.name}: symbol {sym.name}#{sym.id} is not bound")
        return self.symbols[sym]

    def local(self, name: str) -> str:
        if name not in self.locals:
            # Always prefixed: a local must not shadow a buffer parameter of the same name.
            taken = set(self.locals.values())
            self.locals[name] = _unique("l_" + _ASCII_WORD.sub("_", name), taken)
        return self.locals[name]

    def affine(self, terms: dict[Symbol, int], offset: int) -> str:
        """``4*i0 + i1 - 1``: integer (int64) C text of an affine combination."""
        parts: list[str] = []
        for sym, coeff in terms.items():
            if coeff != 0:
                name = self.sym(sym)
                term = name if abs(coeff) == 1 else f"{abs(coeff)}*{name}"
                sign = "-" if coeff < 0 else ("+" if parts else "")
                parts.append(f"{sign} {term}" if parts else f"{sign}{term}")
        if not parts:
            parts.append(str(offset))
        elif offset != 0:
            parts.append(f"{'-' if offset < 0 else '+'} {abs(offset)}")
        return " ".join(parts)

    def index(self, e: IndexExpr) -> str:
        terms: dict[Symbol, int] = {}
        for coeff, sym in e.terms:
            terms[sym] = terms.get(sym, 0) + coeff
        return self.affine(terms, e.offset)

    def cell(self, buf: Buffer, index: tuple[IndexExpr, ...]) -> str:
        """Row-major flat offset of a cell, folded into one affine expression."""
        if buf not in self.buffers:
            raise BackendError(f"{self.prog.name}: buffer {buf.name!r} is not a parameter")
        if len(index) != len(buf.dims):
            raise BackendError(f"{self.prog.name}: {len(index)} indices for {buf.name!r}")
        terms: dict[Symbol, int] = {}
        offset = 0
        for axis, e in enumerate(index):
            stride = math.prod(buf.dims[axis + 1 :])
            for coeff, sym in e.terms:
                terms[sym] = terms.get(sym, 0) + coeff * stride
            offset += e.offset * stride
        return f"{self.buffers[buf]}[{self.affine(terms, offset)}]"

    def op(self, op: UnOp | BinOp | TernOp, *args: str) -> str:
        spelling = _OPS[op]
        if spelling.helper is not None:
            self.helpers.add(spelling.helper)
        return spelling.template.format(*args, **self.words)

    def expr(self, e: Expr) -> str:
        match e:
            case Const(value=v):
                return c_const(v, self.prog.precision)
            case Get(buffer=buf, index=index):
                return self.cell(buf, index)
            case GetLocal(name=name):
                return self.local(name)
            case SymbolValue(symbol=sym):
                return f"(({self.words['T']}){self.sym(sym)})"
            case Unary(op=op, arg=arg):
                return self.op(op, self.expr(arg))
            case Binary(op=op, lhs=lhs, rhs=rhs):
                return self.op(op, self.expr(lhs), self.expr(rhs))
            case Ternary(op=op, a=a, b=b, c=c):
                return self.op(op, self.expr(a), self.expr(b), self.expr(c))
            case ThreefryUniform(key=key, counter=counter):
                self.threefry = True
                args = [f"0x{k:08x}u" for k in key] + [f"(uint32_t)({self.index(counter)})"]
                return f"ocannl_uniform_{self.words['p']}({', '.join(args)})"
            case _:
                assert_never(e)

    def value(self, e: Expr) -> str:
        return _strip_outer(self.expr(e))

    def stmt(self, s: Stmt, depth: int, out: list[str]) -> None:
        pad = "  " * depth
        match s:
            case Noop():
                pass
            case Comment(text=text):
                out.extend(f"{pad}/* {ln.replace('*/', '* /')} */" for ln in text.splitlines())
            case Seq(stmts=stmts):
                self.seq(stmts, depth, out)
            case ForLoop(symbol=sym, extent=extent, body=body):
                self.for_loop(sym, extent, body, depth, out)
            case SetCell(buffer=buf, index=index, value=value):
                out.append(f"{pad}{self.cell(buf, index)} = {self.value(value)};")
            case DeclLocal(name=name, init=init):
                out.append(f"{pad}{self.words['T']} {self.local(name)} = {self.value(init)};")
            case SetLocal(name=name, value=value):
                out.append(f"{pad}{self.local(name)} = {self.value(value)};")
            case Fill(buffer=buf, value=value):
                out.append(pad + self.fill(buf, value))
            case CheckIndex(index=index, bound=bound, code=code):
                idx = self.index(index)
                self.checks.setdefault(code, f"index {idx} must lie in [0, {bound})")
                out.append(f"{pad}if (!(0 <= ({idx}) && ({idx}) < {bound})) return {code};")
            case _:
                assert_never(s)

    def seq(self, stmts: tuple[Stmt, ...], depth: int, out: list[str]) -> None:
        # A nested Seq that declares locals is a C block, so its locals stay inside it.
        for sub in stmts:
            if isinstance(sub, Seq) and any(isinstance(x, DeclLocal) for x in sub.stmts):
                out.append("  " * depth + "{")
                self.stmt(sub, depth + 1, out)
                out.append("  " * depth + "}")
            else:
                self.stmt(sub, depth, out)

    def for_loop(self, sym: Symbol, extent: int, body: Stmt, depth: int, out: list[str]) -> None:
        if sym not in self.symbols:
            self.symbols[sym] = f"i{self.n_iters}"
            self.n_iters += 1
        name = self.symbols[sym]
        out.append(f"{'  ' * depth}for (int64_t {name} = 0; {name} < {extent}; ++{name}) {{")
        self.stmt(body, depth + 1, out)
        out.append("  " * depth + "}")

    def fill(self, buf: Buffer, value: float) -> str:
        name, size = self.buffers.get(buf), math.prod(buf.dims)
        if name is None:
            raise BackendError(f"{self.prog.name}: buffer {buf.name!r} is not a parameter")
        v = c_const(value, self.prog.precision)
        if size == 1:
            return f"{name}[0] = {v};"
        return f"for (int64_t ocannl_k = 0; ocannl_k < {size}; ++ocannl_k) {name}[ocannl_k] = {v};"


def _unique(name: str, taken: set[str]) -> str:
    out, k = name, 1
    while out in taken:
        out, k = f"{name}_{k}", k + 1
    taken.add(out)
    return out


def _threefry_c(words: dict[str, str]) -> list[str]:
    """Threefry-4x32-20 unrolled from the reference's constants, and the uniform helper."""
    lines = [
        "static inline uint32_t ocannl_rotl32(uint32_t x, int r) {",
        "  return (x << r) | (x >> (32 - r));",
        "}",
        "",
        "/* Threefry-4x32-20 (Random123): word 0 of the output, as a uniform in [0, 1). */",
        (
            f"static inline {words['T']} ocannl_uniform_{words['p']}("
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


def _render(prog: LoopProgram) -> _Rendered:
    r = _CRenderer(prog)
    body: list[str] = []
    r.stmt(prog.body, 1, body)
    cname = c_ident(prog.name, "ocannl_")
    t = r.words["T"]
    params = [f"{t}* restrict {r.buffers[b]}" for b in prog.buffers]
    params += [f"int64_t {r.symbols[s]}" for s in prog.static_args]
    head = [f"/* ocannl_ast routine {prog.name} ({prog.precision.value}) */"]
    head += ["#include <math.h>", "#include <stdint.h>", ""]
    for helper in sorted(r.helpers):
        head += [_HELPERS[helper].format(**r.words), ""]
    if r.threefry:
        head += [*_threefry_c(r.words), ""]
    head.append(f"int {cname}({', '.join(params) or 'void'}) {{")
    source = "\n".join([*head, *body, "  return 0;", "}", ""])
    cparams = [f"{t} *"] * len(prog.buffers) + ["int64_t"] * len(prog.static_args)
    cdef = f"int {cname}({', '.join(cparams) or 'void'});"
    return _Rendered(source, cname, cdef, r.checks)


def render_c(prog: LoopProgram) -> str:
    """The C translation unit of a routine: ``int name(T* restrict b..., int64_t s...)``.

    Example: ``render_c(prog)`` starts with a comment, then ``#include <math.h>``.
    """
    return _render(prog).source


# ---- compiling and loading ---------------------------------------------------------

DEFAULT_OPT_FLAGS: tuple[str, ...] = ("-O2", "-march=native")
#: Always passed: no FMA contraction and no fast-math, so results match NumPy exactly
#: for + - * /; -fno-math-errno only drops errno writes (lets sqrt inline).
REQUIRED_FLAGS: tuple[str, ...] = (
    "-shared", "-fPIC", "-std=c11", "-ffp-contract=off", "-fno-math-errno",
)
CC = "gcc"
_STDERR_LINES = 40
_LOADED: dict[str, tuple[cffi.FFI, Any]] = {}


def cache_dir_default() -> Path:
    """``$OCANNL_AST_CACHE``, else ``~/.cache/ocannl_ast/c``."""
    env = os.environ.get("OCANNL_AST_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "ocannl_ast" / "c"


def _opt_flags(opt_flags: Sequence[str]) -> tuple[str, ...]:
    env = os.environ.get("OCANNL_AST_CFLAGS")
    return tuple(env.split()) if env is not None else tuple(opt_flags)


@functools.lru_cache(maxsize=4)
def _compiler_id(cc: str) -> str:
    try:
        proc = subprocess.run([cc, "--version"], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        raise BackendError(f"C compiler {cc!r} is not usable: {exc}") from None
    return proc.stdout.splitlines()[0] if proc.stdout else cc


@functools.lru_cache(maxsize=1)
def _cpu_id() -> str:
    """The host CPU's model and feature flags: what ``-march=native`` depends on."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return os.uname().machine
    wanted = ("model name", "flags", "Features", "CPU part")
    lines = [ln for ln in text.splitlines() if ln.split(":")[0].strip() in wanted]
    return "\n".join(dict.fromkeys(lines))  # one copy per distinct line


def _cache_key(source: str, flags: Sequence[str]) -> str:
    h = hashlib.sha256()
    for part in (source, "\0".join(flags), _compiler_id(CC)):
        h.update(part.encode())
        h.update(b"\x00\x01")
    if any("native" in f for f in flags):
        h.update(_cpu_id().encode())
    return h.hexdigest()


def _temp_name(path: Path) -> Path:
    return path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")


def _write_atomic(path: Path, text: str) -> None:
    tmp = _temp_name(path)
    tmp.write_text(text)
    os.replace(tmp, path)


def _run_gcc(cmd: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, check=False)


def _build(c_path: Path, so_path: Path, flags: Sequence[str]) -> None:
    """Compile to a temporary name, then rename: concurrent builders never see half a file."""
    tmp = _temp_name(so_path)
    cmd = [CC, *flags, "-o", str(tmp), str(c_path), "-lm"]
    try:
        proc = _run_gcc(cmd)
    except OSError as exc:
        raise BackendError(f"could not run {CC} on {c_path}: {exc}") from None
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        err = "\n".join(proc.stderr.splitlines()[:_STDERR_LINES])
        raise BackendError(
            f"{CC} failed (exit {proc.returncode}) on the generated file {c_path}\n"
            f"command: {' '.join(cmd)}\n{err}"
        )
    os.replace(tmp, so_path)


def _load(so_path: Path, cdef: str) -> tuple[cffi.FFI, Any]:
    key = str(so_path)
    if key not in _LOADED:
        ffi = cffi.FFI()
        ffi.cdef(cdef)
        try:
            _LOADED[key] = (ffi, ffi.dlopen(key))
        except OSError as exc:
            raise BackendError(f"cannot load {so_path} (delete it to rebuild): {exc}") from None
    return _LOADED[key]


class CompiledRoutine:
    """A loaded C routine. Call it with one C-contiguous array per buffer, then static ints.

    Example: ``compile_c(prog)([c, a, b])`` runs ``prog`` on NumPy arrays in place.
    A call with the very arrays of the previous call skips re-validation (the routine keeps
    them referenced until called with other arrays).
    """

    __slots__ = (
        "_buffers",
        "_checks",
        "_ctype",
        "_dtype",
        "_fn",
        "_from_buffer",
        "_last",
        "_last_ptrs",
        "_last_seq",
        "_lib",
        "_n_static",
        "_sizes",
        "_written",
        "library_path",
        "name",
        "source_path",
    )

    def __init__(self, prog: LoopProgram, rendered: _Rendered, c_path: Path, so_path: Path):
        ffi, lib = _load(so_path, rendered.cdef)
        self.name = prog.name
        self.source_path = c_path  #: the generated C file
        self.library_path = so_path  #: the shared object it was compiled to
        self._lib = lib  # keeps the library mapped while the routine lives
        self._fn = getattr(lib, rendered.cname)
        self._from_buffer = ffi.from_buffer
        self._ctype = f"{_PRECISION_WORDS[prog.precision]['T']}[]"
        self._dtype = _NUMPY_DTYPE[prog.precision]
        self._buffers = prog.buffers
        self._sizes = tuple(math.prod(b.dims) for b in prog.buffers)
        self._written = tuple(b in _written_buffers(prog.body) for b in prog.buffers)
        self._n_static = len(prog.static_args)
        self._checks = rendered.checks
        self._last: tuple[np.ndarray, ...] | None = None  # the previous call's arrays
        self._last_ptrs: tuple[Any, ...] = ()  # and their exported pointers
        self._last_seq: object = None

    def __call__(self, arrays: Sequence[np.ndarray], static_args: Sequence[int] = ()) -> None:
        if len(arrays) != len(self._sizes) or len(static_args) != self._n_static:
            raise BackendError(
                f"routine {self.name} takes {len(self._sizes)} arrays and {self._n_static} "
                f"static ints, got {len(arrays)} and {len(static_args)}"
            )
        if arrays is not self._last_seq and not self._same_as_last(arrays):
            self._last_ptrs = self._pointers(arrays)
            self._last = tuple(arrays)
        self._last_seq = arrays  # the same sequence object again: no per-array checks
        code = self._fn(*self._last_ptrs, *static_args)
        if code != 0:
            what = self._checks.get(code, "unknown error code")
            raise RuntimeDataError(f"routine {self.name} failed with code {code}: {what}")

    def _same_as_last(self, arrays: Sequence[np.ndarray]) -> bool:
        """The previous call's arrays again: their pointers can be reused without re-checks.

        Our references and cffi's buffer exports keep those arrays' memory alive; the size
        check catches an in-place ``resize``, the one way their data could move.
        """
        if self._last is None:
            return False
        for arr, prev, size in zip(arrays, self._last, self._sizes):
            if arr is not prev or arr.size != size or arr.dtype != self._dtype:
                return False
        return True

    def _pointers(self, arrays: Sequence[np.ndarray]) -> tuple[Any, ...]:
        """Validate each array (never let C touch a wrong one) and export its memory."""
        ptrs: list[Any] = []
        for arr, size, written in zip(arrays, self._sizes, self._written):
            if not (
                isinstance(arr, np.ndarray) and arr.dtype == self._dtype and arr.size == size
                and arr.flags.c_contiguous and (arr.flags.writeable or not written)
            ):
                raise self._bad_array(len(ptrs), arr)
            ptrs.append(self._from_buffer(self._ctype, arr))
        if len({id(a) for a in arrays}) != len(arrays):
            self._check_aliasing(arrays)
        return tuple(ptrs)

    def _check_aliasing(self, arrays: Sequence[np.ndarray]) -> None:
        """Buffers are `restrict`: an array written through one may not be passed twice."""
        ids = [id(a) for a in arrays]
        for pos, written in enumerate(self._written):
            if written and ids.count(ids[pos]) > 1:
                name = self._buffers[pos].name
                raise BackendError(f"routine {self.name}: written buffer {name!r} aliases another")

    def _bad_array(self, pos: int, arr: object) -> BackendError:
        buf = self._buffers[pos]
        want = f"a C-contiguous {self._dtype} array of {self._sizes[pos]} elements {buf.dims}"
        if self._written[pos]:
            want = "a writeable " + want.removeprefix("a ")
        if isinstance(arr, np.ndarray):
            got = f"{arr.dtype} {arr.shape}, c_contiguous={arr.flags.c_contiguous}"
            got += f", writeable={arr.flags.writeable}"
        else:
            got = type(arr).__name__
        return BackendError(f"routine {self.name}: buffer {buf.name!r} needs {want}; got {got}")


def _written_buffers(s: Stmt) -> set[Buffer]:
    match s:
        case Noop() | Comment() | DeclLocal() | SetLocal() | CheckIndex():
            return set()
        case Seq(stmts=stmts):
            return set().union(*(_written_buffers(x) for x in stmts))
        case ForLoop(body=body):
            return _written_buffers(body)
        case SetCell(buffer=buf) | Fill(buffer=buf):
            return {buf}
        case _:
            assert_never(s)


def compile_c(
    prog: LoopProgram,
    *,
    opt_flags: Sequence[str] = DEFAULT_OPT_FLAGS,
    cache_dir: str | os.PathLike[str] | None = None,
) -> CompiledRoutine:
    """Render, compile (or reuse the cached shared object) and load a routine.

    `OCANNL_AST_CFLAGS` (space-separated) overrides `opt_flags`; with `OCANNL_AST_CHECK=1`
    the program is verified first. Example: ``compile_c(prog, opt_flags=("-O0",))``.
    """
    if os.environ.get("OCANNL_AST_CHECK") == "1":
        from ocannl_ast.lowering.loop_verify import verify_program

        verify_program(prog)
    rendered = _render(prog)
    flags = (*_opt_flags(opt_flags), *REQUIRED_FLAGS)
    directory = Path(cache_dir) if cache_dir is not None else cache_dir_default()
    directory.mkdir(parents=True, exist_ok=True)
    stem = f"{rendered.cname}-{_cache_key(rendered.source, flags)[:32]}"
    c_path, so_path = directory / f"{stem}.c", directory / f"{stem}.so"
    if not so_path.exists():
        _write_atomic(c_path, rendered.source)
        _build(c_path, so_path, flags)
    return CompiledRoutine(prog, rendered, c_path, so_path)
