"""The C helpers combining a lane-blocked reduction's 8 partial results (`c_lanes`) by its
fixed tree ``((L0 op L1) op (L2 op L3)) op ((L4 op L5) op (L6 op L7))`` in vector registers
(gcc's vector extensions): each level pairs the even lanes with the odd ones
(``__builtin_shuffle``) and applies the op to every pair at once, so the tree is 3 vector
steps instead of 7 dependent scalar ones (gcc keeps that scalar tree scalar: a row of a
softmax spent more time there than in its exps).

Numerics: every lane computes exactly the scalar op on the same pair (the same IEEE
operation; max/min as ``ocannl_max``/``ocannl_min``: the first operand when greater (less)
or NaN), so the result has the bits of the scalar tree.

Input: the 8 lanes (a pointer to the lane array). Output: the combined value. Used by the
C dialect only (CUDA does not block reductions in lanes).
"""

from __future__ import annotations

_HEAD = (
    "{qualifier} {type} ocannl_tree8_{name}_{suffix}(const {type}* l) {{\n"
    "  typedef {type} V __attribute__((vector_size(8 * sizeof({type}))));\n"
    "  typedef {uint} U __attribute__((vector_size(8 * sizeof({type}))));\n"
    "  const U even = {{0, 2, 4, 6, 0, 2, 4, 6}}, odd = {{1, 3, 5, 7, 1, 3, 5, 7}};\n"
    "  V v, a, b;\n"
    "  __builtin_memcpy(&v, l, sizeof v);\n"
)
#: One level: lanes 2i and 2i + 1 of v into lane i (and i + 4, ...): after three, lane 0.
_LEVEL = {
    "add": "  a = __builtin_shuffle(v, even), b = __builtin_shuffle(v, odd);\n  v = a + b;\n",
    "max": "  a = __builtin_shuffle(v, even), b = __builtin_shuffle(v, odd);\n"
           "  {{ U m = (U)(a > b) | (U)(a != a); v = (V)(((U)a & m) | ((U)b & ~m)); }}\n",
    "min": "  a = __builtin_shuffle(v, even), b = __builtin_shuffle(v, odd);\n"
           "  {{ U m = (U)(a < b) | (U)(a != a); v = (V)(((U)a & m) | ((U)b & ~m)); }}\n",
}

#: helper name (`CSyntax.helpers` key) -> its C template (placeholders `c_syntax.Word`).
HELPERS: dict[str, str] = {
    f"tree8_{name}": _HEAD.replace("{name}", name) + level * 3 + "  return v[0];\n}}"
    for name, level in _LEVEL.items()
}
