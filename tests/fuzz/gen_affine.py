"""Generator of random affine-index programs (seed 001): `s*o+off` strided reads and
writes, valid convolutions `s*o<+off+d*k` read and written, max-pooling, sizes inferred
either way, and inconsistent sizes that must raise oc.ShapeError. Oracle: NumPy loops."""

from __future__ import annotations

import random

from fuzz_harness import Program


def _axis(s: int, off: int, d: int | None) -> str:
    text = f"{s}*o" if s > 1 or d is None else "o"
    if d is None:
        return text + (f"+{off}" if off else "")
    return text + "<+" + (f"{off}+" if off else "") + (f"{d}*k" if d > 1 else "k")


def _batch(rng: random.Random) -> tuple[int, str, str]:
    """Maybe a leading batch label (multi-char mode) on the affine operand and result."""
    return (0, "", "") if rng.random() < 0.5 else (rng.randint(1, 3), "b, ", ":, ")


def stride_program(seed: int) -> Program:
    """`s*o+off => o` (read) or `o => s*o+off` (write): sizes s*O, always consistent."""
    rng = random.Random(seed)
    s, n = rng.randint(1, 3), rng.randint(1, 4)
    off = rng.randint(0, s - 1)
    if s == 1 and off == 0:
        s = 2
    nb, b, _ = _batch(rng)
    lead = (nb,) if nb else ()
    ax = _axis(s, off, None)
    if rng.random() < 0.5:
        spec = f"{b}{ax}, => {b}o"
        build = f"a0 = rng.standard_normal({lead + (s * n,)!r})\n"
        oracle = f"want = a0[..., {off}::{s}]\n"
        note = "read"
    else:
        spec = f"{b}o, => {b}{ax}"
        build = f"a0 = rng.standard_normal({lead + (n,)!r})\n"
        oracle = (f"want = np.zeros({lead + (s * n,)!r})\n"
                  f"want[..., {off}::{s}] = a0\n")
        note = "write"
    build += f"t = oc.einsum({spec!r}, oc.ndarray(a0))\n"
    return Program("affine/stride", seed, f"{note} spec {spec!r}", build, oracle,
                   tags=frozenset({note, "offset" if off else "no_offset"}))


def _conv_sizes(rng: random.Random, offset: bool) -> tuple[int, int, int, int, int]:
    s, d = rng.randint(1, 3), rng.randint(1, 2)
    off = rng.randint(1, s - 1) if offset and s > 1 else 0
    if offset and off == 0:
        s, off = 2, 1
    return s, d, off, rng.randint(1, 4), rng.randint(1, 3)  # s, d, off, O, K


def _read_oracle(s: int, d: int, off: int, sl: str, reduce: str = "sum") -> str:
    """The direct loop, at whatever output size the library chose; the bound first."""
    term = f"a0[{sl}{s}*o+{off}+{d}*k] " + ("*" if reduce == "sum" else "+") + " a1[k]"
    acc = f"np.{reduce}(np.stack([{term} for k in range(K)]), axis=0)"
    return (f"O, K, X = got.shape[-1], a1.shape[0], a0.shape[-1]\n"
            f"assert {s}*(O-1) + {off} + {d}*(K-1) < X, "
            f"f'reads x[{{{s}*(O-1) + {off} + {d}*(K-1)}}] of {{X}} cells'\n"
            f"want = np.stack([{acc} for o in range(O)], axis=-1)\n")


def conv_read_program(seed: int, *, offset: bool) -> Program:
    """`s*o<+off+d*k; k => o` over an input of exactly the needed size."""
    rng = random.Random(seed)
    s, d, off, n_o, n_k = _conv_sizes(rng, offset)
    nb, b, sl = _batch(rng)
    lead = (nb,) if nb else ()
    x = s * (n_o - 1) + off + d * (n_k - 1) + 1
    fn, reduce = ("einsum_max", "max") if rng.random() < 0.25 else ("einsum", "sum")
    spec = f"{b}{_axis(s, off, d)}; k => {b}o"
    build = (f"a0 = rng.standard_normal({lead + (x,)!r})\n"
             f"a1 = rng.standard_normal(({n_k},))\n")
    how = rng.choice(["ndarray", "ndarray", "param"]) if not nb else "ndarray"
    if how == "param":  # the input's size inferred from the output (pinned by a 3rd operand)
        spec = f"{b}{_axis(s, off, d)}; k; o => {b}o"
        build += (f"x = oc.param('x', init=None)\n"
                  f"t = oc.{fn}({spec!r}, x, oc.ndarray(a1), oc.ndarray(np.ones({n_o})))\n"
                  ) if fn == "einsum" else ""
        if fn == "einsum_max":
            how = "ndarray"
            spec = f"{b}{_axis(s, off, d)}; k => {b}o"
    if how == "ndarray":
        build += f"t = oc.{fn}({spec!r}, oc.ndarray(a0), oc.ndarray(a1))\n"
        oracle = _read_oracle(s, d, off, sl, reduce)
    else:
        oracle = "a0 = get(x)\n" + _read_oracle(s, d, off, sl, reduce)
    if not offset:  # no offset: sizes are exact, the output size is O
        oracle += f"assert O == {n_o}, f'output size {{O}}, want {n_o}'\n"
    return Program("affine/offset" if offset else "affine/conv", seed,
                   f"read spec {spec!r} input {x} kernel {n_k}", build, oracle,
                   expect="either" if offset else "value",
                   tags=frozenset({"read", how, reduce}))


def conv_write_program(seed: int, *, offset: bool) -> Program:
    """`o; k => s*o<+off+d*k`: the result's size is inferred from O and K."""
    rng = random.Random(seed)
    s, d, off, n_o, n_k = _conv_sizes(rng, offset)
    spec = f"o; k => {_axis(s, off, d)}"
    build = (f"a0 = rng.standard_normal(({n_o},))\na1 = rng.standard_normal(({n_k},))\n"
             f"t = oc.einsum({spec!r}, oc.ndarray(a0), oc.ndarray(a1))\n")
    need = s * (n_o - 1) + off + d * (n_k - 1) + 1
    oracle = (f"R = got.shape[0]\nassert R >= {need}, f'writes cell {need - 1} of {{R}}'\n"
              "want = np.zeros(R)\n"
              f"for o in range({n_o}):\n    for k in range({n_k}):\n"
              f"        want[{s}*o+{off}+{d}*k] += a0[o] * a1[k]\n")
    if not offset:
        oracle += f"assert R == {need}, f'result size {{R}}, want {need}'\n"
    return Program("affine/offset" if offset else "affine/conv", seed,
                   f"write spec {spec!r} O={n_o} K={n_k}", build, oracle,
                   expect="either" if offset else "value", tags=frozenset({"write"}))


def inconsistent_program(seed: int) -> Program:
    """An input too small for the pinned output (or for even one output): ShapeError."""
    rng = random.Random(seed)
    s, d, off, n_o, n_k = _conv_sizes(rng, rng.random() < 0.4)
    need = s * (n_o - 1) + off + d * (n_k - 1) + 1
    x = rng.randint(max(1, need - 3), need - 1) if need > 1 else 0
    if x == 0:
        n_k, need = n_k + 1, need + d  # one more kernel cell: input 1 is too small
        x = 1
    spec = f"{_axis(s, off, d)}; k; o => o"
    build = (f"a0 = rng.standard_normal(({x},))\na1 = rng.standard_normal(({n_k},))\n"
             f"t = oc.einsum({spec!r}, oc.ndarray(a0), oc.ndarray(a1), "
             f"oc.ndarray(np.ones({n_o})))\n")
    return Program("affine/inconsistent", seed,
                   f"spec {spec!r} input {x} < needed {need} (O={n_o}, K={n_k})",
                   build, "", expect="shape_error", tags=frozenset({"offset"} if off else ()))
