"""NumPy reference for generalized einsums (what `numpy.einsum` cannot express): fixed
indices, broadcast size-1 axes, diagonal reads and writes, result-only axes, max
reductions and tropical (max-plus) products, evaluated over the full product space."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

Axis = str | int  #: a label, or a fixed index (an int)


def _operand_values(arr: np.ndarray, axes: Sequence[Axis], grid: dict[str, np.ndarray]
                    ) -> np.ndarray:
    """The operand read at every point of the product space (broadcast axes read at 0)."""
    assert arr.ndim == len(axes), (arr.shape, axes)
    index: list[np.ndarray | int] = []
    for dim, ax in zip(arr.shape, axes, strict=True):
        if isinstance(ax, int):
            index.append(ax)
        else:
            index.append(grid[ax] if dim != 1 else 0)  # size 0 iterates zero times
    return arr[tuple(index)] if index else arr


def contract(operands: Sequence[tuple[np.ndarray, Sequence[Axis]]], result: Sequence[Axis],
             sizes: dict[str, int], res_dims: Sequence[int], *, combine: str = "mul",
             reduce: str = "sum") -> np.ndarray:
    """out[result index] = reduce over the non-result labels of combine(operands).
    Example: ``contract([(a, "ij"), (b, "jk")], "ik", {...}, (2, 4))`` is ``a @ b``."""
    labels = sorted({ax for _, axes in operands for ax in axes if isinstance(ax, str)})
    shape = tuple(sizes[lbl] for lbl in labels)
    coords = np.indices(shape, sparse=True) if labels else []
    grid = dict(zip(labels, coords, strict=True))
    vals = [np.broadcast_to(_operand_values(a, axes, grid), shape) for a, axes in operands]
    total = vals[0]
    for v in vals[1:]:
        total = total * v if combine == "mul" else total + v
    kept = [lbl for lbl in labels if lbl in result]
    summed = tuple(k for k, lbl in enumerate(labels) if lbl not in result)
    red = np.sum(total, axis=summed) if reduce == "sum" else np.max(total, axis=summed,
                                                                   initial=-np.inf)
    out = np.full(tuple(res_dims), 0.0 if reduce == "sum" else -np.inf)  # the neutral
    kept_grid = np.indices(red.shape, sparse=True) if kept else []
    index: list[np.ndarray | int] = []
    for ax in result:
        if isinstance(ax, int):
            index.append(ax)
        elif ax in kept:
            index.append(kept_grid[kept.index(ax)])
        else:
            index.append(0)  # a result-only label: a size-1 axis
    out[tuple(index)] = red
    return out


def place(arr: np.ndarray, rows: Sequence[int], full: Sequence[int]) -> np.ndarray:
    """A tensor's value (axes batch, output, input with `rows` axes each) reshaped so that
    NumPy broadcasting matches OCANNL's per-row broadcasting against `full` row ranks."""
    shape, at = [], 0
    for n, m in zip(rows, full, strict=True):
        shape += [1] * (m - n) + list(arr.shape[at:at + n])
        at += n
    return np.asarray(arr).reshape(shape)
