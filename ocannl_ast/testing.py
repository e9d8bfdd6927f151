"""Testing helpers for pytest (`oc.testing`): gradient checks against float64 central
differences, and shape assertions in OCANNL notation.

Input: a function of tensors and NumPy inputs, or a tensor and an expected shape.
Output: nothing; an AssertionError naming the input and worst cell (or both shapes).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .errors import ArgumentError
from .tensor import validate
from .tensor.context import Context
from .tensor.leaves import param
from .tensor.node import Tensor
from .tensor.pipeline import close_tensors


def check_grads(fn: Callable[..., Tensor], inputs: Sequence[Any], *, eps: float = 1e-6,
                rtol: float = 1e-3, atol: float = 1e-4) -> None:
    """Check the gradients of `fn(*params)` (a scalar tensor) with respect to float64
    params initialized from `inputs` against central differences of its forward value.

    One float64 context compiles the forward+backprop and forward routines once; each
    numeric derivative sets a perturbed input (`ctx.set`) and reruns the forward routine.
    A cell fails when ``|analytic - numeric| > atol + rtol * |numeric|``.

    Example: ``check_grads(lambda x: oc.einsum("i;i=>", x, x), [np.ones(3)])``.
    """
    arrays = _check_args(fn, inputs, eps, rtol, atol)
    params = [param(f"check_grads_input{i}", init=a) for i, a in enumerate(arrays)]
    loss = fn(*params)
    validate.check_tensor("check_grads", "fn(*inputs)", loss)
    close_tensors([loss, *params], dependencies=True)  # as oc.infer_shapes
    if int(np.prod(loss.dims())) != 1:
        validate.fail(ArgumentError, f"check_grads: fn must return a scalar tensor, got one "
                                     f"of dims {loss.dims()}")
    ctx = Context("c", precision="float64")
    reached = {t.id for t in loss.subgraph()}
    fwd = ctx.compile(loss.forward_all(), name="check_grads_forward")
    both = ctx.compile([loss.forward_all(), loss.backprop], name="check_grads_backprop")
    for p, a in zip(params, arrays, strict=True):
        ctx.set(p, a.reshape(p.dims()))
    both()
    for i, (p, a) in enumerate(zip(params, arrays, strict=True)):
        analytic = (ctx.get(p.grad).reshape(a.shape) if p.id in reached
                    else np.zeros(a.shape))
        numeric = _numeric_grad(ctx, fwd, loss, p, a, eps)
        _compare(i, a.shape, analytic, numeric, rtol, atol, _ops_from(loss, p))


def _check_args(fn: Any, inputs: Any, eps: Any, rtol: Any, atol: Any) -> list[np.ndarray]:
    """Validate check_grads' arguments; the inputs as float64 arrays."""
    validate.check_callable("check_grads", "fn", fn)
    if not isinstance(inputs, list | tuple) or not inputs:
        validate.fail(ArgumentError, "check_grads: inputs must be a non-empty list of NumPy "
                      f"arrays, got {validate.describe(inputs)}")
    for name, x in (("eps", eps), ("rtol", rtol), ("atol", atol)):
        validate.check_number("check_grads", name, x)
        if isinstance(x, bool):
            validate.fail(ArgumentError, f"check_grads: {name} must be a number, got {x}")
        if x < 0 or (name == "eps" and x == 0):
            validate.fail(ArgumentError, f"check_grads: {name} must be "
                          f"{'> 0' if name == 'eps' else '>= 0'}, got {x}")
    arrays = []
    for i, x in enumerate(inputs):
        arr = _as_float64(x)
        if arr is None or not np.all(np.isfinite(arr)):
            validate.fail(ArgumentError, f"check_grads: inputs[{i}] must be a finite numeric "
                          f"NumPy array, got {validate.describe(x)}")
        arrays.append(arr if arr.ndim else arr.reshape(1))
    _check_arity(fn, len(arrays))
    return arrays


def _as_float64(x: Any) -> np.ndarray | None:
    """`x` as a float64 array, or None when it is not numeric (strings, objects, ragged)."""
    if not isinstance(x, np.ndarray | list | tuple | float | int | np.number):
        return None
    try:
        return np.asarray(x, dtype=np.float64)
    except (ValueError, TypeError, OverflowError):
        return None


def _check_arity(fn: Any, n: int) -> None:
    """fn must accept one positional argument per input array (when its signature says)."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return
    try:
        sig.bind(*range(n))
    except TypeError:
        validate.fail(ArgumentError, f"check_grads: fn{sig} cannot take {n} positional "
                      f"argument{'s' if n != 1 else ''} (one tensor per input array)")


def _numeric_grad(ctx: Context, fwd: Any, loss: Tensor, p: Tensor, a: np.ndarray,
                  eps: float) -> np.ndarray:
    """Central differences of the loss value in every cell of one input."""
    out = np.zeros(a.shape)
    work = a.copy()
    for idx in np.ndindex(*a.shape):
        vals = []
        for delta in (eps, -eps):
            work[idx] = a[idx] + delta
            ctx.set(p, work.reshape(p.dims()))
            fwd()
            vals.append(float(ctx.get(loss).reshape(-1)[0]))
        work[idx] = a[idx]
        out[idx] = (vals[0] - vals[1]) / (2 * eps)
    ctx.set(p, a.reshape(p.dims()))
    return out


def _ops_from(loss: Tensor, p: Tensor) -> list[str]:
    """The names of the operations between input `p` and the loss, from the input side,
    each once (`cube`, then `einsum`): where a wrong gradient function can be."""
    depends = {p.id}
    names: list[str] = []
    for t in loss.subgraph():  # creation order: operands before their results
        if t.op is not None and any(o.id in depends for o in t.operands):
            depends.add(t.id)
            if t.op.name not in names:
                names.append(t.op.name)
    return names


def _compare(i: int, shape: tuple[int, ...], analytic: np.ndarray, numeric: np.ndarray,
             rtol: float, atol: float, ops: Sequence[str] = ()) -> None:
    """AssertionError naming the input and its worst cell when a cell is out of tolerance."""
    excess = np.abs(analytic - numeric) - (atol + rtol * np.abs(numeric))
    bad = ~(excess <= 0)  # NaN counts as a failure
    if not bad.any():
        return
    worst = np.unravel_index(int(np.argmax(np.where(np.isnan(excess), np.inf, excess))),
                             shape)
    raise AssertionError(
        f"check_grads: gradient of input {i} (shape {shape}) differs from float64 central "
        f"differences in {int(bad.sum())} of {bad.size} cells; worst cell {tuple(map(int, worst))}"
        f": analytic {float(analytic[worst]):.8g}, numeric {float(numeric[worst]):.8g} "
        f"(rtol={rtol}, atol={atol}); the gradient flows through the operation(s) "
        f"{', '.join(repr(n) for n in ops) or '(none)'}, from the input's side: check their "
        "grad_asn")


def _norm(spec: str) -> str:
    return "".join(spec.split())


def assert_shape(tensor: Tensor, expected: str) -> None:
    """Assert the tensor's (closed) shape in OCANNL notation, e.g. ``"2|3->4"`` (batch |
    input -> output; rows without axes omitted). Closes the tensor's shape first.

    Example: ``assert_shape(w @ x, "5|16")``.
    """
    validate.check_tensor("assert_shape", "tensor", tensor)
    validate.check_str("assert_shape", "expected", expected)
    close_tensors([tensor], dependencies=True)
    got = tensor.shape.describe()
    if _norm(got) != _norm(expected):
        raise AssertionError(f"assert_shape: tensor '{tensor.label}' has shape {got!r}, "
                             f"expected {expected!r}")
