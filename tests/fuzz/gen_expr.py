"""Generator of random pointwise/broadcast programs and random DAGs (shared
subexpressions): constants, data, params with every init kind, unary and binary
operators, compose `@` and `einsum_max` at the root. Oracle: the same DAG in NumPy."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from fuzz_harness import Program

UNARY = {  # name -> (oc form, NumPy form); domains kept safe by construction
    "relu": ("oc.relu({})", "np.maximum({}, 0)"),
    "tanh": ("oc.tanh({})", "np.tanh({})"),
    "sin": ("oc.sin({})", "np.sin({})"),
    "cos": ("oc.cos({})", "np.cos({})"),
    "neg": ("oc.neg({})", "-({})"),
    "minus": ("-{}", "-({})"),
    "exp": ("oc.exp(oc.tanh({}))", "np.exp(np.tanh({}))"),
    "log": ("oc.log({0} * {0} + 0.5)", "np.log({0} * {0} + 0.5)"),
    "sqrt": ("oc.sqrt({0} * {0} + 0.5)", "np.sqrt({0} * {0} + 0.5)"),
    "recip": ("oc.recip({0} * {0} + 0.5)", "1 / ({0} * {0} + 0.5)"),
    "square": ("{} ** 2", "({}) ** 2"),
    "cube": ("{} ** 3", "({}) ** 3"),
}
BINARY = {
    "add": ("{} + {}", "{} + {}"),
    "sub": ("{} - {}", "{} - {}"),
    "mul": ("{} * {}", "{} * {}"),
    "div": ("{0} / ({1} * {1} + 0.5)", "{0} / ({1} * {1} + 0.5)"),
    "pow": ("({0} * {0} + 0.5) ** oc.tanh({1})", "({0} * {0} + 0.5) ** np.tanh({1})"),
}
LEAVES = ("ndarray", "number", "param_num", "param_np", "param_ndarray",
          "param_expr", "param_rand", "param_inferred")


@dataclass
class Dag:
    """Statements building the DAG in oc (`oc_lines`) and NumPy (`np_lines`)."""

    rng: random.Random
    full: tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]  #: batch, output, input
    leaves: tuple[str, ...]
    oc_lines: list[str] = field(default_factory=list)
    np_lines: list[str] = field(default_factory=list)
    nodes: list[str] = field(default_factory=list)
    params: list[str] = field(default_factory=list)  #: (grads) params with NumPy init
    tags: set[str] = field(default_factory=set)
    used: set[str] = field(default_factory=set)
    n: int = 0

    def name(self) -> str:
        self.n += 1
        return f"n{self.n}"

    def ranks(self) -> tuple[int, int, int]:
        return len(self.full[0]), len(self.full[1]), len(self.full[2])

    def sub_shape(self) -> tuple[tuple[int, ...], ...]:
        """A shape that broadcasts to `full`: leading axes dropped, some sizes 1."""
        if self.rng.random() < 0.5:
            return self.full
        rows = []
        for row in self.full:
            row = row[self.rng.randint(0, len(row)):] if self.rng.random() < 0.3 else row
            rows.append(tuple(1 if self.rng.random() < 0.3 else d for d in row))
        return tuple(rows)


def _dims_kw(rows: tuple[tuple[int, ...], ...]) -> str:
    return f"batch_dims={list(rows[0])}, output_dims={list(rows[1])}, input_dims={list(rows[2])}"


def _np_place(name: str, rows: tuple[tuple[int, ...], ...], full_ranks: tuple[int, ...]) -> str:
    return f"place({name}, {tuple(len(r) for r in rows)}, {full_ranks})"


def leaf(d: Dag) -> str:
    """Add a leaf; returns its node name."""
    kind = d.rng.choice(d.leaves)
    d.tags.add(kind)
    v, k = d.name(), d.n
    rows = d.sub_shape()
    if kind in ("param_ndarray", "param_expr"):  # a param is shared across the batch
        rows = ((), rows[1], rows[2])
    dims = rows[0] + rows[1] + rows[2]
    fr = d.ranks()
    data = f"w{k} = rng.standard_normal({dims!r})"
    if kind == "number":
        c = round(d.rng.uniform(-2, 2), 3)
        d.oc_lines.append(f"{v} = oc.number({c})")
        d.np_lines.append(f"m{k} = {c}")
        return v
    d.oc_lines.append(data)
    if kind == "ndarray":
        d.oc_lines.append(f"{v} = oc.ndarray(w{k}, batch_axes={len(rows[0])}, "
                          f"input_axes={len(rows[2])})")
    elif kind == "param_num":
        c = round(d.rng.uniform(-2, 2), 3)
        d.oc_lines.append(f"{v} = oc.param('p{k}', {_dims_kw(rows)}, init={c})")
        d.np_lines.append(f"m{k} = {_np_place(f'np.full({dims!r}, {c})', rows, fr)}")
        return v
    elif kind == "param_np":
        d.oc_lines.append(f"{v} = oc.param('p{k}', {_dims_kw(rows)}, init=w{k})")
        d.params.append(v)
    elif kind == "param_ndarray":
        d.oc_lines.append(f"{v} = oc.param('p{k}', init=oc.ndarray(w{k}, batch_axes="
                          f"{len(rows[0])}, input_axes={len(rows[2])}))")
    elif kind == "param_expr":
        d.oc_lines.append(f"{v} = oc.param('p{k}', init=oc.ndarray(w{k}, batch_axes="
                          f"{len(rows[0])}, input_axes={len(rows[2])}) * 2.0 + 1.0)")
        d.np_lines.append(f"m{k} = {_np_place(f'w{k} * 2.0 + 1.0', rows, fr)}")
        return v
    elif kind == "param_rand":
        d.oc_lines.append(f"{v} = oc.param('p{k}', {_dims_kw(rows)})")
        d.np_lines.append(f"m{k} = {_np_place(f'get({v})', rows, fr)}")
        return v
    else:  # param_inferred: no dims, closed from its uses (LUB)
        d.oc_lines.append(f"{v} = oc.param('p{k}')")
        d.np_lines.append(f"m{k} = place(get({v}), (len({v}.shape.batch), "
                          f"len({v}.shape.output), len({v}.shape.input)), {fr})")
        return v
    d.np_lines.append(f"m{k} = {_np_place(f'w{k}', rows, fr)}")
    return v


def inner(d: Dag, a: str, b: str) -> str:
    v, k = d.name(), d.n
    ma, mb = "m" + a[1:], "m" + b[1:]
    if d.rng.random() < 0.4:
        op = d.rng.choice(sorted(UNARY))
        oc_f, np_f = UNARY[op]
        d.oc_lines.append(f"{v} = {oc_f.format(a)}")
        d.np_lines.append(f"m{k} = {np_f.format(ma)}")
        b = a
    else:
        op = d.rng.choice(sorted(BINARY))
        oc_f, np_f = BINARY[op]
        if d.rng.random() < 0.2:  # a Python number operand, on either side
            b = mb = str(round(d.rng.uniform(0.5, 2), 2))
            a, b, ma, mb = (b, a, mb, ma) if op in ("add", "sub", "mul") and \
                d.rng.random() < 0.5 else (a, b, ma, mb)
            d.tags.add("pyconst")
        d.oc_lines.append(f"{v} = {oc_f.format(a, b)}")
        d.np_lines.append(f"m{k} = {np_f.format(ma, mb)}")
    d.tags.add(op)
    d.used |= {a, b}
    return v


def _full(rng: random.Random) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    def row(mx: int) -> tuple[int, ...]:
        return tuple(rng.randint(1, 3) for _ in range(rng.randint(0, mx)))
    full = (row(1), row(2), row(1))
    return full if full[1] else (full[0], (rng.randint(1, 3),), full[2])


def build_dag(rng: random.Random, leaves: tuple[str, ...], n_inner: int) -> Dag:
    """Leaves, then inner nodes whose operands are any earlier nodes (shared subterms)."""
    d = Dag(rng, _full(rng), leaves)
    for _ in range(rng.randint(1, 3)):
        d.nodes.append(leaf(d))
    for _ in range(n_inner):
        if rng.random() < 0.25:
            d.nodes.append(leaf(d))
        a, b = rng.choice(d.nodes), rng.choice(d.nodes)
        d.nodes.append(inner(d, d.nodes[-1] if rng.random() < 0.5 else a, b))
    if len(set(d.nodes)) < len(d.nodes) or n_inner > 2:
        d.tags.add("shared")
    for v in d.nodes[:-1]:  # every node reaches the root
        if v not in d.used:
            d.nodes.append(inner_add(d, d.nodes[-1], v))
    return d


def inner_add(d: Dag, a: str, b: str) -> str:
    v, k = d.name(), d.n
    d.oc_lines.append(f"{v} = {a} + {b}")
    d.np_lines.append(f"m{k} = m{a[1:]} + m{b[1:]}")
    d.used |= {a, b}
    return v


def _anchor(d: Dag, root: str) -> str:
    """root + 0 * (full-shape data): pins the result's shape to `full`."""
    saved = d.leaves
    d.leaves, rows = ("ndarray",), d.full
    d.sub_shape = lambda: rows  # type: ignore[method-assign]
    z = leaf(d)
    d.leaves = saved
    del d.sub_shape
    v, k = d.name(), d.n
    d.oc_lines.append(f"{v} = {root} + 0.0 * {z}")
    d.np_lines.append(f"m{k} = m{root[1:]} + 0.0 * m{z[1:]}")
    return v


def _dims(d: Dag) -> tuple[int, ...]:
    return d.full[0] + d.full[1] + d.full[2]


def pointwise_program(seed: int, leaves: tuple[str, ...] = LEAVES, kind: str = "pointwise"
                      ) -> Program:
    """A random DAG of pointwise operators over broadcasting leaves."""
    rng = random.Random(seed)
    d = build_dag(rng, leaves, rng.randint(1, 4))
    root = _anchor(d, d.nodes[-1])
    build = "\n".join(d.oc_lines) + f"\nt = {root}\n"
    oracle = ("from fuzz_oracle import place\n" + "\n".join(d.np_lines)
              + f"\nwant = np.broadcast_to(m{root[1:]}, {_dims(d)!r})\n")
    return Program(kind, seed, f"shape {d.full} (batch, output, input)", build, oracle,
                   tags=frozenset(d.tags))


# ---- random graphs for gradients: float64 params, compose, a scalar loss -----------------

GRAD_LEAVES = ("param_np", "param_np", "ndarray", "number")
LETTERS = ("ab", "cde", "gh")  #: einsum letters for the batch, output and input rows


def _rows_spec(ranks: tuple[int, ...], extra_out: str = "") -> str:
    b, o, i = (LETTERS[k][:n] for k, n in enumerate(ranks))
    return f"{b}|{i}->{extra_out}{o}"


def _compose(d: Dag, root: str) -> tuple[str, tuple[int, ...]]:
    """W @ root with a float64 param W (OCANNL `*`): outputs of root meet inputs of W."""
    wo = d.rng.randint(1, 3)
    v, k = d.name(), d.n
    nb, no, ni = d.ranks()
    d.oc_lines += [f"w{k} = rng.standard_normal({(wo,) + d.full[1]!r})",
                   (f"{v} = oc.param('p{k}', output_dims=[{wo}], "
                    f"input_dims={list(d.full[1])}, init=w{k})"), f"c{k} = {v} @ {root}"]
    b, o, i = (LETTERS[j][:n] for j, n in enumerate((nb, no, ni)))
    d.np_lines.append(f"mc{k} = np.einsum('w{o},{b}{o}{i}->{b}w{i}', w{k}, m{root[1:]})")
    d.params.append(v)
    d.tags.add("compose")
    return f"c{k}", (nb, 1, ni)


def grad_program(seed: int) -> Program:
    """A random DAG over float64 params, maybe composed with a matrix param, summed
    against fixed weights into a scalar loss; checked against central differences."""
    rng = random.Random(seed)
    d = build_dag(rng, GRAD_LEAVES, rng.randint(1, 4))
    root = _anchor(d, d.nodes[-1])
    out, ranks = root, d.ranks()
    dims = _dims(d)
    if rng.random() < 0.35:
        out, ranks = _compose(d, root)
        dims = d.full[0] + (int(d.oc_lines[-2].split("output_dims=[")[1].split("]")[0]),) \
            + d.full[2]
    spec = _rows_spec(ranks)
    d.oc_lines += [f"g = rng.standard_normal({dims!r})",
                   (f"t = oc.einsum('{spec};{spec}=>', {out}, oc.ndarray(g, "
                    f"batch_axes={ranks[0]}, input_axes={ranks[2]}))")]
    m_out = "m" + out[1:] if out.startswith("n") else "m" + out
    oracle = ("from fuzz_oracle import place\n" + "\n".join(d.np_lines)
              + f"\nwant = np.sum(np.broadcast_to({m_out}, {dims!r}) * g)\n")
    if not d.params:  # at least one differentiable input
        return grad_program(seed + 7_777_777)
    return Program("grads/dag", seed, f"shape {d.full}, params {d.params}",
                   "\n".join(d.oc_lines) + "\n", oracle, grads=tuple(d.params),
                   tags=frozenset(d.tags))


def max_grad_program(seed: int, *, ties: bool) -> Program:
    """`einsum_max` over one axis of a float64 param; with `ties`, small-integer values so
    maxima repeat: the tied cells' gradients must split the upstream gradient (sum to it,
    each within [0, it]), the others get 0."""
    rng = random.Random(seed)
    n_i, n_j = rng.randint(1, 3), rng.randint(2, 4)
    data = (f"x0 = rng.integers(0, 2, ({n_i}, {n_j})).astype(float)" if ties
            else f"x0 = rng.standard_normal(({n_i}, {n_j}))")
    build = (f"{data}\ng = rng.uniform(0.5, 2.0, ({n_i},))\n"
             "x = oc.param('x', init=x0)\n"
             "t = oc.einsum('i;i=>', oc.einsum_max('ij=>i', x), oc.ndarray(g))\n")
    oracle = "want = np.sum(x0.max(axis=1) * g)\n"
    if ties:
        oracle += ("gx = get(x.grad)\nis_max = x0 == x0.max(axis=1, keepdims=True)\n"
                   "assert np.allclose(gx[~is_max], 0), f'non-maximal cells got {gx}'\n"
                   "assert np.allclose(np.where(is_max, gx, 0).sum(axis=1), g), "
                   "f'tied maxima: grads {gx} do not sum to {g}'\n"
                   "assert (gx >= -1e-12).all() and (gx <= g[:, None] + 1e-12).all(), gx\n")
    return Program("grads/max_ties" if ties else "grads/max", seed,
                   f"einsum_max 'ij=>i' over x{(n_i, n_j)}", build, oracle,
                   grads=("x",), tags=frozenset({"ties"} if ties else ()))
