"""Inference scaling measurement (not a test): build+infer 200 small independent graphs, and
an L-layer MLP build+close for L = 8, 16, 32. Prints times and the solver's live state.

Run: ``.venv/bin/python tests/infer/bench_infer_scaling.py``.
"""

from __future__ import annotations

import time

import ocannl_ast as oc


def small_graph(i: int) -> oc.Tensor:
    x = oc.term(f"x{i}", batch_dims=[4], output_dims=[3])
    w = oc.param(f"w{i}", output_dims=[5])
    b = oc.param(f"b{i}", output_dims=[5])
    return oc.relu(w @ x + b)


def mlp(n_layers: int) -> oc.Tensor:
    h = oc.term("x", batch_dims=[32], output_dims=[16])
    for k in range(n_layers):
        w = oc.param(f"w{k}", output_dims=[16])
        b = oc.param(f"b{k}", output_dims=[16])
        h = oc.relu(w @ h + b)
    return h


def live(t: oc.Tensor) -> str:
    s = t.shape.solver
    return f"bindings={len(s.dims) + len(s.rows)} stuck={len(s.stuck())}"


def main() -> None:
    t0 = time.perf_counter()
    keep = []
    for i in range(200):
        y = small_graph(i)
        oc.infer_shapes(y)
        keep.append(y)
    dt = time.perf_counter() - t0
    print(f"200 small graphs build+infer: {dt * 1000:.0f} ms; last graph's solver: "
          f"{live(keep[-1])}")
    open_graphs = [small_graph(1000 + i) for i in range(200)]  # built, never inferred
    t0 = time.perf_counter()
    y = mlp(16)
    oc.infer_shapes(y)
    dt = time.perf_counter() - t0
    print(f"MLP L=16 after 200 open graphs: build+close {dt * 1000:.0f} ms; {live(y)}")
    del open_graphs
    for n in (8, 16, 32):
        t0 = time.perf_counter()
        y = mlp(n)
        oc.infer_shapes(y)
        dt = time.perf_counter() - t0
        print(f"MLP L={n}: build+close {dt * 1000:.0f} ms; {live(y)}")


if __name__ == "__main__":
    main()
