"""Fuzzing backprop against an oracle where `stop_gradient` cuts the graph: random small
expression graphs over two params mix differentiable ops with `oc.stop_gradient` (some of it
over sqrt(x^2) at x = 0, whose local derivative is infinite); ocannl's float64 gradients must
equal central finite differences in NumPy with every stop_gradient'ed value frozen at the
unperturbed params, and be finite (no 0 * inf leaking from behind a stop_gradient)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest

import ocannl_ast as oc

N = 5
EPS = 1e-6


@dataclass(frozen=True)
class Node:
    op: str  # "p", "add", "mul", "sin", "tanh", "exp", "soft", "sg", "sg_sqrt"
    args: tuple[int, ...] = ()
    k: int = 0  # the param index of a "p" node


UNARY = ("sin", "tanh", "exp", "soft", "sg", "sg_sqrt")
BINARY = ("add", "mul")


def random_graph(rng: np.random.Generator, size: int) -> list[Node]:
    nodes = [Node("p", k=0), Node("p", k=1), Node("sg_sqrt", (0,))]  # sqrt(p0^2) at p0 = 0
    for _ in range(size):
        if rng.random() < 0.45:
            a, b = rng.integers(0, len(nodes), 2)
            nodes.append(Node(str(rng.choice(BINARY)), (int(a), int(b))))
        else:
            nodes.append(Node(str(rng.choice(UNARY)), (int(rng.integers(0, len(nodes))),)))
    # the loss: (last + p0) * p1 + sg_sqrt(p0) * p1 (a differentiable path to each param)
    nodes.append(Node("add", (len(nodes) - 1, 0)))
    nodes.append(Node("mul", (len(nodes) - 1, 1)))
    nodes.append(Node("mul", (2, 1)))
    nodes.append(Node("add", (len(nodes) - 2, len(nodes) - 1)))
    return nodes


NP: dict[str, Callable[..., np.ndarray]] = {
    "add": np.add, "mul": np.multiply, "sin": np.sin, "tanh": np.tanh,
    "exp": lambda a: np.exp(0.3 * a), "soft": lambda a: np.sqrt(a * a + 1.0),
    "sg": lambda a: a, "sg_sqrt": lambda a: np.sqrt(a * a),
}


def np_eval(nodes: list[Node], params: list[np.ndarray],
            frozen: dict[int, np.ndarray] | None = None) -> list[np.ndarray]:
    """Every node's value; stop_gradient'ed nodes take `frozen`'s value where given."""
    vals: list[np.ndarray] = []
    for i, n in enumerate(nodes):
        if n.op == "p":
            v = params[n.k]
        elif frozen is not None and n.op.startswith("sg"):
            v = frozen[i]
        else:
            v = NP[n.op](*(vals[a] for a in n.args))
        vals.append(v)
    return vals


def oc_build(nodes: list[Node], ps: list[oc.Tensor]) -> oc.Tensor:
    ts: list[oc.Tensor] = []
    for n in nodes:
        args = [ts[a] for a in n.args]
        match n.op:
            case "p":
                t = ps[n.k]
            case "add":
                t = args[0] + args[1]
            case "mul":
                t = args[0] * args[1]
            case "sin":
                t = oc.sin(args[0])
            case "tanh":
                t = oc.tanh(args[0])
            case "exp":
                t = oc.exp(0.3 * args[0])
            case "soft":
                t = oc.sqrt(args[0] * args[0] + 1.0)
            case "sg":
                t = oc.stop_gradient(args[0])
            case "sg_sqrt":  # |x| as sqrt(x^2): an infinite local derivative at 0
                t = oc.stop_gradient(oc.sqrt(args[0] * args[0]))
            case _:
                raise AssertionError(n.op)
        ts.append(t)
    return ts[-1]


@pytest.mark.parametrize("seed", range(24))
def test_gradients_behind_stop_gradient_match_frozen_finite_differences(seed: int) -> None:
    rng = np.random.default_rng(seed)
    nodes = random_graph(rng, int(rng.integers(3, 9)))
    base = [rng.uniform(-1.5, 1.5, N), rng.uniform(-1.5, 1.5, N)]
    base[0][0] = 0.0  # sg_sqrt(p0) sits at sqrt(0) there
    base[1][1] = 0.0
    W = rng.standard_normal(N)

    ps = [oc.param(f"p{k}", output_dims=[N], init=base[k]) for k in range(2)]
    loss = oc.einsum("o;o=>", oc_build(nodes, ps), oc.ndarray(W))
    value, grads = oc.value_and_grad(loss, ps, precision="float64")

    vals = np_eval(nodes, base)
    assert float(np.asarray(value).reshape(-1)[0]) == pytest.approx(float(vals[-1] @ W),
                                                                     rel=1e-12, abs=1e-12)
    frozen = {i: vals[i] for i, n in enumerate(nodes) if n.op.startswith("sg")}
    for k in range(2):
        g = np.asarray(grads[k], dtype=np.float64)
        assert np.all(np.isfinite(g)), (nodes, g)
        num = np.empty(N)
        for j in range(N):
            hi = [b.copy() for b in base]
            lo = [b.copy() for b in base]
            hi[k][j] += EPS
            lo[k][j] -= EPS
            num[j] = (np_eval(nodes, hi, frozen)[-1] @ W - np_eval(nodes, lo, frozen)[-1] @ W) \
                / (2 * EPS)
        np.testing.assert_allclose(g, num, rtol=1e-5, atol=1e-6,
                                   err_msg=f"param {k} of {nodes}")
