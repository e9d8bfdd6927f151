"""Differential fuzzing of gradients: random DAGs (shared subexpressions, compose,
einsum_max) over float64 params, `backprop` vs float64 central finite differences of the
NumPy oracle; a sample through the public `oc.value_and_grad`."""

from __future__ import annotations

from typing import Any

import numpy as np
from fuzz_harness import Program, _Built, report, run_programs, seeds
from gen_expr import grad_program, max_grad_program

import ocannl_ast as oc

EPS, RTOL, ATOL = 1e-6, 1e-5, 1e-7


def _loss(ns: dict[str, Any], oracle: str) -> float:
    exec(oracle, ns)  # noqa: S102 - generated test code
    return float(ns["want"])


def finite_differences(p: Program, ns: dict[str, Any], name: str) -> np.ndarray:
    """d loss / d param `name`, by central differences of the NumPy oracle."""
    w = ns["x0"] if name == "x" else ns["w" + name[1:]]
    fd = np.zeros_like(w)
    for idx in np.ndindex(w.shape):
        old = w[idx]
        w[idx] = old + EPS
        hi = _loss(ns, p.oracle)
        w[idx] = old - EPS
        lo = _loss(ns, p.oracle)
        w[idx] = old
        fd[idx] = (hi - lo) / (2 * EPS)
    _loss(ns, p.oracle)
    return fd


def _compare(p: Program, name: str, got: np.ndarray, fd: np.ndarray) -> str | None:
    if got.shape == fd.shape and np.allclose(got, fd, rtol=RTOL, atol=ATOL):
        return None
    return (f"--- gradient of {name}: got\n{got}\nfinite differences\n{fd}\n"
            f"{p.repro()}print(get({name}.grad))\n")


def fd_check(b: _Built, ctx: oc.Context, routine: Any) -> str | None:
    if "ties" in b.p.tags:
        return None  # the oracle checks the subgradient rule itself
    for name in b.p.grads:
        r = _compare(b.p, name, ctx.get(b.ns[name].grad), finite_differences(b.p, b.ns, name))
        if r:
            return r
    return None


def _check(programs: list[Program], group: int = 16) -> None:
    failures = run_programs(programs, group=group, grad_check=fd_check)
    assert not failures, report(failures, len(programs))


def test_fuzz_grads_random_dags() -> None:
    _check([grad_program(sd) for sd in seeds(30, 100)])


def test_fuzz_grads_einsum_max_distinct() -> None:
    _check([max_grad_program(sd, ties=False) for sd in seeds(31, 30)])


def test_fuzz_grads_einsum_max_ties() -> None:
    _check([max_grad_program(sd, ties=True) for sd in seeds(32, 30)])


def test_fuzz_grads_through_value_and_grad() -> None:
    """The public one-call path, on a sample (one compiled routine each)."""
    failures = []
    programs = [grad_program(sd) for sd in seeds(33, 8)]
    for p in programs:
        b = _Built(p)
        assert b.error is None, p.repro()
        params = [b.ns[n] for n in p.grads]
        val, grads = oc.value_and_grad(b.tensor, params, precision="float64")
        b.ns.update(got=val, get=None)
        if not np.allclose(val, _loss(b.ns, p.oracle), rtol=1e-9, atol=1e-9):
            failures.append(f"--- loss {val} vs {b.ns['want']}\n{p.repro()}")
        for name, g in zip(p.grads, grads, strict=True):
            r = _compare(p, name, g, finite_differences(p, b.ns, name))
            if r:
                failures.append(r)
    assert not failures, report(failures, len(programs))
