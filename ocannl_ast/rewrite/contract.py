"""The builder contract: every `__oc__.NAME` call that rewritten @op/@cd code makes.

Rewritten code never imports `ocannl_ast.tensor`; it reaches its builders through the global
name `__oc__`, bound to the namespace handed to `make_decorator`. The vocabularies below
(accumulation operators, primitive names) are shared by the transformers and their checks.
"""

from __future__ import annotations

from typing import Any, Protocol

from ocannl_ast import vocabulary

#: Every accumulation operator string `accum(v, OP, e)` accepts ("=:" alone is assignment);
#: the same table the builders build from (`ocannl_ast.vocabulary`).
ACCUM_OPS: frozenset[str] = frozenset(vocabulary.ACCUM_OPS)

#: @cd reducers around a whole right-hand side: `v[...] = sum(e)` is `v =:+ e`.
REDUCER_ACCUM: dict[str, str] = {"sum": "=:+", "prod": "=:*", "max": "=:@^", "min": "=:@-"}

#: Reducers a named-index definition may use in @op, and the builder each one calls.
OP_REDUCER_BUILDER: dict[str, str] = {"sum": "einsum", "max": "einsum_max"}

#: Primitives callable by name in @cd, by arity (OCANNL's `Ir.Ops` vocabulary, as built).
UNARY_PRIMS: frozenset[str] = frozenset(vocabulary.UNARY)
BINARY_PRIMS: frozenset[str] = frozenset(vocabulary.BINARY)
TERNARY_PRIMS: frozenset[str] = frozenset(vocabulary.TERNARY)

#: Functions whose positional arguments are tensors in @op (numeric displays there are literals).
TENSOR_FUNCTIONS: frozenset[str] = (
    (UNARY_PRIMS - {"id"}) | TERNARY_PRIMS | {"einsum", "einsum_max", "concat"}
)

#: Keyword arguments that move from a primitive call or reducer onto the accum call.
ACCUM_KWARGS: tuple[str, ...] = ("logic", "projections")

#: Inline-declaration field shorthands (OCANNL record fields) and their builder kwargs.
FIELD_ALIASES: dict[str, str] = {
    "o": "output_dims", "output_dims": "output_dims",
    "i": "input_dims", "input_dims": "input_dims",
    "b": "batch_dims", "batch_dims": "batch_dims",
}

#: Name of the builder namespace global and of the @cd code collector local.
OC = "__oc__"
#: Name of the per-function span table global (`span=__oc_spans__[k]` on builder calls).
SPANS = "__oc_spans__"
CODE = "__oc_code"


class CodeCollector(Protocol):
    """What `__oc__.code_collector()` returns; one per call of a @cd function."""

    def add(self, assignment: Any) -> None:
        """Append one assignment built by `__oc__.accum(...)`."""

    def include(self, value: Any) -> None:
        """A call statement's value: keep it if it is code (a @cd result), ignore otherwise."""

    def result(self) -> Any:
        """The collected code, returned at every exit of the @cd function."""


class Builders(Protocol):
    """The namespace bound to `__oc__` (signatures exactly as rewritten code calls them).

    The calls named in `transform_base.SPANNED_BUILDERS` also get `span=`: the user's
    source span of the statement (or declaration) they build, or None for the library's
    own dialect functions; errors raised while building carry it.
    """

    def param(self, name: str, *, span: Any = None, **fields: Any) -> Any:
        """@op `{w := init, o := [h], ...}`: fields init/output_dims/input_dims/batch_dims/..."""

    def node(self, name: str, *, span: Any = None, **fields: Any) -> Any:
        """@cd `{x}[...]`: a non-differentiable node; fields incl. `slot="rhs1"` by naming."""

    def literal(self, values: Any) -> Any:
        """A numeric display: list = output axis, tuple = input axis, batch(...) = batch."""

    def batch(self, values: Any) -> Any:
        """Marks a batch axis inside a literal (`batch([...])` in the dialect)."""

    def block_literal(self, values: Any) -> Any:
        """A display whose leaves may be tensors: stacks them (list = output axis, tuple =
        input axis, batch(...) = batch axis); all numbers: a literal."""

    def einsum(self, spec: str, *operands: Any, span: Any = None) -> Any:
        """Named-index definition with `sum[...]` or no reducer (any arity)."""

    def einsum_max(self, spec: str, *operands: Any, span: Any = None) -> Any:
        """Named-index definition with `max[...]` (one operand, or two added: tropical)."""

    def concat(self, spec: str, *operands: Any, span: Any = None) -> Any:
        """Named-index definition `y[a ^ b] = (x[a], z[b])`."""

    def spec_scope(self, text: str, thunks: Any) -> str:
        """A spec literal whose affine coefficients/offsets name Python ints (`affine_scope`)."""

    def code_collector(self) -> CodeCollector:
        """The prologue of every @cd function."""

    def accum(self, target: Any, op: str, rhs: Any, *, span: Any = None,
              **kwargs: Any) -> Any:
        """One assignment; kwargs are `logic=` and/or `projections=` when given."""

    def prim(self, name: str, *args: Any) -> Any:
        """The outermost primitive of an assignment's right-hand side (`"id"` for none)."""

    def grad_of(self, tensor: Any) -> Any:
        """`p.grad` in a @cd body."""

    def value_of(self, tensor: Any) -> Any:
        """`p.value` in a @cd body."""

    def rebound(self, value: Any, name: str, *, span: Any = None) -> Any:
        """`name = value` in @cd whose value nothing reads: `value`, after a warning at
        `span` when it is a tensor expression (the update the user meant is lost)."""
