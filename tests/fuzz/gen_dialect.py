"""Generator of random @cd sources from a grammar of the dialect's forms (issue 23): small
optimizers (a `for p in params:` loop declaring per-param state, reading `p.grad`,
updating `p`) and op bodies (`unary_op`/`binary_op` op_asn + grad_asn). Each source comes
with its statement list, which `interpret` runs with NumPy; some carry one invalid form,
whose located error (file and line inside the source) is the expected outcome.

Expressions are built from leaves (slots, state, hyperparameters, constants), arithmetic,
and the dialect's functions, used without imports. Discontinuous functions (sign, floor,
round, mod, comparisons) only apply to leaves, so rounding in a longer expression never
decides a branch differently in C and in NumPy.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field
from typing import Any

import numpy as np


class GradArray(np.ndarray):
    """A NumPy array with `.grad`, so `p.grad` reads as written in the NumPy interpretation."""

    grad: np.ndarray


def _np_funcs() -> dict[str, Any]:
    def f(x: Any) -> np.ndarray:
        return np.asarray(x, dtype=np.float64)

    return {
        "sqrt": np.sqrt, "exp": np.exp, "tanh": np.tanh, "abs": np.abs, "sign": np.sign,
        "floor": np.floor, "round": np.round, "relu": lambda x: np.maximum(f(x), 0.0),
        "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-f(x))),
        "clamp": lambda x, lo, hi: np.clip(x, lo, hi), "mod": np.mod,
        "lt": lambda a, b: (f(a) < f(b)).astype(np.float64),
        "where": lambda c, a, b: np.where(f(c) != 0.0, a, b), "recip": lambda x: 1.0 / f(x),
    }


NP_FUNCS = _np_funcs()


class Expr:
    """A random expression over the given leaves; `text` is valid in both readings."""

    def __init__(self, rng: np.random.Generator, leaves: list[str]) -> None:
        self.rng = rng
        self.leaves = leaves

    def leaf(self) -> str:
        if self.rng.random() < 0.2:
            return str(self.rng.choice(["0.5", "2.0", "-1.5", "0.25"]))
        return str(self.rng.choice(self.leaves))

    def gen(self, depth: int) -> str:
        r = self.rng
        if depth == 0 or r.random() < 0.25:
            return self.leaf()
        k = int(r.integers(0, 14))
        a = self.gen(depth - 1)
        if k <= 3:
            op = ["+", "-", "*", "*"][k]
            return f"({a} {op} {self.gen(depth - 1)})"
        if k == 4:
            return f"({a} / (1.0 + abs({self.gen(depth - 1)})))"
        if k == 5:
            return f"(-{a})"
        if k == 6:
            fn = str(r.choice(["tanh", "sigmoid", "abs", "relu"]))
            return f"{fn}({a})"
        if k == 7:
            return f"sqrt(abs({a}) + 1.0)"
        if k == 8:
            return f"exp(clamp({a}, -2.0, 2.0))"
        if k == 9:
            return f"clamp({a}, -1.0, 0.75)"
        if k == 10:
            fn = str(r.choice(["sign", "floor", "round"]))
            return f"{fn}({self.leaf()})"
        if k == 11:
            return f"mod({self.leaf()}, 1.5)"
        if k == 12:
            return f"where(lt({self.leaf()}, {self.leaf()}), {a}, {self.gen(depth - 1)})"
        return f"recip(2.0 + abs({a}))"


@dataclass
class Source:
    """A generated @cd module: its text (after `import ocannl_ast as oc`), the NumPy
    reading (statements), and the expected outcome ("value" or "error")."""

    kind: str  #: "optimizer" or "op"
    seed: int
    text: str
    steps: list[tuple[str, str, str]] = field(default_factory=list)  #: (target, op, expr)
    grad_steps: list[tuple[str, str, str]] = field(default_factory=list)
    arity: int = 1
    expect: str = "value"
    invalid: str = ""  #: which invalid form was planted


_OPT_INVALID = ["read_before_declare", "init_in_cd", "return_value", "unknown_name",
                "branch_on_tensor"]


def optimizer_source(seed: int) -> Source:
    """`def opt(params, lr, mom)`: a loop over params with one or two state nodes."""
    rng = np.random.default_rng(seed)
    steps: list[tuple[str, str, str]] = []
    base = ["p", "p.grad", "lr", "mom"]
    # a declaration reads p.grad, so its node takes the param's shape
    steps.append(("s0", "=", f"{Expr(rng, [*base, 's0']).gen(3)} + 0.1 * p.grad"))
    if rng.random() < 0.5:
        steps.append(("s1", "=", f"{Expr(rng, [*base, 's0', 's1']).gen(2)} + 0.1 * p.grad"))
    if rng.random() < 0.4:
        steps.append(("s0", "+=", Expr(rng, ["p.grad", "s0", "mom"]).gen(2)))
    known = [t for t, _, _ in steps]
    update = Expr(rng, ["p.grad", *known, "mom"]).gen(3)
    form = int(rng.integers(0, 3))
    if form == 0:
        steps.append(("p", "-=", f"lr * {update}"))
    elif form == 1:
        steps.append(("p", "+=", f"(-lr) * {update}"))
    else:
        steps.append(("p", "=", f"p - lr * {update}"))
    lines = []
    declared: set[str] = set()
    for target, op, expr in steps:
        if target == "p":
            lines.append(f"p[...] = {expr}" if op == "=" else f"p {op} {expr}")
        elif target not in declared:
            declared.add(target)
            lines.append(f"{{{target}}}[...] = {expr}")
        else:
            lines.append(f"{target} {op} {expr}" if op != "=" else f"{target}[...] = {expr}")
    if rng.random() < 0.3:
        lines.append("p = p - lr * p.grad")  # a dead rebinding: warns, updates nothing
    src = Source("optimizer", seed, "", steps)
    if rng.random() < 0.25:
        src.expect, src.invalid = "error", str(rng.choice(_OPT_INVALID))
        lines = _plant_opt(lines, src.invalid)
    body = textwrap.indent("\n".join(lines), " " * 8)
    src.text = f"@oc.cd\ndef opt(params, lr, mom):\n    for p in params:\n{body}\n"
    return src


def _plant_opt(lines: list[str], invalid: str) -> list[str]:
    if invalid == "read_before_declare":
        return ["p -= lr * s0", *lines]
    if invalid == "init_in_cd":
        return [lines[0].replace("{s0}", "{s0 := 1.0}", 1), *lines[1:]]
    if invalid == "return_value":
        return [*lines, "return p"]
    if invalid == "unknown_name":
        return [*lines, "p -= lr * mean(p.grad)"]
    return ["if p.grad > 0.0:", "    p -= lr", *lines]  # branch_on_tensor


_OP_INVALID = ["plain_set_grad", "branch_on_slot", "builtin_max", "unknown_name"]


def op_source(seed: int) -> Source:
    """`op_asn`/`grad_asn` of a unary or binary pointwise operation."""
    rng = np.random.default_rng(seed)
    arity = int(rng.integers(1, 3))
    slots = ["v1", "v2"][:arity]
    fwd = Expr(rng, slots).gen(3)
    src = Source("op", seed, "", [("v", "=", fwd)], arity=arity)
    glines = []
    for k in range(1, arity + 1):
        for _ in range(int(rng.integers(1, 3))):
            op = str(rng.choice(["+=", "-="]))
            expr = Expr(rng, ["g", "v", *slots]).gen(2)
            src.grad_steps.append((f"g{k}", op, expr))
            glines.append(f"g{k} {op} {expr}")
    flines = [f"v[...] = {fwd}"]
    if rng.random() < 0.25:
        src.expect, src.invalid = "error", str(rng.choice(_OP_INVALID))
        if src.invalid == "plain_set_grad":
            glines[0] = "g1[...] = " + src.grad_steps[0][2]
        elif src.invalid == "branch_on_slot":
            flines = ["if v1 > 0.0:", f"    v[...] = {fwd}", "else:", "    v[...] = -v1"]
        elif src.invalid == "builtin_max":
            flines = [f"v[...] = 2.0 * max(v1, {fwd})"]
        else:
            flines = [f"v[...] = mean(v1) + {fwd}"]
    params = ", ".join(slots)
    gparams = ", ".join(["g", *[f"g{k}" for k in range(1, arity + 1)], "v", *slots])
    fbody = textwrap.indent("\n".join(flines), " " * 4)
    gbody = textwrap.indent("\n".join(glines), " " * 4)
    src.text = (f"@oc.cd\ndef op_asn(v, {params}, projections):\n{fbody}\n\n\n"
                f"@oc.cd\ndef grad_asn({gparams}, projections):\n{gbody}\n")
    return src


def interpret(steps: list[tuple[str, str, str]], env: dict[str, Any]) -> None:
    """Run (target, op, expr) statements with NumPy: `=` sets, `+=`/`-=` accumulate."""
    ns = {**NP_FUNCS}
    for target, op, expr in steps:
        ns.update(env)
        value = np.asarray(eval(expr, ns), dtype=np.float64)  # the generated statement
        old = env.get(target)
        if op == "=":
            new = np.broadcast_to(value, np.shape(old)).copy() if old is not None else value
        else:
            sign = 1.0 if op == "+=" else -1.0
            new = np.asarray(old) + sign * value
        if target == "p":
            cur = env["p"]
            cur[...] = new
        else:
            env[target] = new
