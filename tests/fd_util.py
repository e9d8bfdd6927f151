"""Central finite differences for tests whose parameters have batch or input axes (which
`oc.testing.check_grads`, taking plain arrays as output-only params, cannot express).

Every perturbed copy of the graph is built from fresh params and all of them are evaluated
by one float64 `oc.eval` (one compiled routine), copy k's loss landing in slot k.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

import ocannl_ast as oc


def eval_many(losses: Sequence[oc.Tensor]) -> np.ndarray:
    """The values of many scalar tensors from one float64 `oc.eval`."""
    n = len(losses)
    total: oc.Tensor | None = None
    for k, lo in enumerate(losses):
        onehot = np.zeros(n)
        onehot[k] = 1.0
        term = lo * oc.ndarray(onehot)
        total = term if total is None else total + term
    if total is None:
        return np.zeros(0)
    return np.asarray(oc.eval(total, precision="float64"), dtype=np.float64).reshape(n)


def central_differences(loss_of: Callable[[list[np.ndarray]], oc.Tensor],
                        base: Sequence[np.ndarray], eps: float
                        ) -> tuple[float, list[np.ndarray]]:
    """`loss_of(arrays)` (a scalar tensor built from fresh params initialized with `arrays`)
    at `base`, and its float64 central differences in every cell of every array."""
    perturbed: list[list[np.ndarray]] = [[a.copy() for a in base]]
    where: list[tuple[int, tuple[int, ...], float]] = []
    for k, a in enumerate(base):
        for idx in np.ndindex(a.shape):
            for sign in (1.0, -1.0):
                arrays = [x.copy() for x in base]
                arrays[k][idx] += sign * eps
                perturbed.append(arrays)
                where.append((k, idx, sign))
    losses = eval_many([loss_of(arrays) for arrays in perturbed])
    nums = [np.zeros_like(a, dtype=np.float64) for a in base]
    for (k, idx, sign), lo in zip(where, losses[1:], strict=True):
        nums[k][idx] += sign * lo / (2 * eps)
    return float(losses[0]), nums
