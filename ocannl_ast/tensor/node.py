"""The graph node and its small records, the leaf of `tensor/` (it imports no sibling):
`Tensor`, `NodeRef`, `OpRecord`, `StaticIndex`, assignment items, `Code`, and the op_asn /
grad_asn calling convention (seed 000). Names come from the leaf `ocannl_ast.naming`.
Input: built by ops, leaves and builders.
Output: Code for the compile pipeline (`tensor.pipeline`)."""

from __future__ import annotations

import contextlib
import enum
import functools
import inspect
import itertools
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import field
from typing import Any, assert_never

from .. import naming
from ..errors import ArgumentError, ShapeError, Span, user_span
from ..infer.logic import BatchSlice, Logic
from ..infer.padding import Margins, padded_dims
from ..infer.shape import Shape
from ..lowering import assignments as A
from ..lowering.loop_ir import BinOp, Buffer, Precision, Symbol, VecUnOp
from ..records import record
from ..truthiness import abs_error, truth_value_error

_ids = itertools.count(1)

#: while an op_asn / grad_asn runs: the operation whose projections are in context
current_record: ContextVar[OpRecord | None] = ContextVar("current_record", default=None)
_no_grad: ContextVar[bool] = ContextVar("no_grad", default=False)


class Init(enum.Enum):
    """How a tensor's value comes about."""

    COMPUTED = "computed"  #: by its forward code
    PARAM = "param"  #: held out, initialized once per context; trainable
    CONST = "const"  #: held out, initialized once per context from data; not trainable
    NODE = "node"  #: persistent non-differentiable node written by @cd code (zeros at first)
    ALIAS = "alias"  #: a view of another tensor's value or grad node (inside @cd code)


class NodeKind(enum.StrEnum):
    """Which of a tensor's two nodes (OCANNL's `value` and `diff.grad`) a reference names."""

    VALUE = "value"
    GRAD = "grad"


class AccumForm(enum.StrEnum):
    """The shape of an `AccumItem`'s assignment."""

    ACCUM = "accum"  #: `lhs <accum> expr(rhs...)`
    BLOCK = "block"  #: rhs are sources, one live per position (seed 004)
    REV_SIDES = "rev_sides"  #: lhs is READ and scattered to the rhs (the block's sources)


def node_owner(tensor: Tensor, kind: NodeKind) -> tuple[Tensor, NodeKind]:
    """The tensor whose buffer holds this node, and which of its two: an alias views its
    target's node (its `value` is the target's viewed node)."""
    while (alias := tensor.alias_of) is not None:
        tensor, kind = alias.tensor, (alias.kind if kind is NodeKind.VALUE else kind)
    return tensor, kind


def buffer_id(tensor: Tensor, kind: NodeKind = NodeKind.VALUE) -> int:
    """The id of the buffer holding a tensor's value or grad (aliases resolved): the one
    place spelling the encoding `2 * id + is_grad`. Example: ``buffer_id(t, NodeKind.GRAD)``."""
    owner, kind = node_owner(tensor, kind)
    return 2 * owner.id + (kind is NodeKind.GRAD)


def buffer_ids(tensor: Tensor) -> tuple[int, int]:
    """The ids of a tensor's value and grad buffers."""
    return buffer_id(tensor, NodeKind.VALUE), buffer_id(tensor, NodeKind.GRAD)


@contextlib.contextmanager
def no_grad() -> Iterator[None]:
    """Tensors built inside are not differentiable (used for @cd sub-expressions)."""
    tok = _no_grad.set(True)
    try:
        yield
    finally:
        _no_grad.reset(tok)


def grad_disabled() -> bool:
    """Whether tensors built now are non-differentiable (inside `no_grad`)."""
    return _no_grad.get()


class Tensor:
    """A tensor expression node. Build with operators, `oc.einsum`, `oc.param`, ...

    Example: ``t = oc.ndarray([1.0, 2.0]) * 3.0; oc.infer_shapes(t); t.shape.output == (2,)``.
    """

    __array_priority__ = 1000  # NumPy scalars defer to our operators
    #: the tensor at a runtime batch index (OCANNL `@|`); installed by `tensor.operators`
    batch_slice: Callable[[Any], Tensor]

    def __init__(self, label: str, shape: Shape, init: Init, *, diff: bool = False,
                 name: str | None = None) -> None:
        self.id = next(_ids)
        self.label = label
        self._name = name if name is not None else naming.auto(label)
        self.shape = shape
        self.init = init
        self.diff = diff
        self.op: OpRecord | None = None
        self.operands: list[Tensor] = []
        self.grad_asn: Callable[..., Code] | None = None
        self.slot: int | None = None  #: slot tag of @cd intermediates (see NodeRef.slot)
        self.alias_of: NodeRef | None = None
        self.init_value: Any = None  #: PARAM/CONST: number, ndarray or Tensor
        self.forward_root = True  #: not yet embedded in a consumer's forward code
        self._fwd: dict[int, Tensor] = {}  #: tensors whose own code forms the forward code
        self._own = Code()  #: this tensor's own op_asn code (without embedded children)
        self.init_code = Code()  #: PARAM/CONST with a tensor-expression init: the copy
        self._grad_code: Code | None = None
        self.uint4x32 = False  #: cells are 128-bit threefry words (seed 001), not numbers
        #: its own storage precision (`tensor.precisions`); None: the context's
        self.precision: Precision | None = None
        #: params: the stable identity keying the default random init (unique name, 0)
        self.init_key: tuple[str, int] | None = None

    @property
    def name(self) -> str:
        """Unique, stable, hierarchical name (`ocannl_ast.naming`): "mlp.linear_1.w" for a
        parameter, "mlp.linear_1.w/adam_m" for its optimizer state; the checkpoint key."""
        return self._name

    # ---- nodes ---------------------------------------------------------------------

    def dims(self) -> tuple[int, ...]:
        return self.shape.dims()

    def layout_rows(self) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        return self.shape.layout_rows()

    def buffer(self, kind: NodeKind = NodeKind.VALUE,
               layout: Mapping[int, Margins] | None = None) -> Buffer:
        """The buffer of this tensor's value or grad node, its dims widened by its margins
        in `layout` (buffer id -> margins, as `pipeline.derive_projections` decides)."""
        owner, kind = node_owner(self, kind)
        if kind is NodeKind.GRAD and not owner.diff:
            raise ArgumentError(f"tensor '{owner.label}' is not differentiable: it has no grad",
                                user_span())
        bid = buffer_id(owner, kind)
        return Buffer(bid, naming.identifier(owner.label) + ("_grad" if kind is NodeKind.GRAD else ""),
                      padded_dims(owner.dims(), layout.get(bid) or None if layout else None),
                      owner.uint4x32, precision=None if owner.uint4x32 else owner.precision)

    def base(self) -> Tensor:
        """The tensor owning the buffers (an alias's target)."""
        return self.alias_of.tensor.base() if self.alias_of is not None else self

    @property
    def value(self) -> NodeRef:
        return NodeRef(self, NodeKind.VALUE, self.slot)

    @property
    def grad(self) -> NodeRef:
        return NodeRef(self, NodeKind.GRAD, self.slot)

    @property
    def is_held_out(self) -> bool:
        return self.init in (Init.PARAM, Init.CONST, Init.NODE)

    # ---- code ----------------------------------------------------------------------

    @property
    def forward(self) -> Code:
        """Compute this tensor and every computed tensor it depends on, each once, in
        creation order, also those another consumer embedded first (OCANNL embeds a child
        in its first consumer only): no routine reads a value another one left behind."""
        return self.forward_all()

    def embed(self) -> dict[int, Tensor]:
        """Tensors whose code a consumer embeds: all of them the first time, then none."""
        if not self.forward_root or self.is_held_out:
            return {}
        self.forward_root = False
        return self._fwd

    def forward_all(self) -> Code:
        """Forward code of every computed tensor of the subgraph, each once, in creation
        order, whether or not another consumer embedded it (used by `oc.eval`)."""
        return concat(t._own for t in self.subgraph() if t.init is Init.COMPUTED)

    def grad_code(self) -> Code:
        """This operation's gradient assignments (its grad_asn), built once."""
        if self._grad_code is None:
            if self.grad_asn is None or self.op is None or not self.diff:
                self._grad_code = Code()
            else:
                self._grad_code = call_asn(self.grad_asn, self.op)
        return self._grad_code

    def subgraph(self) -> list[Tensor]:
        """Every tensor this one depends on through its operands (itself included), in
        creation order. A param's tensor initializer is not part of it: it runs once, in
        the init routine, so its tensors get no forward code, no gradient, no update."""
        seen: dict[int, Tensor] = {}
        stack = [self]
        while stack:
            t = stack.pop()
            if t.id in seen:
                continue
            seen[t.id] = t
            stack.extend(t.operands)
        return sorted(seen.values(), key=lambda t: t.id)

    @property
    def backprop(self) -> Code:
        """Zero the grads, seed this tensor's grad with 1, run the grad_asn of every tensor a
        gradient reaches (this one, then the differentiable operands of each reached one
        with a grad_asn) in reverse creation order (a reverse topological order). A tensor
        read only through `stop_gradient` keeps a zero grad and its grad_asn is not run: it
        would add zero times its local derivative (NaN where that is infinite)."""
        if not self.diff:
            raise ArgumentError(f"tensor '{self.label}' is not differentiable: nothing to "
                                "backpropagate", user_span())
        diff = [t for t in self.subgraph() if t.diff]
        zero = Code(tuple(FetchItem(NodeRef(t, NodeKind.GRAD), A.ConstantFill(0.0))
                          for t in diff if t is not self))
        seed = Code((FetchItem(NodeRef(self, NodeKind.GRAD), A.ConstantFill(1.0)),))
        live, reached = {self.id}, []
        for t in reversed(diff):  # consumers before their operands
            if t.id in live and t.grad_asn is not None and t.op is not None:
                live.update(o.id for o in t.op.operands if o.diff)
                reached.append(t)
        grads = concat(t.grad_code() for t in reached)
        return zero + seed + grads

    def params(self) -> list[Tensor]:
        """The trainable parameters this tensor depends on, in creation order."""
        return [t for t in self.subgraph() if t.init is Init.PARAM]

    def __repr__(self) -> str:
        return f"Tensor({self.label}#{self.id}: {self.shape.describe()})"

    def __bool__(self) -> bool:
        raise truth_value_error("a Tensor", "read its values with oc.eval(t)")

    def __abs__(self) -> Tensor:
        raise abs_error(f"the tensor '{self.label}'")

    def __hash__(self) -> int:
        return self.id


# ---- small records -----------------------------------------------------------------------

@record(eq=False)
class NodeRef:
    """A tensor's value or grad array as used in assignments; `slot` is its position in the
    operation whose projections are in context (0 = result, 1.. = operands)."""

    tensor: Tensor
    kind: NodeKind
    slot: int | None = None

    @property
    def grad(self) -> NodeRef:
        return NodeRef(self.tensor, NodeKind.GRAD, self.slot)

    @property
    def value(self) -> NodeRef:
        return NodeRef(self.tensor, NodeKind.VALUE, self.slot)

    def buffer(self, layout: Mapping[int, Margins] | None = None) -> Buffer:
        return self.tensor.buffer(self.kind, layout)

    def __repr__(self) -> str:
        return f"{self.tensor.label}.{self.kind}"

    def describe(self) -> str:
        """How the user names this node: its slot name (`v1`, `g`) or `label.value`."""
        if self.slot is None:
            return f"'{self!r}'"
        head = "g" if self.kind is NodeKind.GRAD else "v"
        return f"slot '{head}{self.slot or ''}' ({self!r})"

    def __bool__(self) -> bool:
        raise truth_value_error(f"the node reference {self.describe()}")

    def __abs__(self) -> Any:
        raise abs_error(f"the node reference {self.describe()}")


class OpRecord:
    """One operation: its logic, result and operands. Its projections are derived by the
    pipeline's projections pass once the shapes are closed (the caller may keep them: they
    never change)."""

    def __init__(self, logic: Logic, result: Tensor, operands: list[Tensor], name: str,
                 span: Span | None) -> None:
        self.logic = logic
        self.result = result
        self.operands = operands
        self.name = name
        self.span = span


@record
class StaticIndex:
    """A routine's static integer argument (a batch number, a step), given at each call."""

    symbol: Symbol

    @property
    def name(self) -> str:
        return self.symbol.name

    def __bool__(self) -> bool:
        raise truth_value_error(f"the static index '{self.name}' (given at each call)")

    def __abs__(self) -> Any:
        raise abs_error(f"the static index '{self.name}'")


class BatchList(list):  # type: ignore[type-arg]
    """Marks a literal's list level as a batch axis (`batch([...])`, OCANNL `[| ... |]`)."""


@record
class AccumItem:
    """`lhs <accum> expr(rhs...)` with projections from an OpRecord (a slot view) or derived
    from its own OpRecord (producer regime)."""

    lhs: NodeRef
    accum: BinOp
    initialize_neutral: bool
    expr: A.RhsExpr
    rhs: tuple[NodeRef, ...]
    record: OpRecord  #: whose projections this assignment reads
    slots: tuple[int, ...] | None  #: lhs slot then rhs slots; None: the record's own order
    label: str = ""
    form: AccumForm = AccumForm.ACCUM  #: a plain assignment, a block or its rev_sides


@record
class EmbedDim:
    """A fetch resolved after shape closing: the size of `tensor`'s axis `axis` of row
    `kind` ("batch", "output" or "input"), as a constant fill (`oc.embed_dim`)."""

    tensor: Tensor
    kind: str
    axis: int
    span: Span | None = None  #: where oc.embed_dim was called

    def resolve(self) -> A.ConstantFill:
        row = getattr(self.tensor.shape, self.kind)
        if not -len(row) <= self.axis < len(row):
            raise ShapeError(f"embed_dim: '{self.tensor.label}' has {len(row)} {self.kind} "
                             f"axes (shape {self.tensor.shape}), no axis {self.axis}",
                             self.span or user_span())
        return A.ConstantFill(float(row[self.axis]))


@record
class FetchItem:
    node: NodeRef
    op: A.FetchOp | EmbedDim


@record
class CheckItem:
    """Fail the routine unless 0 <= symbol < the leading batch dim of `tensor`."""

    symbol: Symbol
    tensor: Tensor
    code: int


@record
class VecItem:
    """A vectorized operation (seed 001): each uint4x32 cell of `rhs` writes `length`
    consecutive cells of `lhs` (its layout order)."""

    lhs: NodeRef
    op: VecUnOp
    rhs: NodeRef
    length: int
    label: str = ""


Item = AccumItem | FetchItem | CheckItem | VecItem


@record
class Code:
    """A sequence of assignment items (what `@cd` functions return and routines compile)."""

    items: tuple[Item, ...] = field(default=())

    def __add__(self, other: Code) -> Code:
        return Code(self.items + other.items)

    def __iter__(self) -> Iterator[Item]:
        return iter(self.items)

    def __len__(self) -> int:
        return len(self.items)

    def tensors(self) -> list[Tensor]:
        """Every tensor the code touches, each once, in order of appearance; a batch
        slice touches the tensor it views too (`tensor.views`)."""
        seen: dict[int, Tensor] = {}
        for it in self.items:
            for ref in item_refs(it):
                t: Tensor | None = ref.tensor
                while t is not None and seen.setdefault(t.id, t) is t:
                    sliced = t.op is not None and isinstance(t.op.logic, BatchSlice)
                    t = t.op.operands[0] if sliced and t.op is not None else None
        return list(seen.values())


def concat(codes: Iterable[Code]) -> Code:
    out: list[Item] = []  # (not `+=` on a tuple: quadratic over an optimizer's many codes)
    for c in codes:
        out.extend(c.items)
    return Code(tuple(out))


def item_refs(it: Item) -> tuple[NodeRef, ...]:
    match it:
        case AccumItem(lhs=lhs, rhs=rhs):
            return (lhs, *rhs)
        case FetchItem(node=n):
            return (n,)
        case CheckItem(tensor=t):
            return (NodeRef(t, NodeKind.VALUE),)
        case VecItem(lhs=lhs, rhs=rhs):
            return (lhs, rhs)
        case _:
            assert_never(it)


def forward_code(tensors: dict[int, Tensor]) -> Code:
    """The own code of these tensors in creation order."""
    return concat(tensors[i]._own for i in sorted(tensors))


# ---- the op_asn / grad_asn calling convention ---------------------------------------------

_ASN_PARAMS: dict[Callable[..., Any], tuple[str, ...]] = {}

_SLOT_NAME = re.compile(r"(t|v|g|lhs|rhs)([1-9][0-9]*)?")


@functools.lru_cache(maxsize=256)
def slot_of_name(name: str) -> tuple[int, NodeKind] | None:
    """The slot and node kind an op_asn / grad_asn parameter names: `t v lhs` / `g` are
    the result's value / grad, `tK vK rhsK` / `gK` operand K's (any K >= 1)."""
    m = _SLOT_NAME.fullmatch(name)
    if m is None:
        return None
    head, num = m.group(1), m.group(2)
    if head == "lhs":
        return (0, NodeKind.VALUE) if num is None else None
    if head == "rhs" and num is None:
        return None
    return int(num or 0), NodeKind.GRAD if head == "g" else NodeKind.VALUE


def call_asn(fn: Callable[..., Any], rec: OpRecord) -> Code:
    """Call an op_asn / grad_asn with the slot arguments it names (seed 000)."""
    if fn not in _ASN_PARAMS:
        _ASN_PARAMS[fn] = tuple(inspect.signature(fn).parameters)
    tensors = [rec.result, *rec.operands]
    kwargs: dict[str, Any] = {}
    for name in _ASN_PARAMS[fn]:
        if name == "projections":
            kwargs[name] = rec
        elif (sk := slot_of_name(name)) is not None:
            slot, kind = sk
            if slot >= len(tensors):
                raise ArgumentError(f"'{name}' names operand {slot} of '{rec.name}', which has "
                                    f"{len(rec.operands)}", user_span())
            t = tensors[slot]
            kwargs[name] = NodeRef(t, kind, slot) if kind is NodeKind.VALUE or t.diff else None
        else:
            raise ArgumentError(f"parameter '{name}' of {getattr(fn, '__name__', fn)} is not a "
                                "slot name (t v g lhs, t1 v1 g1 rhs1, ..., projections)",
                                user_span())
    tok = current_record.set(rec)
    ng = _no_grad.set(True)  # (`with no_grad():`, inlined: twice per operation built)
    try:
        out = fn(**kwargs)
    finally:
        _no_grad.reset(ng)
        current_record.reset(tok)
    return out if isinstance(out, Code) else Code()
