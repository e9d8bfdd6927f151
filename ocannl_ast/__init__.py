"""ocannl_ast: OCANNL's declarative shape and projection inference and compiled training
steps, for Python. See shared API.md for the public contract."""

from __future__ import annotations

import importlib as _importlib
from typing import TYPE_CHECKING, Any

import numpy as _np

from .errors import (
    ArgumentError,
    BackendError,
    CheckpointError,
    DistributedError,
    DslSyntaxError,
    OcannlError,
    RuntimeDataError,
    ShapeError,
    SpecError,
)
from .lowering.loop_ir import Precision as _Precision
from .rewrite import make_decorator as _make_decorator
from .tensor import operators as _operators  # noqa: F401  (installs Python operators)
from .tensor import validate as _validate
from .tensor.adam import adam_update
from .tensor.context import Context, default_context
from .tensor.context import as_code as _as_code
from .tensor.context import warn_if_trained_elsewhere as _warn_if_trained_elsewhere
from .tensor.escape import user_held as _user_held
from .tensor.leaves import batch, ndarray, node, number, param, term
from .tensor.node import Code, NodeRef, Tensor, no_grad
from .tensor.ops import (
    DimRef,
    add,
    batch_slice,
    binary_op,
    block_literal,
    capture,
    cast,
    concat,
    cos,
    dim_of,
    div,
    einsum,
    einsum3,
    einsum_max,
    eq,
    exp,
    fma,
    le,
    log,
    lt,
    mul,
    ne,
    neg,
    recip,
    relu,
    set_dim,
    set_equal,
    sin,
    sqrt,
    stack,
    static_index,
    stop_gradient,
    sub,
    tanh,
    transpose,
    unary_op,
    where,
)
from .tensor.ops.elementwise import (
    abs_,
    clamp,
    exp2,
    floor,
    fma_pointwise,
    log2,
    mod,
    recip_sqrt,
    round_,
    sigmoid,
    sign,
)
from .tensor.ops.fetch import (
    constant_fill,
    embed_dim,
    embed_self_id,
    embed_symbol,
    range_over_offsets,
)
from .tensor.ops.movement import range_
from .tensor.ops.pointwise import relu_gate
from .tensor.report import summary
from .tensor.retype import set_precision
from .tensor.schedules import advance_steps, lr_constant, lr_cosine, lr_warmup, step_counter
from .tensor.seed import set_seed
from .tensor.train import grad_update, sgd_update

if TYPE_CHECKING:
    from . import init, nn, testing
    from .tensor.routine import Routine

range = range_  # OCANNL's `range`; the builtin stays reachable as builtins.range
abs = abs_  # elementwise; the builtins stay reachable as builtins.abs / builtins.round
round = round_

op = _make_decorator("op", "ocannl_ast.tensor.dsl")
cd = _make_decorator("cd", "ocannl_ast.tensor.dsl")


def infer_shapes(*tensors: Tensor) -> None:
    """Close the shapes of these tensors (and everything they depend on) now."""
    from .tensor.pipeline import close_tensors

    _validate.check_tensors("infer_shapes", "tensors", tensors)
    close_tensors(tensors, dependencies=True)


def eval(tensor: Tensor, *, ctx: Context | None = None, backend: str = "c",
         precision: str | None = None) -> _np.ndarray:
    """Run the forward code and return the value (axes batch, output, input), in `ctx`, by
    default `oc.default_context(backend)`: params keep their (trained) values across calls;
    only params that context has not initialized yet are initialized."""
    _validate.check_tensor("eval", "tensor", tensor)
    run_in = _context(ctx, backend, precision)
    if ctx is None:
        _warn_if_trained_elsewhere(run_in, tensor, "eval")
    return run_in.eval(tensor)


def value_and_grad(loss: Tensor, wrt: list[Tensor] | Tensor, *, ctx: Context | None = None,
                   backend: str = "c", precision: str | None = None
                   ) -> tuple[_np.ndarray, list[_np.ndarray]]:
    """The loss value and its gradients with respect to `wrt` (params or other tensors),
    in `ctx` (by default `oc.default_context(backend)`), with its current params. A tensor
    the loss does not depend on gets a zero gradient; a bare tensor is read as a list of one.
    A loss of several cells is backpropagated as the sum of its cells (each seeded with 1,
    as OCANNL's backprop)."""
    wrt = _validate.grad_args(loss, wrt)
    c = _context(ctx, backend, precision)
    if ctx is None:
        _warn_if_trained_elsewhere(c, loss, "value_and_grad")
    with c.lock:
        reached = {t.id for t in loss.subgraph()}
        keep: list[Tensor | NodeRef] = [loss, *(w.grad for w in wrt if w.id in reached)]
        # content-named as any unnamed routine, its stem telling errors where it comes from
        c._compile([loss.forward_all(), loss.backprop], "value_and_grad", True, keep)()
        infer_shapes(*(w for w in wrt if w.id not in reached))
        grads = [c.get(w.grad) if w.id in reached else _np.zeros(w.dims(), c.dtype)
                 for w in wrt]
        return c.get(loss), grads


def _context(ctx: Context | None, backend: str, precision: str | None) -> Context:
    if ctx is None:
        return default_context(backend, precision=precision or "float32")
    if precision is not None and ctx.precision.value != precision:
        _validate.fail(ArgumentError, f"precision={precision!r} differs from the context's "
                                      f"{ctx.precision.value!r}: pass one or the other")
    return ctx


def render(code: Any, *, backend: str = "c", precision: str = "float32") -> str:
    """The C (or CUDA) source that compiling `code` would build; needs no GPU."""
    from .tensor.pipeline import Options
    from .tensor.pipeline import render as render_code

    render_backend = _validate.backend(backend, precision, "render")
    held = frozenset(_user_held())
    return render_code(_as_code(code), render_backend,
                       Options("routine", _Precision(precision), keep=held,
                               fusion_limit=render_backend.fusion_limit))


__all__ = [
    "ArgumentError",
    "BackendError",
    "CheckpointError",
    "Code",
    "Context",
    "DimRef",
    "DistributedError",
    "DslSyntaxError",
    "NodeRef",
    "OcannlError",
    "Routine",
    "RuntimeDataError",
    "ShapeError",
    "SpecError",
    "Tensor",
    "abs",
    "adam_update",
    "add",
    "advance_steps",
    "batch",
    "batch_slice",
    "binary_op",
    "block_literal",
    "capture",
    "cast",
    "cd",
    "clamp",
    "concat",
    "constant_fill",
    "cos",
    "default_context",
    "dim_of",
    "div",
    "einsum",
    "einsum3",
    "einsum_max",
    "embed_dim",
    "embed_self_id",
    "embed_symbol",
    "eq",
    "eval",
    "exp",
    "exp2",
    "floor",
    "fma",
    "fma_pointwise",
    "grad_update",
    "infer_shapes",
    "init",
    "le",
    "log",
    "log2",
    "lr_constant",
    "lr_cosine",
    "lr_warmup",
    "lt",
    "mod",
    "mul",
    "ndarray",
    "ne",
    "neg",
    "nn",
    "no_grad",
    "node",
    "number",
    "op",
    "param",
    "range",
    "range_over_offsets",
    "recip",
    "recip_sqrt",
    "relu",
    "relu_gate",
    "render",
    "round",
    "set_dim",
    "set_equal",
    "set_precision",
    "set_seed",
    "sgd_update",
    "sigmoid",
    "sign",
    "sin",
    "sqrt",
    "stack",
    "static_index",
    "step_counter",
    "stop_gradient",
    "sub",
    "summary",
    "tanh",
    "term",
    "testing",
    "transpose",
    "unary_op",
    "value_and_grad",
    "where",
]


def __getattr__(name: str) -> Any:
    """`oc.nn`, `oc.init`, `oc.testing` and `oc.Routine` (the compile pipeline's module)
    are imported on first use (keeps `import ocannl_ast` fast)."""
    if name in ("nn", "init", "testing"):
        return _importlib.import_module(f"{__name__}.{name}")
    if name == "Routine":
        from .tensor.routine import Routine

        return Routine
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), "nn", "init", "testing", "Routine"})
