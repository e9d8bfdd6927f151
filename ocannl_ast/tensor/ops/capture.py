"""Dimension captures and user shape constraints (issue 21 item 8; OCANNL's variable_ref
and `Shape.set_dim` / `set_equal`).

`capture(t, "k")` names the size a spec label of `t`'s einsum (or concat, or any op built
from a spec) is solved to: a `DimRef`, readable as a number (`.value`, `int()`) once the
shapes are inferred, and as a one-cell tensor (`.embed()`) at any time (resolved when the
graph's shapes close). `dim_of(t, kind, axis)` is the same for a tensor's axis.
`set_dim(ref, n)` and `set_equal(ref_a, ref_b)` add the constraints `= n` / `a = b` to
shape inference. Reading never closes a shape (as `tensor.shape`): that would freeze a
parameter before its uses are known.

Input: tensors, spec labels, sizes. Output: DimRefs, tensors, constraints.
"""

from __future__ import annotations

from typing import Any

from ...errors import ArgumentError, ShapeError, user_span
from ...infer.constraints import Origin, RowEq
from ...infer.logic import Einsum
from ...infer.spec_ast import Label, RowSpec
from ...infer.terms import Dim, DimTerm, Kind, Row
from ...records import record
from .. import validate
from ..node import Tensor
from .fetch import embed_dim
from .pointwise import lt, where

_KINDS = {"batch": Kind.BATCH, "output": Kind.OUTPUT, "input": Kind.INPUT}


@record
class _Axis:
    """Axis `axis` (negative: from the end) of row `kind` of `tensor`."""

    tensor: Tensor
    kind: str
    axis: int

    def size(self) -> int:
        row: tuple[int, ...] = getattr(self.tensor.shape, self.kind)
        return row[self.axis]

    def describe(self) -> str:
        return f"'{self.tensor.label}' {self.kind} axis {self.axis}"


class DimRef:
    """A solved dimension (OCANNL's variable_ref): a spec label's size or a tensor axis's.

    `exact` axes have the size itself (the result's axis of a label, or a tensor's own
    axis); `bounds` are operand axes of a label missing from the result, each the label's
    size or a broadcast 1: the size is their largest (closing takes the least upper bound).
    """

    def __init__(self, name: str, exact: _Axis | None, bounds: tuple[_Axis, ...]) -> None:
        self.name = name
        self._exact = exact
        self._bounds = bounds

    @property
    def axes(self) -> tuple[_Axis, ...]:
        return (self._exact,) if self._exact is not None else self._bounds

    @property
    def value(self) -> int:
        """The solved size; a ShapeError while the shapes it reads are not inferred yet
        (`oc.infer_shapes(t)`, `oc.eval`, or compiling them closes them)."""
        try:
            return max(a.size() for a in self.axes)
        except ShapeError as e:
            raise ShapeError(f"the size of {self!r} is not inferred yet: {e.message}",
                             user_span()) from None

    def __int__(self) -> int:
        return self.value

    def __index__(self) -> int:
        return self.value

    def __float__(self) -> float:
        return float(self.value)

    def embed(self) -> Tensor:
        """A one-cell tensor holding the size, resolved when the shapes close (as
        `oc.embed_dim`), so it can be used in the graph before inference."""
        parts = [embed_dim(a.tensor, a.kind, a.axis, label=f"dim_{self.name}")
                 for a in self.axes]
        out = parts[0]
        for p in parts[1:]:
            out = where(lt(out, p), p, out)
        return out

    def __repr__(self) -> str:
        where_ = ", ".join(a.describe() for a in self.axes)
        return f"DimRef({self.name!r} at {where_})"


def _occurrences(row: RowSpec | None, name: str) -> list[int]:
    """Axis indices of a plain `name` axis in a spec row (negative after a row variable)."""
    if row is None:
        return []
    out = [i for i, ax in enumerate(row.beg) if ax == Label(name)]
    n = len(row.end)
    return out + [j - n for j, ax in enumerate(row.end) if ax == Label(name)]


def capture(t: Tensor, label: str) -> DimRef:
    """The size spec label `label` of the operation that built `t` is solved to
    (OCANNL's capture list). Example: ``y = oc.einsum("ij=>i", x); j = oc.capture(y, "j")``;
    after ``oc.infer_shapes(y)``, ``j.value`` (or ``int(j)``) is x's second size, and
    ``j.embed()`` is a one-cell tensor holding it (usable before inference).
    """
    validate.check_tensor("capture", "t", t)
    validate.check_str("capture", "label", label)
    op = t.op
    if op is None or not isinstance(op.logic, Einsum):
        validate.fail(ArgumentError, f"capture: '{t.label}' is not built from an einsum spec "
                                     "(oc.einsum, einsum_max, concat, an op with spec=...): it "
                                     "has no labels to capture; use oc.dim_of(t, kind, axis)")
    spec = op.logic.spec
    exact: _Axis | None = None
    bounds: list[_Axis] = []
    for slot, (tensor, ss) in enumerate(zip([t, *op.operands], [spec.result, *spec.operands],
                                            strict=True)):
        for kind, rs in (("batch", ss.batch), ("output", ss.output), ("input", ss.input)):
            for ax in _occurrences(rs, label):
                if slot == 0 and exact is None:
                    exact = _Axis(tensor, kind, ax)
                elif slot > 0:
                    bounds.append(_Axis(tensor, kind, ax))
    if exact is None and not bounds:
        validate.fail(ArgumentError, f'capture: the spec "{spec.text}" of \'{t.label}\' has no '
                                     f"axis labeled '{label}' (a label inside a concatenation "
                                     "or an affine axis is not an axis of its own)")
    return DimRef(label, exact, tuple(bounds))


def dim_of(t: Tensor, kind: str = "output", axis: int = -1) -> DimRef:
    """The size of axis `axis` of row `kind` of `t`, as a DimRef (for `set_equal`)."""
    validate.check_tensor("dim_of", "t", t)
    validate.check_choice("dim_of", "kind", kind, tuple(_KINDS))
    if not validate.is_int(axis):
        validate.fail(ArgumentError, f"dim_of: axis must be an int, got {validate.describe(axis)}")
    return DimRef(f"{t.label}.{kind}[{axis}]", _Axis(t, kind, int(axis)), ())


def _pin(a: _Axis, d: DimTerm, why: str) -> RowEq:
    """`a`'s row has `d` at `a`'s position (its other axes and length left open)."""
    shape = a.tensor.shape
    solver = shape.solver
    pad = tuple(solver.fresh_dim() for _ in range(a.axis if a.axis >= 0 else -a.axis - 1))
    rest = solver.fresh_row()
    pattern = Row.open(rest, (*pad, d), ()) if a.axis >= 0 else Row.open(rest, (), (d, *pad))
    return RowEq(shape.row(_KINDS[a.kind]), pattern, Origin(why, (shape,), user_span()))


def _add(axes: list[_Axis], d: DimTerm, why: str) -> None:
    shapes = [a.tensor.shape for a in axes]
    solver = shapes[0].solver.join(*(s.solver for s in shapes[1:]))
    try:
        solver.add([_pin(a, d, why) for a in axes])
    except ShapeError as e:
        raise e.with_span(user_span()) from None


def _targets(ref: Any, fn: str) -> tuple[_Axis, ...]:
    if isinstance(ref, Tensor):
        return dim_of(ref).axes
    if not isinstance(ref, DimRef):
        validate.fail(ArgumentError, f"{fn}: expected an oc.DimRef (oc.capture, oc.dim_of) or "
                                     f"a tensor, got {validate.describe(ref)}")
    return ref.axes


def set_dim(ref: DimRef | Tensor, n: int) -> None:
    """Constrain a dimension to `n` (OCANNL's `Shape.set_dim`): a DimRef, or a tensor's
    last output axis. A label missing from its result pins each operand axis it names.
    A contradiction is a ShapeError now or when the shapes close."""
    if not validate.is_int(n) or int(n) < 0:
        validate.fail(ArgumentError, f"set_dim: n must be a non-negative int, got "
                                     f"{validate.describe(n)}")
    axes = list(_targets(ref, "set_dim"))
    _add(axes, Dim(int(n)), f"set_dim {axes[0].describe()} = {int(n)}")


def set_equal(a: DimRef | Tensor, b: DimRef | Tensor) -> None:
    """Constrain two dimensions to be equal (OCANNL's `Shape.set_equal`): DimRefs, or
    tensors (their last output axes)."""
    xs, ys = list(_targets(a, "set_equal")), list(_targets(b, "set_equal"))
    first = xs[0].tensor.shape
    d = first.solver.join(*(x.tensor.shape.solver for x in xs + ys)).fresh_dim("eq")
    _add(xs + ys, d, f"set_equal {xs[0].describe()} = {ys[0].describe()}")
