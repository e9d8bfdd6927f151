"""The default parameter initializer as seed 001 builds it: an ordinary tensor expression

    uint4x32_to_prec_uniform(threefry4x32(threefry4x32(embed_self_id, random_seed),
                                          range_over_offsets))

scaled to [low, high). `embed_self_id` and `random_seed` are one-cell uint4x32 word
constants whose 128 bits are embedded exactly (set as host words, never through the
routine's float precision); the rest is compiled code (threefry accumulations, a range
fetch, the vectorized unpack, a pointwise scaling), the same on every backend.

The self id is the param's stable key: a hash of its unique hierarchical name
(`tensor.name`: "w", a second top-level "w" is "w_1", a linear layer's "linear.w"), so
creating unrelated tensors first does not change any initial value.

Input: a param Tensor (shape closed), the seed, the precision. Output: the init Code and
the word constants the caller sets before running it.
"""

from __future__ import annotations

import hashlib
import math

import numpy as np

from ..errors import ShapeError, user_span
from ..infer.shape import Shape
from ..lowering.assignments import RangeOverOffsets
from ..lowering.loop_ir import Precision, VecUnOp, vec_length
from ..records import record
from .builders import accum, prim
from .node import Code, FetchItem, Init, NodeKind, NodeRef, Tensor, VecItem, no_grad

#: range offsets are exact in the routine's float precision up to this many words
_EXACT_COUNTERS = {Precision.FLOAT32: 1 << 24, Precision.FLOAT64: 1 << 53}


@record
class RandomInit:
    code: Code
    words: tuple[tuple[Tensor, tuple[int, int, int, int]], ...]  #: constants to set


#: the tag word of a param's self id: its (first) uniform stream, and the second uniform
#: stream of a normal init
_TAG, _TAG_NORMAL = 0x0CA11, 0x0CA12


def self_id_words(key: tuple[str, int], tag: int = _TAG) -> tuple[int, int, int, int]:
    """The 128-bit self id of a param key: blake2b of the name (64 bits), the ordinal, a
    tag. Example: ``self_id_words(("w", 0))[2] == 0``."""
    name, ordinal = key
    h = hashlib.blake2b(name.encode("utf-8"), digest_size=8).digest()
    return (int.from_bytes(h[:4], "little"), int.from_bytes(h[4:], "little"),
            ordinal & 0xFFFFFFFF, tag)


def seed_words(seed: int) -> tuple[int, int, int, int]:
    """The random_seed tensor's word: the 32-bit seed in word 0."""
    return (seed & 0xFFFFFFFF, 0, 0, 0)


def _leaf(label: str, dims: tuple[int, ...], *, words: bool) -> Tensor:
    shape = Shape.make(label, batch_dims=(), output_dims=dims, input_dims=(),
                       is_terminal=True)
    t = Tensor(label, shape, Init.COMPUTED)
    t.uint4x32 = words
    return t


def _like(label: str, p: Tensor) -> Tensor:
    b, o, i = p.layout_rows()
    shape = Shape.make(label, batch_dims=b, output_dims=o, input_dims=i, is_terminal=True)
    return Tensor(label, shape, Init.COMPUTED)


Words = tuple[int, int, int, int]


def _uniforms(p: Tensor, key: tuple[str, int], tag: int, seed: int, m: int, per_word: int
              ) -> tuple[Code, Tensor, list[tuple[Tensor, Words]]]:
    """Code filling a tensor shaped like `p` with uniforms in [0, 1) from the stream of
    (`key`, `tag`, `seed`); returns it with the tensor and the word constants to set."""
    self_id = _leaf("embed_self_id", (1,), words=True)
    rseed = _leaf("random_seed", (1,), words=True)
    sub_key = _leaf("sub_key", (1,), words=True)
    offsets = _leaf("range_over_offsets", (m,), words=False)
    hashed = _leaf("threefry_words", (m,), words=True)
    unif = _like("uniform", p)
    code = (accum(sub_key, "=:", prim("threefry4x32", self_id, rseed))
            + Code((FetchItem(NodeRef(offsets, NodeKind.VALUE), RangeOverOffsets()),))
            + accum(hashed, "=:", prim("threefry4x32", sub_key, offsets))
            + Code((VecItem(NodeRef(unif, NodeKind.VALUE), VecUnOp.UINT4X32_TO_PREC_UNIFORM,
                            NodeRef(hashed, NodeKind.VALUE), per_word,
                            "uint4x32_to_prec_uniform"),)))
    return code, unif, [(self_id, self_id_words(key, tag)), (rseed, seed_words(seed))]


def random_init(p: Tensor, seed: int, precision: Precision, low: float = -1.0,
                high: float = 1.0, *, normal: tuple[float, float] | None = None) -> RandomInit:
    """The init code of param `p` (dims known): uniform in [low, high) per seed 001, or
    with `normal=(mean, std)` a normal by Box-Muller of two independent uniform streams
    (the second one's self id differs in its tag word):
    `mean + std * sqrt(-2 log(1 - u1)) * cos(2 pi u2)`."""
    n = math.prod(p.dims())
    if n == 0:
        return RandomInit(Code(), ())  # nothing to fill
    per_word = vec_length(precision)
    m = max(1, -(-n // per_word))
    if m > _EXACT_COUNTERS[precision.compute]:
        raise ShapeError(f"'{p.label}': {n} cells need {m} threefry counters, more than the "
                         f"{_EXACT_COUNTERS[precision.compute]} exact in {precision.value}", user_span())
    key = p.init_key or (p.label, 0)
    with no_grad():
        code, u1, words = _uniforms(p, key, _TAG, seed, m, per_word)
        if normal is None:
            return RandomInit(code + accum(p, "=:", prim("add", prim("mul", u1, float(high - low)),
                                                         float(low))), tuple(words))
        code2, u2, words2 = _uniforms(p, key, _TAG_NORMAL, seed, m, per_word)
        mean, std = normal
        radius = prim("sqrt", prim("mul", prim("log", prim("sub", 1.0, u1)), -2.0))
        z = prim("mul", radius, prim("cos", prim("mul", u2, 2.0 * math.pi)))
        code = code + code2 + accum(p, "=:", prim("add", prim("mul", z, float(std)),
                                                  float(mean)))
    return RandomInit(code, tuple(words + words2))


def _reference_uniforms(key: tuple[str, int], tag: int, seed: int, n: int,
                        precision: str) -> np.ndarray:
    from ..lowering.threefry import number_to_words, threefry4x32_words, uniform_from_words

    m = max(1, -(-n // vec_length(Precision(precision))))
    sub = threefry4x32_words(np.array([self_id_words(key, tag)]), np.array([seed_words(seed)]))
    words = threefry4x32_words(np.repeat(sub, m, axis=0), number_to_words(np.arange(m)))
    return np.asarray(uniform_from_words(words, precision)[:n])


def reference_values(key: tuple[str, int], seed: int, dims: tuple[int, ...],
                     precision: str = "float32", low: float = -1.0, high: float = 1.0, *,
                     normal: tuple[float, float] | None = None) -> np.ndarray:
    """The NumPy reference of `random_init` (through `lowering.threefry`); a normal init's
    values agree up to the last bits of the C library's log / cos."""
    n = math.prod(dims)
    precision = Precision(precision).compute.value  # 16-bit storage: the float32 draw
    dt = np.dtype(np.float32 if precision == "float32" else np.float64)
    u = _reference_uniforms(key, _TAG, seed, n, precision).astype(dt)
    if normal is not None:
        u2 = _reference_uniforms(key, _TAG_NORMAL, seed, n, precision).astype(dt)
        one, two, tau = np.array(1.0, dt), np.array(-2.0, dt), np.array(2.0 * math.pi, dt)
        z = np.sqrt(np.log(one - u) * two) * np.cos(u2 * tau)
        return np.asarray(z * np.array(normal[1], dt) + np.array(normal[0], dt),
                          dtype=dt).reshape(dims)
    scale, shift = np.array(high - low, dt), np.array(low, dt)
    return np.asarray(u * scale + shift, dtype=dt).reshape(dims)
