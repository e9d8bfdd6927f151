"""Generator of random einsum programs (seeded): 1..6 operands, batch|input->output rows,
`...` and `..r..` row variables, diagonals, result-only axes, fixed indices, multi-char
mode, size-1, size-0 and broadcast axes, sum and max reductions. Output: `Program`s."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from fuzz_harness import Program

SINGLE = "abcdefghjkmnpqrstuwxyz"  #: no "v": the named row variable is ..v..
MULTI = ("row", "col", "ab", "k2", "hid", "x", "yy", "ch", "q_1", "n", "dd", "w0")
Item = str | int | tuple[str, str]  #: label, fixed index, or ("rv", key) row variable


@dataclass
class Knobs:
    """Which features one generator category draws."""

    min_ops: int = 1
    max_ops: int = 3
    zero: bool = False  #: some label of size 0
    bcast: bool = False  #: some operand axes of size 1 against a larger label
    reduce: str = "sum"  #: "sum" (oc.einsum) or "max" (oc.einsum_max, 1-2 operands)
    features: float = 0.3  #: probability of each optional feature


@dataclass
class Spec:
    """A generated einsum: rows of items per operand and for the result."""

    multi: bool
    rows: bool
    sizes: dict[str, int]
    operands: list[list[list[Item]]] = field(default_factory=list)  #: [op][kind] items
    result: list[list[Item]] = field(default_factory=list)
    hidden: dict[str, list[str]] = field(default_factory=dict)  #: row var -> its axes
    tags: set[str] = field(default_factory=set)


def _fresh(rng: random.Random, multi: bool, used: dict[str, int], n: int) -> list[str]:
    pool = [x for x in (MULTI if multi else SINGLE) if x not in used]
    return rng.sample(pool, min(n, len(pool)))


def _size(rng: random.Random, k: Knobs) -> int:
    if k.zero:
        return rng.choice([0, 1, 2, 3])
    return rng.choice([2, 3, 4] if k.bcast else [1, 1, 2, 3, 4])


def _row_vars(rng: random.Random, s: Spec, k: Knobs) -> list[str]:
    """Row variables: `...` per kind (independent per kind), and maybe one named `..r..`."""
    keys = []
    if rng.random() < k.features:
        keys += ["...b", "...o", "...i"] if s.rows else ["...o"]
    if rng.random() < k.features / 2:
        keys.append("rv")
    for key in keys:
        s.hidden[key] = _fresh(rng, s.multi, s.sizes, rng.randint(0, 2))
        for lbl in s.hidden[key]:
            s.sizes[lbl] = _size(rng, k)
    return keys


def _row(rng: random.Random, labels: list[str], rvs: list[str], kind: str, k: Knobs,
         s: Spec, rank: int) -> list[Item]:
    items: list[Item] = [rng.choice(labels) for _ in range(rank)]
    if s.multi and rng.random() < k.features / 2:  # a fixed index read
        items.insert(rng.randint(0, len(items)), rng.randint(0, 2))
        s.tags.add("fixed_read")
    usable = [r for r in rvs if r == "rv" or r == "..." + kind]
    if usable and rng.random() < 0.6:
        items.insert(rng.randint(0, len(items)), ("rv", rng.choice(usable)))
    return items


def _operands(rng: random.Random, s: Spec, k: Knobs, labels: list[str], rvs: list[str]) -> None:
    for _ in range(rng.randint(k.min_ops, k.max_ops)):
        kinds = "boi" if s.rows else "o"
        op = {kind: _row(rng, labels, rvs, kind, k, s, rng.randint(0, 2 if s.rows else 3))
              for kind in kinds}
        if (s.multi or not s.rows) and not op["o"]:
            op["o"] = [rng.choice(labels)]  # an operand needs an axis or rows ("|->")
        s.operands.append([op.get("b", []), op["o"], op.get("i", [])])
    for op in s.operands:
        flat = [x for row in op for x in row if isinstance(x, str)]
        if len(flat) != len(set(flat)):
            s.tags.add("diagonal")


def _result(rng: random.Random, s: Spec, k: Knobs, rvs: list[str]) -> None:
    used = sorted({x for op in s.operands for row in op for x in row if isinstance(x, str)})
    out: list[Item] = [x for x in used if rng.random() < 0.55]
    rng.shuffle(out)
    if rng.random() < k.features / 2:
        extra = _fresh(rng, s.multi, s.sizes, 1)
        s.sizes[extra[0]] = 1  # no operand names it: a SpecError
        out.insert(rng.randint(0, len(out)), extra[0])
        s.tags.add("result_only")
    if out and rng.random() < k.features / 3:
        out.insert(rng.randint(0, len(out)), rng.choice(out))
        s.tags.add("diagonal_write")
    if s.multi and rng.random() < k.features / 3:
        out.insert(rng.randint(0, len(out)), rng.randint(0, 2))
        s.tags.add("fixed_write")
    rows: list[list[Item]] = [[], [], []]
    for x in out:
        rows[rng.choice([0, 1, 2]) if s.rows else 1].append(x)
    op_rvs = {x[1] for op in s.operands for row in op for x in row if isinstance(x, tuple)}
    for r in rvs:
        kind_ix = {"...b": 0, "...o": 1, "...i": 2}.get(r, rng.choice([0, 1, 2]) if s.rows
                                                         else 1)
        has_rv = any(isinstance(x, tuple) for x in rows[kind_ix])
        if r in op_rvs and not has_rv and rng.random() < 0.8:
            rows[kind_ix].insert(rng.randint(0, len(rows[kind_ix])), ("rv", r))
    s.result = rows


def generate(seed: int, k: Knobs) -> Spec:
    """A random einsum spec with its label sizes."""
    rng = random.Random(seed)
    s = Spec(multi=rng.random() < 0.35, rows=rng.random() < 0.4, sizes={})
    labels = _fresh(rng, s.multi, s.sizes, rng.randint(1, 5))
    for lbl in labels:
        s.sizes[lbl] = _size(rng, k)
    rvs = _row_vars(rng, s, k)
    if k.reduce == "max":
        k = Knobs(**{**k.__dict__, "max_ops": min(k.max_ops, 2)})
    _operands(rng, s, k, labels, rvs)
    _result(rng, s, k, rvs)
    for key in s.hidden:  # a row variable no operand mentions has no axes
        if not any(("rv", key) in row for op in s.operands for row in op):
            s.hidden[key] = []
    return s


# ---- rendering: spec text, NumPy data, the program ------------------------------------


def _item_text(x: Item, multi: bool) -> str:
    if isinstance(x, tuple):
        key = x[1]
        return ("..rest.." if multi else "..v..") if key == "rv" else "..."
    return str(x)


def _row_text(row: list[Item], multi: bool) -> str:
    return (", " if multi else "").join(_item_text(x, multi) for x in row)


def _shape_text(rows: list[list[Item]], s: Spec, first: bool = False) -> str:
    b, o, i = (_row_text(r, s.multi) for r in rows)
    if s.multi and first:
        o += ","  # forces multi-char mode even when no row has two axes
    return f"{b}|{i}->{o}" if s.rows else o


def spec_text(s: Spec) -> str:
    ops = ";".join(_shape_text(op, s, first=k == 0) for k, op in enumerate(s.operands))
    return ops + "=>" + _shape_text(s.result, s)


def expand(row: list[Item], s: Spec) -> list[str | int]:
    """A row's axes with row variables replaced by the axes they stand for."""
    out: list[str | int] = []
    for x in row:
        out += s.hidden[x[1]] if isinstance(x, tuple) else [x]
    return out


def operand_dims(rng: random.Random, s: Spec, axes: list[str | int], bcast: bool) -> list[int]:
    dims = []
    for ax in axes:
        if isinstance(ax, int):
            dims.append(ax + 1 + rng.randint(0, 1))  # a fixed read needs a large enough axis
        elif bcast and axes.count(ax) == 1 and rng.random() < 0.4:
            dims.append(1)
        else:
            dims.append(s.sizes[ax])
    return dims


def _label_size(lbl: str, all_rows: list[list[list[str | int]]], all_dims: list[list[int]],
                default: int) -> int:
    seen = [d for rows, dims in zip(all_rows, all_dims, strict=True)
            for ax, d in zip(rows[0] + rows[1] + rows[2], dims, strict=True) if ax == lbl]
    return max(seen) if seen else default


def to_program(kind: str, seed: int, s: Spec, k: Knobs) -> Program:
    """Render a spec as a program: the build snippet and its NumPy oracle."""
    rng = random.Random(seed * 7 + 1)
    lines, args, refs = [], [], []
    all_rows = [[expand(r, s) for r in op] for op in s.operands]
    all_dims = [operand_dims(rng, s, rows[0] + rows[1] + rows[2], k.bcast) for rows in all_rows]
    sizes = dict(s.sizes)
    if k.bcast:  # a label's size: the largest of its axes
        sizes = {lbl: _label_size(lbl, all_rows, all_dims, s.sizes[lbl]) for lbl in s.sizes}
    for n, (rows, dims) in enumerate(zip(all_rows, all_dims, strict=True)):
        axes = rows[0] + rows[1] + rows[2]
        lines.append(f"a{n} = rng.standard_normal({tuple(dims)!r})")
        args.append(f"oc.ndarray(a{n}, batch_axes={len(rows[0])}, input_axes={len(rows[2])})")
        refs.append(f"(a{n}, {axes!r})")
    fn = "einsum" if k.reduce == "sum" else "einsum_max"
    spec = spec_text(s)
    lines.append(f"t = oc.{fn}({spec!r}, {', '.join(args)})")
    res = [ax for r in s.result for ax in expand(r, s)]
    res_dims = tuple(ax + 1 if isinstance(ax, int) else sizes[ax] for ax in res)
    combine = "mul" if k.reduce == "sum" or len(s.operands) == 1 else "add"
    oracle = ("from fuzz_oracle import contract\n"
              f"want = contract([{', '.join(refs)}], {res!r}, {sizes!r}, {res_dims!r}, "
              f"combine={combine!r}, reduce={k.reduce!r})\n")
    tags = set(s.tags) | {f"ops{len(s.operands)}", "multi" if s.multi else "single"}
    tags |= {"rows"} if s.rows else set()
    tags |= {"row_var"} if any(s.hidden) else set()
    tags |= {"size0"} if 0 in s.sizes.values() else set()
    tags |= {"size1"} if 1 in s.sizes.values() else set()
    if any(isinstance(ax, str) and d == 1 < sizes[ax]
           for rows, dims in zip(all_rows, all_dims, strict=True)
           for ax, d in zip(rows[0] + rows[1] + rows[2], dims, strict=True)):
        tags.add("bcast")  # a size-1 axis read against a larger label
    # a result label no operand names is a SpecError (a typo, as NumPy says)
    return Program(kind, seed, f"spec {spec!r} sizes {sizes}", "\n".join(lines) + "\n",
                   oracle, expect="spec_error" if "result_only" in tags else "value",
                   tags=frozenset(tags))


def einsum_programs(kind: str, seed_list: list[int], k: Knobs) -> list[Program]:
    return [to_program(kind, sd, generate(sd, k), k) for sd in seed_list]
