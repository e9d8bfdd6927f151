"""Train or eval mode of the `oc.nn` layers that differ between the two (dropout,
batch_norm), chosen when a graph is *built*: `with oc.nn.eval_mode():` or `train=False`.
A leaf module, so that every layer module can read the one mode without importing nn.

Input: the caller's `train=` argument. Output: whether the layer builds its training form.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

from .errors import ArgumentError
from .tensor import validate

_EVAL_MODE: contextvars.ContextVar[bool] = contextvars.ContextVar("oc_nn_eval", default=False)


@contextlib.contextmanager
def eval_mode() -> Iterator[None]:
    """Tensors built inside `with oc.nn.eval_mode():` are for inference: dropout layers
    called there are the identity and batch_norm layers normalize with their running
    statistics. Layers share their params across modes, so build the training graph
    outside and the evaluation graph inside.

    Example: ``with oc.nn.eval_mode(): test_loss = oc.nn.mse(model(x_test), y_test)``."""
    token = _EVAL_MODE.set(True)
    try:
        yield
    finally:
        _EVAL_MODE.reset(token)


def is_training(fn: str, train: object) -> bool:
    """A layer's mode: `train` when given (a bool), else not inside `eval_mode()`."""
    if train is None:
        return not _EVAL_MODE.get()
    if not isinstance(train, bool):
        validate.fail(ArgumentError, f"{fn}: train must be a bool or None, got "
                                     f"{validate.describe(train)}")
    return train
