"""Vectorizable exp, log, tanh and expm1 for the C backend, float32 and float64.

libm's `expf`, `logf`, `tanhf` are opaque calls: a loop that calls them stays scalar. These
helpers are `static inline` functions of plain arithmetic, integer bit operations and
branch-free selects (`ocannl_select_*`), so once inlined gcc vectorizes the loops that call
them (AVX2: 8 floats or 4 doubles at a time). Each is range reduction + a polynomial (or,
for float64 exp/expm1, a rational) approximation:

- exp / expm1: ``x = n ln2 + r`` (Cody-Waite, ln2 split in two so ``n ln2`` is exact),
  ``|r| <= ln2/2``; ``expm1(r)`` by a minimax polynomial (float32) or its Taylor polynomial
  to degree 13 (float64); ``2^n`` built from bits in two halves so that results near the overflow
  threshold and in the subnormal range are scaled without an intermediate overflow.
- log: ``x = 2^e m``, ``m`` in ``[sqrt(1/2), sqrt(2))`` (subnormals scaled up first),
  ``log m = 2 atanh(s)``, ``s = (m-1)/(m+1)``, by a minimax polynomial in ``s^2``.
- tanh: ``sign(x) * e / (e + 2)`` with ``e = expm1(2|x|)``, ``|x|`` capped where tanh rounds
  to 1 (expm1 written for that range only).

Special values follow libm/IEEE: exp(+inf)=inf, exp(-inf)=0, log(0)=-inf, log(x<0)=NaN,
log(inf)=inf, expm1(-inf)=-1, tanh(+-inf)=+-1, tanh(-0)=-0, NaN in gives NaN out.
The measured error bounds (tests/backends/test_c_math.py checks them; docs/generated_code.md
states them) are `ULP_BOUNDS`. ``OCANNL_AST_LIBM=1`` renders libm calls instead.

Stage: rendering (the C dialect asks for these definitions). Input: the template words of
a precision. Output: C text.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from ocannl_ast.lowering.loop_ir import UnOp

#: op -> the helper that computes it (the helper's C name is ``ocannl_<helper>_<suffix>``)
OWN_OPS: dict[UnOp, str] = {UnOp.EXP: "exp", UnOp.LOG: "log", UnOp.TANH: "tanh"}
#: helper -> the helpers it calls (emitted before it)
DEPS: dict[str, tuple[str, ...]] = {
    "exp": ("select", "m_red"), "expm1": ("select", "m_red"),
    "tanh": ("select", "m_red"), "log": ("select",), "m_red": ("select",),
}
#: The order definitions are emitted in (each after what it calls).
ORDER = ("m_red", "exp", "expm1", "tanh", "log")
#: Worst error in units of the last place, against a correctly rounded reference, over the
#: whole range (specials exact), as measured by the tests: {(function, precision): ulps}.
ULP_BOUNDS: dict[tuple[str, str], float] = {
    ("exp", "float32"): 1.0, ("expm1", "float32"): 2.0, ("tanh", "float32"): 2.5,
    ("log", "float32"): 1.0,
    ("exp", "float64"): 1.0, ("expm1", "float64"): 2.0, ("tanh", "float64"): 2.5,
    ("log", "float64"): 1.0,
}

# float32: (type, uint, suffix, bits, exponent bias, mantissa bits)
_F = {"f": ("float", "uint32_t", "f", 32, 127, 23), "d": ("double", "uint64_t", "d", 64, 1023, 52)}

# Each precision's constants: the exp clamp range, expm1's clamp and its "large n" limit,
# tanh's cap, ln2 split for exp (Cody-Waite) and for log.
_CONST = {
    "f": {"hi": "88.8f", "lo": "-104.0f", "m1lo": "-20.0f", "m1big": "25.0f",
          "tcap": "9.5f", "log2e": "1.44269504088896341f", "c1": "0.693359375f",
          "c2": "-2.12194440e-4f", "lnhi": "6.9313812256e-01f", "lnlo": "9.0580006145e-06f",
          "sqrt2": "1.41421356f", "magic": "0x1.8p23f", "half": "0.5f", "one": "1.0f",
          "two": "2.0f", "zero": "0.0f", "den": "0x1p-126f", "denscale": "0x1p25f",
          "denbits": "25.0f"},
    "d": {"hi": "710.0", "lo": "-746.0", "m1lo": "-40.0", "m1big": "54.0", "tcap": "20.0",
          "log2e": "1.4426950408889634074", "c1": "6.93145751953125E-1",
          "c2": "1.42860682030941723212E-6", "lnhi": "6.93147180369123816490e-01",
          "lnlo": "1.90821492927058770002e-10", "sqrt2": "1.4142135623730951",
          "magic": "0x1.8p52", "half": "0.5", "one": "1.0", "two": "2.0", "zero": "0.0",
          "den": "0x1p-1022", "denscale": "0x1p54", "denbits": "54.0"},
}


def _m_red(s: str) -> str:
    """Shared pieces: round to an integer (as a float), 2^k from bits, expm1 on |r| <=
    ln2/2, and the reduction x -> (k, r)."""
    t, u, _, _, bias, mant = _F[s]
    c = _CONST[s]
    if s == "f":  # minimax on [-ln2/2, ln2/2]: expm1(r) = r + r^2 p(r)
        core = ("  {t} p = 1.9875691500E-4f;\n  p = p * r + 1.3981999507E-3f;\n"
                "  p = p * r + 8.3334519073E-3f;\n  p = p * r + 4.1665795894E-2f;\n"
                "  p = p * r + 1.6666665459E-1f;\n  p = p * r + 5.0000001201E-1f;\n"
                "  return p * (r * r) + r;\n")
    else:  # Taylor to degree 13 (|r|^14 / 14! < 2^-56 |r|): r + r^2 p(r)
        terms = "".join(f"  p = p * r + {1.0 / math.factorial(k)!r};\n" for k in range(12, 1, -1))
        core = f"  {{t}} p = {1.0 / math.factorial(13)!r};\n" + terms + "  return p * (r * r) + r;\n"
    return (
        f"{{q}} {t} ocannl_rint_{s}({t} v) {{ return (v + {c['magic']}) - {c['magic']}; }}\n\n"
        f"/* 2^k for an integral k with 1 - bias <= k <= bias (k NaN: some number) */\n"
        f"{{q}} {t} ocannl_pow2_{s}({t} k) {{\n"
        f"  union {{ {t} v; {u} u; }} b = {{ (k + {bias}.0{'f' if s == 'f' else ''}) "
        f"+ {c['magic']} }};\n"
        f"  b.u <<= {mant};\n  return b.v;\n}}\n\n"
        f"/* expm1(r) for |r| <= ln2/2 */\n{{q}} {t} ocannl_expm1_red_{s}({t} r) {{\n"
        + core.format(t=t) + "}\n\n"
        f"/* x -> k = round(x / ln2) (0 for NaN x) and the remainder x - k ln2 */\n"
        f"{{q}} {t} ocannl_reduce_{s}({t} x, {t}* k) {{\n"
        f"  {t} kk = ocannl_rint_{s}(x * {c['log2e']});\n"
        f"  *k = ocannl_select_{s}(kk == kk, kk, {c['zero']});\n"
        f"  return (x - kk * {c['c1']}) - kk * {c['c2']};\n}}"
    )


def _exp(s: str) -> str:
    t = _F[s][0]
    c = _CONST[s]
    # Below `lo` the result is +0: computed from x = 0 and replaced, so that no lane
    # multiplies into the subnormal range (a microcode assist per operation on x86: a
    # causal softmax's masked scores took longer than all its other exps)
    return (
        f"{{q}} {t} ocannl_exp_{s}({t} x) {{\n"
        f"  x = ocannl_select_{s}(x > {c['hi']}, {c['hi']}, x);  /* NaN stays NaN */\n"
        f"  int zero = x < {c['lo']};  /* exp rounds to +0 there */\n"
        f"  x = ocannl_select_{s}(zero, {c['zero']}, x);\n"
        f"  {t} k;\n  {t} r = ocannl_reduce_{s}(x, &k);\n"
        f"  {t} k1 = ocannl_rint_{s}(k * {c['half']});\n"
        f"  {t} y = (({c['one']} + ocannl_expm1_red_{s}(r)) * ocannl_pow2_{s}(k1))"
        f" * ocannl_pow2_{s}(k - k1);\n"
        f"  return ocannl_select_{s}(zero, {c['zero']}, y);\n}}"
    )


def _expm1(s: str) -> str:
    t = _F[s][0]
    c = _CONST[s]
    return (
        f"{{q}} {t} ocannl_expm1_{s}({t} x) {{\n"
        f"  x = ocannl_select_{s}(x > {c['hi']}, {c['hi']}, x);  /* NaN stays NaN */\n"
        f"  x = ocannl_select_{s}(x < {c['m1lo']}, {c['m1lo']}, x);  /* rounds to -1 there */\n"
        f"  {t} k;\n  {t} r = ocannl_reduce_{s}(x, &k);\n"
        f"  {t} q = ocannl_expm1_red_{s}(r);\n"
        f"  /* k small: 2^k q + (2^k - 1), both terms exact but for one rounding */\n"
        f"  {t} p = ocannl_pow2_{s}(ocannl_select_{s}(k > {c['m1big']}, {c['zero']}, k));\n"
        f"  {t} small = p * q + (p - {c['one']});\n"
        f"  {t} k1 = ocannl_rint_{s}(k * {c['half']});\n"
        f"  {t} big = (({c['one']} + q) * ocannl_pow2_{s}(k1)) * ocannl_pow2_{s}(k - k1)"
        f" - {c['one']};\n"
        f"  big = ocannl_select_{s}(k > {c['m1big']}, big, small);\n"
        f"  return ocannl_select_{s}(x == {c['zero']}, x, big);  /* expm1(-0) = -0 */\n}}"
    )


def _tanh(s: str) -> str:
    """``e = expm1(2m)`` on ``0 <= 2m <= 2 tcap`` (or NaN) only: none of expm1's clamps, one
    ``2^k`` (``k <= 28``: no overflow) and its small-k form throughout (beyond expm1's
    `m1big`, where that form rounds ``2^k - 1``, the error of e moves tanh by < 1e-14 ulp):
    the bits of ``ocannl_expm1`` for ``k <= m1big``, a third fewer operations."""
    t, u, _, bits, _, _ = _F[s]
    c = _CONST[s]
    sign = f"(({u})1 << {bits - 1})"
    return (
        f"{{q}} {t} ocannl_tanh_{s}({t} x) {{\n"
        f"  union {{ {t} v; {u} u; }} a = {{ x }}, y;\n"
        f"  a.u &= ~{sign};  /* |x| */\n"
        f"  {t} m = ocannl_select_{s}(a.v > {c['tcap']}, {c['tcap']}, a.v);"
        f"  /* tanh rounds to 1 above */\n"
        f"  {t} kk = ocannl_rint_{s}((m + m) * {c['log2e']});  /* NaN m: NaN throughout */\n"
        f"  {t} r = ((m + m) - kk * {c['c1']}) - kk * {c['c2']};\n"
        f"  {t} p = ocannl_pow2_{s}(kk);\n"
        f"  {t} e = p * ocannl_expm1_red_{s}(r) + (p - {c['one']});  /* expm1(2m) */\n"
        f"  y.v = e / (e + {c['two']});\n"
        f"  union {{ {t} v; {u} u; }} sx = {{ x }};\n"
        f"  y.u |= sx.u & {sign};\n  return y.v;\n}}"
    )


def _log(s: str) -> str:
    t, u, _, _, bias, mant = _F[s]
    c = _CONST[s]
    if s == "f":  # minimax in z = s^2 (4 terms)
        poly = ("  {t} r = z * (0.66666662693f + z * (0.40000972152f + z * (0.28498786688f"
                " + z * 0.24279078841f)));\n")
    else:
        poly = ("  {t} r = z * (6.666666666666735130e-01 + z * (3.999999999940941908e-01"
                " + z * (2.857142874366239149e-01 + z * (2.222219843214978396e-01"
                " + z * (1.818357216161805012e-01 + z * (1.531383769920937332e-01"
                " + z * 1.479819860511658591e-01))))));\n")
    expo_mask = f"(({u}){(1 << (_F[s][3] - 1 - mant)) - 1} << {mant})"
    one_bits = f"(({u}){bias} << {mant})"
    return (
        f"{{q}} {t} ocannl_log_{s}({t} x) {{\n"
        f"  int den = x < {c['den']};  /* subnormal (or 0, < 0: replaced below) */\n"
        f"  union {{ {t} v; {u} u; }} b = {{ ocannl_select_{s}(den, x * {c['denscale']}, x) }};\n"
        f"  union {{ {t} v; {u} u; }} ev = {{ {c['magic']} }};\n"
        f"  ev.u |= (b.u & {expo_mask}) >> {mant};  /* the biased exponent, as a number */\n"
        f"  {t} e = (ev.v - {c['magic']}) - {bias}.0{'f' if s == 'f' else ''}"
        f" - ocannl_select_{s}(den, {c['denbits']}, {c['zero']});\n"
        f"  b.u = (b.u & ~{expo_mask}) | {one_bits};  /* mantissa m in [1, 2) */\n"
        f"  int big = b.v > {c['sqrt2']};\n"
        f"  {t} m = ocannl_select_{s}(big, b.v * {c['half']}, b.v);\n"
        f"  e = e + ocannl_select_{s}(big, {c['one']}, {c['zero']});\n"
        f"  {t} f = m - {c['one']};\n"
        f"  {t} sv = f / ({c['two']} + f);\n  {t} z = sv * sv;\n"
        + poly.format(t=t)
        + f"  {t} hf = {c['half']} * f * f;\n"
        f"  {t} y = e * {c['lnhi']} - ((hf - (sv * (hf + r) + e * {c['lnlo']})) - f);\n"
        f"  y = ocannl_select_{s}(x == INFINITY, x, y);\n"
        f"  y = ocannl_select_{s}(x == {c['zero']}, -INFINITY, y);  /* +-0 */\n"
        f"  return ocannl_select_{s}((x < {c['zero']}) | (x != x), NAN, y);\n}}"
    )


#: The renderer's helper names of these functions: ``math_exp``, ... (apart from HELPERS').
PREFIX = "math_"


def spelling(op: UnOp, suffix: str) -> tuple[str, tuple[str, ...]]:
    """The call template of `op` (``{0}`` the operand) and the helper names it needs."""
    name = OWN_OPS[op]
    return f"ocannl_{name}_{suffix}({{0}})", ("select", PREFIX + name)


_BUILD = {"m_red": _m_red, "exp": _exp, "expm1": _expm1, "tanh": _tanh, "log": _log}


def definitions(used: set[str], words: Mapping[str, str]) -> list[str]:
    """The C definitions of the `used` math helpers (with what they call), for the
    precision of `words` (``suffix`` "f" or "d"; ``qualifier`` of helpers), each then ''."""
    need = {n.removeprefix(PREFIX) for n in used if n.removeprefix(PREFIX) in _BUILD
            and n.startswith(PREFIX)}
    for name in list(need):
        need.update(d for d in DEPS[name] if d in _BUILD)
    s = words["suffix"]
    out: list[str] = []
    for name in ORDER:
        if name in need:
            out += [_BUILD[name](s).replace("{q}", words["qualifier"]), ""]
    return out
