"""Assignment builders: what `@cd` code (and the library's own op_asn / grad_asn) calls to
produce Code: `accum(lhs, "=:+", prim("mul", a, b), logic=..., projections=...)`.

Input: node references, tensors, numbers, primitive trees. Output: `tensor.node.Code`.
"""

from __future__ import annotations

from typing import Any

from .. import vocabulary
from ..errors import ArgumentError, DslSyntaxError, ShapeError, SpecError, user_span
from ..infer.constraints import Origin
from ..infer.logic import (
    Logic,
    Pointwise,
    logic_name,
    logic_of_string,
    shape_constraints,
)
from ..lowering import assignments as A
from ..records import record
from ..truthiness import abs_error, truth_value_error
from ..vocabulary import BinOp, TernOp, UnOp
from .node import (
    AccumForm,
    AccumItem,
    Code,
    NodeKind,
    NodeRef,
    OpRecord,
    StaticIndex,
    Tensor,
    concat,
    current_record,
    forward_code,
)

#: accumulation operator -> (accumulator, initialize_neutral); primitive spellings
ACCUM_OPS = vocabulary.ACCUM_OPS
PRIMS = vocabulary.PRIMS


@record
class PrimCall:
    """A primitive over arguments (node refs, tensors, numbers or nested PrimCalls)."""

    op: UnOp | BinOp | TernOp
    args: tuple[Any, ...]

    def __bool__(self) -> bool:
        raise truth_value_error(f"the elementwise expression {self.describe()}")

    def __abs__(self) -> Any:
        raise abs_error(f"the elementwise expression {self.describe()}")

    def describe(self) -> str:
        """The primitive's name and arguments, for messages: `lt(v1, 0.0)`."""
        def arg(a: Any) -> str:
            if isinstance(a, PrimCall):
                return a.describe()
            if isinstance(a, NodeRef) and a.slot is not None:
                return f"{'g' if a.kind is NodeKind.GRAD else 'v'}{a.slot or ''}"
            return repr(a)
        return f"{self.op.value}({', '.join(arg(a) for a in self.args)})"


def prim(name: str, *args: Any) -> PrimCall:
    """A primitive application for `accum`. Example: ``prim("add", v1, v2)``."""
    op = PRIMS.get(name)
    if op is None:
        raise DslSyntaxError(f"unknown primitive '{name}' (known: {', '.join(sorted(PRIMS))})",
                             user_span())
    arity = vocabulary.arity(op)
    if len(args) != arity:
        raise DslSyntaxError(f"primitive '{name}' takes {arity} argument(s), got {len(args)}",
                             user_span())
    return PrimCall(op, args)


def _leaf_ref(x: Any) -> NodeRef:
    if isinstance(x, NodeRef):
        return x
    if isinstance(x, Tensor):
        return NodeRef(x, NodeKind.VALUE, x.slot)
    raise ArgumentError(f"cannot use {type(x).__name__} {x!r} in an assignment", user_span())


class _Leaves:
    """The distinct operands of a primitive tree, in order, and the expression over them.
    With `each` every read is an operand of its own: under an einsum or compose logic the
    same tensor read twice (`sum(a @ a)`) is two operands, indexed differently."""

    def __init__(self, each: bool = False) -> None:
        self.refs: list[NodeRef] = []
        self.each = each

    def expr(self, x: Any) -> A.RhsExpr:
        if isinstance(x, PrimCall):
            args = []  # (a loop, not a generator: hot)
            for a in x.args:
                args.append(self.expr(a))
            return A.Prim(x.op, tuple(args))
        if isinstance(x, bool | int | float):
            return A.Lit(float(x))
        if isinstance(x, StaticIndex):
            return A.StaticValue(x.symbol)
        ref = _leaf_ref(x)
        for k, r in enumerate(self.refs):
            if (r.tensor is ref.tensor and r.kind == ref.kind) and r.slot == ref.slot \
                    and not self.each:
                return A.Arg(k)
        self.refs.append(ref)
        return A.Arg(len(self.refs) - 1)


def _operand_grad(ref: NodeRef) -> bool:
    """Whether `ref` is an operand's gradient slot (g1, g2, ...) of the operation in context."""
    return ref.kind is NodeKind.GRAD and ref.slot is not None and ref.slot >= 1


#: binary operators whose compose (`@`) reading OCANNL rejects (gh-ocannl-192)
_NOT_COMPOSABLE = {BinOp.DIV: "/", BinOp.POW: "**"}


def accum(lhs: Any, op: str, rhs: Any, *, logic: str | None = None,
          projections: OpRecord | None = None, label: str = "") -> Code:
    """One assignment `lhs <op> rhs` (OCANNL's `=:+`, `=+`, ...). With `projections` (an
    operation in context) the tensors are indexed by their slots; otherwise the
    assignment contributes its own shape constraints with `logic` (default pointwise).

    Example: ``accum(t, "=:+", prim("mul", a, b), logic="ij;jk=>ik")``.
    """
    if op not in ACCUM_OPS:
        raise DslSyntaxError(f"unknown accumulation operator '{op}'", user_span())
    acc, init = ACCUM_OPS[op]
    if lhs is None:
        return Code()  # a slot's grad that does not exist (operand is not differentiable)
    target = _leaf_ref(lhs)
    if target.kind is NodeKind.GRAD and not target.tensor.diff:
        return Code()  # a gradient nobody needs (operand is not differentiable)
    if init and _operand_grad(target) and current_record.get() is not None:
        raise DslSyntaxError(
            f"g{target.slot} is the gradient of operand {target.slot}: every reader of that "
            f"operand adds its share into it, so a gradient function accumulates "
            f"(`g{target.slot} += ...`); setting it (`{op}`) would overwrite the other "
            "readers' shares", user_span())
    if not isinstance(rhs, PrimCall):
        rhs = PrimCall(UnOp.IDENTITY, (rhs,))
    if logic == "@" and rhs.op in _NOT_COMPOSABLE:
        raise DslSyntaxError(
            f"compose logic '@' multiplies matching axes and sums the rest: it does not apply "
            f"to '{_NOT_COMPOSABLE[rhs.op]}' (as in OCANNL); write the product with '*', or "
            "give an einsum spec as logic=", user_span())
    leaves = _Leaves(each=projections is None and logic is not None and
                     (logic == "@" or ";" in logic))
    expr = leaves.expr(rhs)
    ctx = current_record.get()
    embedded: dict[int, Tensor] = {}
    for r in leaves.refs:
        t = r.tensor
        if r.kind is NodeKind.VALUE and (
                ctx is None or (t is not ctx.result and all(t is not o for o in ctx.operands))):
            embedded.update(t.embed())
    pre = forward_code(embedded) if embedded else Code()
    if projections is not None and logic is None:
        slots = tuple(-1 if r.slot is None else r.slot for r in (target, *leaves.refs))
        item = AccumItem(target, acc, init, expr, tuple(leaves.refs), projections, slots, label)
        return pre + Code((item,))
    rec = _producer_record(target, leaves.refs, logic, op)
    return pre + Code((AccumItem(target, acc, init, expr, tuple(leaves.refs), rec, None, label),))


def _producer_record(target: NodeRef, refs: list[NodeRef], logic: str | None,
                     op: str) -> OpRecord:
    """A standalone assignment contributes its own constraints (seed 000, producer regime)."""
    span = user_span()
    try:
        lg: Logic = logic_of_string(logic) if logic is not None else Pointwise()
    except SpecError as e:
        raise e.with_span(span) from None
    operands = [r.tensor for r in refs]
    name = f"assignment {op}"
    shapes = [target.tensor.shape, *[t.shape for t in operands]]
    origin = Origin(f"{name} ({logic_name(lg)})", tuple(shapes), span)
    solver = target.tensor.shape.solver
    try:
        solver.add(shape_constraints(lg, solver, target.tensor.shape,
                                     [t.shape for t in operands], origin))
    except ShapeError as e:
        raise e.with_span(span) from None
    return OpRecord(lg, target.tensor, operands, name, span)


class CodeCollector:
    """Collects the assignments of a @cd body in order."""

    def __init__(self) -> None:
        self._codes: list[Code] = []

    def add(self, code: Code | None) -> None:
        if code is not None:
            self._codes.append(code)

    def result(self) -> Code:
        return concat(self._codes)


def code_collector() -> CodeCollector:
    return CodeCollector()


def grad_of(x: Any) -> NodeRef:
    """The grad node of a tensor or node reference (`p.grad` in @cd code)."""
    ref = _leaf_ref(x)
    return NodeRef(ref.tensor, NodeKind.GRAD, ref.slot)


def value_of(x: Any) -> NodeRef:
    ref = _leaf_ref(x)
    return NodeRef(ref.tensor, NodeKind.VALUE, ref.slot)


def block(lhs: NodeRef, op: str, sources: list[NodeRef], projections: OpRecord,
          label: str = "") -> Code:
    """A Block (seed 004): many sources, one target; per position the one live source
    (by the projections' concatenated axes) is accumulated into `lhs`."""
    acc, init = ACCUM_OPS[op]
    slots = tuple(-1 if r.slot is None else r.slot for r in (lhs, *sources))
    return Code((AccumItem(lhs, acc, init, A.Arg(0), tuple(sources), projections, slots,
                           label, AccumForm.BLOCK),))


def rev_sides(src: NodeRef, op: str, targets: list[NodeRef | None], projections: OpRecord,
              label: str = "") -> Code:
    """Rev_sides (seed 004): the Block of the same projections with its sides swapped:
    `src` (the block's target) is read and scattered to `targets` (the block's sources).
    A target that needs no gradient (None, or a non-differentiable grad) is dropped: its
    slice of `src` is simply not scattered anywhere."""
    acc, init = ACCUM_OPS[op]
    if init:
        raise DslSyntaxError("rev_sides accumulates into its targets: use '=+'", user_span())
    live = [t for t in targets if t is not None and (t.kind is not NodeKind.GRAD or t.tensor.diff)]
    if not live:
        return Code()
    slots = tuple(-1 if r.slot is None else r.slot for r in (src, *live))
    return Code((AccumItem(src, acc, False, A.Arg(0), tuple(live), projections, slots, label,
                           AccumForm.REV_SIDES),))
