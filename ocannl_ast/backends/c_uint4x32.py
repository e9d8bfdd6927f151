"""The uint4x32 type in C (seed 001): a struct of four uint32 words, conversions to and
from numbers, Threefry-4x32-20 of two words (the `threefry4x32` primitive, OCANNL `^^^^`)
and the vectorized unpack `uint4x32_to_prec_uniform` (Set_from_vec).

The texts are helper templates of `c_syntax.HELPERS` (formatted with the dialect's words,
hence the doubled braces). A uint4x32 cell lives in 16 bytes of the routine's array (4
float32 or 2 float64 elements) and is read through a cast pointer. Reference semantics:
`lowering.threefry` (`threefry4x32_words`, `uniform_from_words`, `number_to_words`).
"""

from __future__ import annotations

from ocannl_ast.lowering.threefry import KS_PARITY, ROTATIONS, ROUNDS

TYPE = "ocannl_uint4x32"


def _rounds() -> list[str]:
    lines = []
    ks = ("k.v[0]", "k.v[1]", "k.v[2]", "k.v[3]", "k4")
    for r in range(ROUNDS):
        (ra, rb), (a, b) = ROTATIONS[r % 8], ((1, 3) if r % 2 == 0 else (3, 1))
        lines.append(f"  x0 += x{a}; x{a} = ocannl_u4_rotl(x{a}, {ra}) ^ x0; "
                     f"x2 += x{b}; x{b} = ocannl_u4_rotl(x{b}, {rb}) ^ x2;")
        if r % 4 == 3:
            s = r // 4 + 1
            adds = " ".join(f"x{j} += {ks[(s + j) % 5]};" for j in range(4))
            lines.append(f"  {adds} x3 += {s}u;")
    return lines


#: the type, number <-> word conversions (a number's integer value in words 0 and 1; a
#: word read as a number is its word 0), and the rotation threefry uses
BASE = (
    f"typedef struct {{{{ uint32_t v[4]; }}}} {TYPE};\n"
    "{qualifier} uint32_t ocannl_u4_rotl(uint32_t x, int r) "
    "{{ return (x << r) | (x >> (32 - r)); }}\n"
    f"{{qualifier}} {TYPE} ocannl_to_u4_{{suffix}}({{type}} x) {{{{\n"
    "  uint64_t n = (uint64_t)(int64_t)x;\n"
    f"  {TYPE} w = {{{{ {{{{ (uint32_t)n, (uint32_t)(n >> 32), 0u, 0u }}}} }}}};\n"
    "  return w;\n}}\n"
    f"{{qualifier}} {{type}} ocannl_u4_to_{{suffix}}({TYPE} w) {{{{ return ({{type}})w.v[0]; }}}}"
)

THREEFRY = "\n".join([
    "/* Threefry-4x32-20 (Random123): key k, counter c */",
    f"{{qualifier}} {TYPE} ocannl_threefry4x32({TYPE} k, {TYPE} c) {{{{",
    f"  const uint32_t k4 = 0x{KS_PARITY:08X}u ^ k.v[0] ^ k.v[1] ^ k.v[2] ^ k.v[3];",
    ("  uint32_t x0 = c.v[0] + k.v[0], x1 = c.v[1] + k.v[1], x2 = c.v[2] + k.v[2],"
     " x3 = c.v[3] + k.v[3];"),
    *_rounds(),
    f"  {TYPE} out = {{{{ {{{{ x0, x1, x2, x3 }}}} }}}};",
    "  return out;",
    "}}",
])

#: Set_from_vec of uint4x32_to_prec_uniform: float32 takes the top 24 bits of each word,
#: float64 the top 53 bits of each word pair (both exact); at most `n` cells are written
VEC_UNIFORM = (
    f"{{qualifier}} void ocannl_vec_uniform_{{suffix}}({{type}}* out, int64_t n, {TYPE} w) {{{{\n"
    "  if (sizeof({type}) == 4) {{\n"
    "    for (int64_t j = 0; j < 4 && j < n; ++j) "
    "out[j] = ({type})(w.v[j] >> 8) * ({type})0x1p-24;\n"
    "  }} else {{\n"
    "    for (int64_t j = 0; j < 2 && j < n; ++j) {{\n"
    "      uint64_t b = ((uint64_t)w.v[2 * j] << 32) | w.v[2 * j + 1];\n"
    "      out[j] = ({type})(b >> 11) * ({type})0x1p-53;\n"
    "    }}\n  }}\n}}"
)

HELPERS = {"u4": BASE, "threefry4x32": THREEFRY, "vec_uniform": VEC_UNIFORM}
DEPS = {"threefry4x32": ("u4",), "vec_uniform": ("u4",)}
