"""Argument checks at the public entry points: every bad input becomes a located
`OcannlError` subclass (ArgumentError, ShapeError, SpecError, RuntimeDataError), never a
raw Python error or a silently wrong value. Input: a public call's arguments. Output:
nothing, or a normalized value."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn

import numpy as np

from ..errors import ArgumentError, OcannlError, RuntimeDataError, ShapeError, SpecError, user_span
from ..infer.spec_parser import parse_spec
from ..infer.terms import Dim
from .node import BatchList, NodeRef, Tensor

if TYPE_CHECKING:
    from ..backends.protocol import Backend

PRECISIONS = ("float32", "float64", "float16", "bfloat16")
_INT64_MAX = 2**63 - 1


def fail(cls: type[OcannlError], message: str) -> NoReturn:
    """Raise `cls(message)` located at the user's call."""
    raise cls(message, user_span())


def describe(x: Any) -> str:
    """A short description of a value for messages: its type and a clipped repr."""
    r = repr(x)
    return f"{type(x).__name__} {r[:60] + '...' if len(r) > 60 else r}"


def is_int(x: Any) -> bool:
    """A Python or NumPy integer (bool excluded)."""
    return isinstance(x, int | np.integer) and not isinstance(x, bool | np.bool_)


def is_real(x: Any) -> bool:
    """A real number: Python/NumPy int, float or bool (complex excluded)."""
    return isinstance(x, bool | int | float | np.integer | np.floating | np.bool_)


def check_str(fn: str, param: str, x: Any, *, optional: bool = False) -> None:
    """`x` is a non-empty str (or None when optional)."""
    if optional and x is None:
        return
    if not isinstance(x, str) or not x:
        want = "a non-empty str" + (" or None" if optional else "")
        fail(ArgumentError, f"{fn}: {param} must be {want}, got {describe(x)}")


def check_count(fn: str, param: str, n: Any) -> None:
    """An axis count: a non-negative int."""
    if not is_int(n) or n < 0:
        fail(ShapeError, f"{fn}: {param} must be a non-negative int, got {describe(n)}")


def check_dims(fn: str, param: str, dims: Any) -> None:
    """None, or a list/tuple of non-negative ints (or `(size, label)` pairs)."""
    if dims is None:
        return
    if not isinstance(dims, list | tuple):
        fail(ShapeError, f"{fn}: {param} must be a list of non-negative ints or None, "
                         f"got {describe(dims)}")
    for d in dims:
        size = d[0] if isinstance(d, tuple) and len(d) == 2 and isinstance(d[1], str) else d
        if isinstance(d, Dim):
            continue
        if not is_int(size) or size < 0:
            fail(ShapeError, f"{fn}: {param} must hold non-negative ints, got {describe(d)} "
                             f"in {dims!r}")


def check_spec(fn: str, spec: Any) -> None:
    """An einsum spec is a str."""
    if not isinstance(spec, str):
        raise SpecError(f"{fn}: the spec must be a str like \"ij;jk=>ik\", got {describe(spec)}",
                        repr(spec), 0, user_span())


def check_tensor(fn: str, param: str, x: Any, *, refs: bool = False) -> None:
    """`x` is an oc.Tensor (or, with refs, a node reference such as `t.grad`)."""
    if isinstance(x, Tensor) or (refs and isinstance(x, NodeRef)):
        return
    want = "an oc.Tensor" + (" or a node reference (t.grad)" if refs else "")
    fail(ArgumentError, f"{fn}: {param} must be {want}, got {describe(x)}")


def check_tensors(fn: str, param: str, xs: Any) -> list[Any]:
    """A bare tensor or a list/tuple of tensors, as a list."""
    if isinstance(xs, Tensor):
        return [xs]
    if not isinstance(xs, list | tuple):
        fail(ArgumentError, f"{fn}: {param} must be a list of oc.Tensor, got {describe(xs)}")
    for i, x in enumerate(xs):
        check_tensor(fn, f"{param}[{i}]", x)
    return list(xs)


def check_number(fn: str, param: str, x: Any,
                 cls: type[OcannlError] = RuntimeDataError) -> None:
    """A real Python/NumPy number (not None, complex, str, an array); else `cls` (a
    tensor's value: RuntimeDataError; a hyperparameter: ArgumentError)."""
    if not is_real(x):
        fail(cls, f"{fn}: {param} must be a real number, got {describe(x)}")


def check_arg_number(fn: str, param: str, x: Any) -> None:
    """A hyperparameter that must be a real number (else an ArgumentError, as docs/api.md
    says of an argument of the wrong type)."""
    check_number(fn, param, x, ArgumentError)


def check_nonnegative(fn: str, param: str, x: Any) -> None:
    """A finite real number >= 0 (a learning rate, a momentum, an eps, a weight decay):
    NaN or an infinity would make every weight NaN at the first step."""
    check_number(fn, param, x, ArgumentError)
    if not math.isfinite(x) or x < 0:
        fail(ArgumentError, f"{fn}: {param} must be a finite number >= 0, got {x}")


def check_callable(fn: str, param: str, f: Any, *, optional: bool = False) -> None:
    if optional and f is None:
        return
    if not callable(f):
        fail(ArgumentError, f"{fn}: {param} must be a function (an @oc.cd function)"
                            f"{' or None' if optional else ''}, got {describe(f)}")


def check_choice(fn: str, param: str, x: Any, choices: tuple[str, ...]) -> None:
    if not isinstance(x, str) or x not in choices:
        fail(ArgumentError, f"{fn}: {param} must be one of {', '.join(map(repr, choices))}, "
                            f"got {describe(x)}")


def check_precision(fn: str, precision: Any) -> None:
    check_choice(fn, "precision", precision, PRECISIONS)


def _check_dtype(fn: str, param: str, dtype: np.dtype[Any]) -> None:
    if dtype.kind in "biuf":
        return
    why = ("complex values (the imaginary part would be dropped)" if dtype.kind == "c"
           else f"dtype {dtype} (numbers or bools are needed)")
    fail(RuntimeDataError, f"{fn}: {param} has {why}")


def _level_kind(x: Any) -> str:
    return "batch" if isinstance(x, BatchList) else "tuple" if isinstance(x, tuple) else "list"


def _nested_shape(fn: str, param: str, values: Any, path: str) -> tuple[int, ...]:
    """The shape of a nested literal; every level holds only numbers or only sequences of
    one kind (list, tuple or batch) and one shape."""
    if not isinstance(values, list | tuple):
        if is_real(values):
            return ()
        if isinstance(values, np.ndarray):
            fail(RuntimeDataError, f"{fn}: {param}{path} is a numpy array inside a nested "
                                   "list; pass one array (e.g. np.stack(...)) instead")
        hint = ("; ndarray is data only: stack tensors with oc.stack or oc.block_literal"
                if type(values).__name__ == "Tensor" else "")
        fail(RuntimeDataError, f"{fn}: {param}{path} must be a real number, got "
                               f"{describe(values)}{hint}")
    if not values:
        return (0,)
    kinds = {_level_kind(v) if isinstance(v, list | tuple) else "number" for v in values}
    if len(kinds) > 1:
        fail(RuntimeDataError, f"{fn}: {param}{path} mixes {' and '.join(sorted(kinds))} "
                               "at one level (a list is an output axis, a tuple an input "
                               "axis: each level must be one kind)")
    shapes = [_nested_shape(fn, param, v, f"{path}[{i}]") for i, v in enumerate(values)]
    for i, s in enumerate(shapes[1:], 1):
        if s != shapes[0]:
            fail(RuntimeDataError, f"{fn}: {param} is ragged: {param}{path}[0] has shape "
                                   f"{shapes[0]}, {param}{path}[{i}] has shape {s}")
    return (len(values), *shapes[0])


def _fast_nested_ok(values: list[Any] | tuple[Any, ...]) -> bool:
    """A nested literal NumPy reads as a real array with one axis per level, whose
    sequences are of one kind per level (checked without visiting the numbers)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            arr = np.asarray(values)
    except (ValueError, TypeError, Warning):
        return False
    if arr.dtype.kind not in "biuf" or arr.ndim != len(_first_path(values)):
        return False
    level: list[Any] = [values]
    for k in range(arr.ndim):
        if len({_level_kind(v) for v in level}) > 1:
            return False
        if k + 1 < arr.ndim:
            level = [c for v in level for c in v]
    return True


def check_data(fn: str, param: str, values: Any) -> None:
    """Host data: a real number, a numpy array of a numeric or bool dtype, or nested
    lists/tuples of real numbers, rectangular, each level one kind."""
    if isinstance(values, np.ndarray | np.generic):
        _check_dtype(fn, param, values.dtype)
    elif isinstance(values, list | tuple):
        if not _fast_nested_ok(values):
            _nested_shape(fn, param, values, "")  # the slow walk names the bad element
    elif not is_real(values):
        fail(RuntimeDataError, f"{fn}: {param} must be numbers (nested lists/tuples or a numpy "
                               f"array), got {describe(values)}")


def check_static_value(routine: str, name: str, value: Any) -> int:
    """A routine's static argument: an int that fits the generated code's int64."""
    if not is_int(value):
        fail(ArgumentError, f"routine {routine}: static argument '{name}' must be an int, got "
                            f"{describe(value)}")
    if not -_INT64_MAX - 1 <= int(value) <= _INT64_MAX:
        fail(ArgumentError, f"routine {routine}: static argument '{name}' = {value} does not fit "
                            "in a 64-bit integer")
    return int(value)


# ---- composite checks: one call per public entry point ----------------------------------

GRAD_SPECS = ("require", "prohibit", "if_needed")


def ndarray_args(values: Any, batch_axes: Any, input_axes: Any, label: Any,
                 grad_spec: Any) -> None:
    """`oc.ndarray(values, batch_axes=, input_axes=, label=, grad_spec=)`."""
    if values is None:
        fail(RuntimeDataError, "ndarray: values must be numbers (nested lists/tuples or a numpy "
                               "array), got None")
    check_data("ndarray", "values", values)
    check_count("ndarray", "batch_axes", batch_axes)
    check_count("ndarray", "input_axes", input_axes)
    check_str("ndarray", "label", label, optional=True)
    check_choice("ndarray", "grad_spec", grad_spec, GRAD_SPECS)
    if isinstance(values, list | tuple) and (batch_axes or input_axes):
        marked = {_level_kind(v) for v in _first_path(values)} - {"list"}
        if marked:
            fail(ShapeError, "ndarray: batch_axes/input_axes count numpy-style axes; this "
                             "literal already marks its axes with tuples (input) or batch(...): "
                             "use one way or the other")
    nd = np.ndim(values) if isinstance(values, np.ndarray | np.generic) else len(
        _first_path(values)) if isinstance(values, list | tuple) else 0
    if batch_axes + input_axes > nd:
        fail(ShapeError, f"ndarray: batch_axes={batch_axes} + input_axes={input_axes} exceed "
                         f"the {nd} axes of the data")


def _first_path(values: Any) -> list[Any]:
    """The nested sequences along the first elements (one per axis)."""
    out: list[Any] = []
    while isinstance(values, list | tuple):
        out.append(values)
        if not values:
            break
        values = values[0]
    return out


def number_args(x: Any, label: Any) -> None:
    """`oc.number(x, label=)`."""
    check_number("number", "x", x)
    check_str("number", "label", label, optional=True)


def leaf_args(fn: str, name: Any, output_dims: Any, input_dims: Any, batch_dims: Any,
              grad_spec: Any) -> None:
    """`oc.param` / `oc.term` / `oc.node`: a str name and valid dims."""
    check_str(fn, "name", name)
    check_dims(fn, "output_dims", output_dims)
    check_dims(fn, "input_dims", input_dims)
    check_dims(fn, "batch_dims", batch_dims)
    if grad_spec is not None:
        check_choice(fn, "grad_spec", grad_spec, GRAD_SPECS)


def param_init(init: Any) -> None:
    """`oc.param(init=)`: None, a number, host data, or a tensor."""
    if init is None or isinstance(init, Tensor):
        return
    if isinstance(init, list | tuple | np.ndarray | np.generic | complex) or is_real(init):
        check_data("param", "init", init)
        return
    fail(ArgumentError, "param: init must be None (random), a number, an array/nested list, "
                        f"an oc.Tensor or an oc.init strategy, got {describe(init)}")


def range_args(n: Any, label: Any) -> None:
    """`oc.range(n, label=)`."""
    if not is_int(n) or n < 0:
        fail(ShapeError, f"range: n must be a non-negative int, got {describe(n)}")
    check_str("range", "label", label, optional=True)


def spec_and_operands(fn: str, spec: Any, operands: tuple[Any, ...]) -> None:
    """`oc.einsum(spec, *tensors)` and friends: a str spec with as many operands as the
    spec names, each a tensor (or something that lifts to one: numbers, arrays)."""
    check_spec(fn, spec)
    try:
        arity = len(parse_spec(spec).operands)
    except SpecError as e:
        raise e.with_span(user_span()) from None
    if len(operands) != arity:
        fail(ShapeError, f'{fn}: the spec "{spec}" has {arity} operand(s), got '
                            f"{len(operands)} tensor(s)")
    for i, x in enumerate(operands):
        if isinstance(x, list | tuple) and any(isinstance(y, Tensor) for y in x):
            fail(ArgumentError, f"{fn}: operand {i + 1} is a {type(x).__name__} of tensors; "
                                f"pass the tensors themselves: {fn}(spec, a, b), or "
                                f"{fn}(spec, *tensors)")
        if not isinstance(x, Tensor | NodeRef) and not is_real(x) and \
                not isinstance(x, list | tuple | np.ndarray):
            fail(ArgumentError, f"{fn}: operand {i + 1} must be an oc.Tensor, got {describe(x)}")


def not_a_tensor(x: Any) -> NoReturn:
    """The error for an operand that cannot be lifted to a tensor."""
    fail(ArgumentError, f"cannot use {describe(x)} as a tensor operand (expected an oc.Tensor, "
                        "a real number, or nested lists / a numpy array of numbers)")


def op_builder_args(fn: str, op_asn: Any, grad_asn: Any, logic: Any, name: Any) -> None:
    """`oc.unary_op` / `oc.binary_op`."""
    check_callable(fn, "op_asn", op_asn)
    check_callable(fn, "grad_asn", grad_asn, optional=True)
    if not isinstance(logic, str):
        fail(ArgumentError, f'{fn}: logic must be ".", "@", "T" or an einsum spec string, got '
                            f"{describe(logic)}")
    from ..infer.logic import logic_of_string

    try:
        logic_of_string(logic)
    except SpecError as e:
        raise e.with_span(user_span()) from None
    check_str(fn, "name", name, optional=True)


def backend(name: Any, precision: Any = "float32", fn: str = "Context") -> Backend:
    """`oc.Context(backend, precision=)`, `oc.render`: the backend object, errors located
    and naming `fn`, the function called."""
    from ..backends import get_backend
    from ..errors import BackendError

    if not isinstance(name, str):
        fail(ArgumentError, f"backend must be a str ('c' or 'cuda'), got {describe(name)}")
    check_precision(fn, precision)
    try:
        return get_backend(name)
    except BackendError as e:
        raise e.with_span(user_span()) from None


def with_arity(name: str, n: int, build: Callable[..., Any]) -> Callable[..., Any]:
    """`build` as an operation taking exactly `n` tensors (positional only)."""
    def operation(*xs: Any, **kwargs: Any) -> Any:
        if kwargs or len(xs) != n:
            fail(ArgumentError, f"{name} takes {n} tensor(s), got {len(xs)} positional"
                                f"{' and keyword ' + ', '.join(kwargs) if kwargs else ''}")
        return build(*xs)

    operation.__name__ = operation.__qualname__ = name
    return operation


def set_args(x: Any, values: Any) -> None:
    """`ctx.set(tensor, values)`."""
    check_tensor("Context.set", "tensor", x, refs=True)
    if values is None:
        fail(RuntimeDataError, "Context.set: values must be numbers, got None")
    check_data("Context.set", "values", values)


def grad_args(loss: Any, wrt: Any) -> list[Any]:
    """`oc.value_and_grad(loss, wrt)`: a differentiable loss, and tensors it depends on
    that have gradients; returns `wrt` as a list (a bare tensor becomes a list of one)."""
    check_tensor("value_and_grad", "loss", loss)
    ws = check_tensors("value_and_grad", "wrt", wrt)
    if not loss.diff:
        fail(ArgumentError, f"value_and_grad: loss '{loss.label}' is not differentiable (it "
                            "depends on no parameter or grad_spec='require' tensor)")
    for i, w in enumerate(ws):
        if not w.diff:
            fail(ArgumentError, f"value_and_grad: wrt[{i}] '{w.label}' is not differentiable "
                                "(constants and terms have no gradient unless created with "
                                "grad_spec='require')")
    return ws  # a differentiable tensor the loss does not reach gets a zero gradient


def sgd_args(loss: Any, learning_rate: Any, momentum: Any, weight_decay: Any,
             nesterov: Any) -> None:
    """`oc.sgd_update(loss, learning_rate=, momentum=, weight_decay=, nesterov=)`."""
    check_tensor("sgd_update", "loss", loss)
    if not isinstance(learning_rate, Tensor):
        check_nonnegative("sgd_update", "learning_rate", learning_rate)
    for param, x in (("momentum", momentum), ("weight_decay", weight_decay)):
        check_nonnegative("sgd_update", param, x)
    if not isinstance(nesterov, bool | np.bool_):
        fail(ArgumentError, f"sgd_update: nesterov must be a bool, got {describe(nesterov)}")


def check_seed(seed: Any) -> None:
    """`oc.set_seed(seed)`: an int."""
    if not is_int(seed):
        fail(ArgumentError, f"set_seed: seed must be an int, got {describe(seed)}")
