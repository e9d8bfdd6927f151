"""Generator of random einsums with labels on both sides of a row variable (`h, ..r.., z`,
issue 21 items 1 and 4), applied once to leaves and once to pointwise results of the same
leaves (`x * 1.0`, `x + 0.0`, `relu(x)` of positive data, or a size-1 axis computed by an
operation): each must agree with the NumPy answer, so the two agree with each other.

Output: `Program`s for `fuzz_harness.run_programs`, in pairs (leaf, pointwise) per seed.
"""

from __future__ import annotations

import random

from fuzz_harness import Program

LABELS = "hwzcdkmnpq"
HIDDEN = "ABCDEF"  #: NumPy subscripts of the row variable's axes
WRAPS = ("{x} * 1.0", "{x} + 0.0", "oc.relu({x})", "0.0 * {x} + {x}")


def _spec_text(beg: list[str], end: list[str], row: bool) -> str:
    return ", ".join(beg + (["..r.."] if row else []) + end)


def rowvar_pair(seed: int) -> list[Program]:
    """Two programs over one random spec and data: leaves, then pointwise operands."""
    rng = random.Random(seed)
    n_ops = rng.choice([1, 1, 2])
    hidden = [rng.choice([1, 2, 3]) for _ in range(rng.randint(0, 2))]
    sizes: dict[str, int] = {}
    ops: list[tuple[list[str], list[str]]] = []
    pool = list(LABELS)
    for _ in range(n_ops):
        nb, ne = rng.randint(0, 2), rng.randint(0, 2)
        if nb + ne == 0 or rng.random() < 0.5:
            nb, ne = max(nb, 1), max(ne, 1)  # mostly labels on both sides
        names = rng.sample(pool, nb + ne)
        for n in names:
            sizes.setdefault(n, rng.choice([1, 2, 3, 4]))
        ops.append((names[:nb], names[nb:]))
    used = sorted({n for b, e in ops for n in b + e})
    kept = rng.sample(used, rng.randint(0, len(used)))
    keep_row = rng.random() < 0.7
    at = rng.randint(0, len(kept))
    res_items = kept[:at] + (["..r.."] if keep_row else []) + kept[at:]
    spec = "; ".join(_spec_text(b, e, True) for b, e in ops) + " => " + ", ".join(res_items)
    letters = "".join(HIDDEN[: len(hidden)])
    np_ops = ",".join("".join(b) + letters + "".join(e) for b, e in ops)
    np_res = "".join(kept[:at]) + (letters if keep_row else "") + "".join(kept[at:])
    shapes = [tuple(sizes[n] for n in b) + tuple(hidden) + tuple(sizes[n] for n in e)
              for b, e in ops]
    data = "".join(f"a{k} = rng.random({shape!r}) + 0.1\n" for k, shape in enumerate(shapes))
    oracle = f"want = np.einsum({np_ops + '->' + np_res!r}, " + ", ".join(
        f"a{k}" for k in range(n_ops)) + ")\n"
    note = f"spec {spec!r}, operand shapes {shapes}"
    wrap = rng.choice(WRAPS)
    out = []
    for variant in ("leaf", "pointwise"):
        args = [f"oc.ndarray(a{k})" for k in range(n_ops)]
        if variant == "pointwise":
            args = [wrap.format(x=a) for a in args]
        build = data + f"t = oc.einsum({spec!r}, {', '.join(args)})\n"
        tags = frozenset({variant, f"ops{n_ops}", f"hidden{len(hidden)}"}
                         | ({"unit_axis"} if 1 in sizes.values() or 1 in hidden else set()))
        out.append(Program(f"rowvar/{variant}", seed, note, build, oracle, tags=tags))
    return out


def rowvar_programs(seed_list: list[int]) -> list[Program]:
    return [p for sd in seed_list for p in rowvar_pair(sd)]
