"""Batch slices as views (OCANNL 0.7's `x @| i`): the value of `x.batch_slice(i)` has no
buffer of its own; its cells are row `i` of `x`'s buffer (`loop_ir.View`), so writes
through it reach `x` and reads see `x`'s current values. A slice whose own layout is padded
(a padded reader widened its margins) cannot be one and stays a copy: reading it is
fine, writing it is a located error. A viewing slice's own forward copy is dropped, unless
the caller keeps the slice (`ctx.get`): then it fills a snapshot array. Input: node
references, the buffers' layout, the kept buffers. Output: buffers for the assignments IR
(`pipeline.to_assignments`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ..errors import DslSyntaxError
from ..infer.logic import BatchSlice
from ..infer.padding import Margins
from ..lowering import unit_memo
from ..lowering.loop_ir import Buffer, IndexExpr, View
from .node import AccumItem, Code, NodeKind, NodeRef, Tensor, buffer_id, node_owner


def sliced(ref: NodeRef) -> Tensor | None:
    """The batch slice whose value `ref` names (aliases resolved), or None."""
    owner, kind = node_owner(ref.tensor, ref.kind)
    if kind is NodeKind.VALUE and owner.op is not None and isinstance(owner.op.logic,
                                                                      BatchSlice):
        return owner
    return None


def _padded(t: Tensor, layout: Mapping[int, Margins]) -> Margins:
    m = layout.get(buffer_id(t)) or ()
    return m if any(lo or hi for lo, hi in m) else ()


def buffer_of(ref: NodeRef, layout: Mapping[int, Margins]) -> Buffer:
    """The buffer of `ref` in the assignments IR: a view of the sliced tensor's buffer for
    an unpadded batch slice's value (a slice of a slice views the first parent), else its
    own. Example: ``buffer_of(x.batch_slice(i).value, layout).view.parent``."""
    memo, key = unit_memo.table("buffer_of"), (id(ref.tensor), ref.kind, id(layout))
    if (hit := memo.get(key)) is not None:  # one pipeline run asks again and again
        return hit[2]  # type: ignore[no-any-return]
    out = _buffer_of(ref, layout)
    memo[key] = (ref.tensor, layout, out)  # (holding what the key's ids name)
    return out


def _buffer_of(ref: NodeRef, layout: Mapping[int, Margins]) -> Buffer:
    buf = ref.buffer(layout)
    t = sliced(ref)
    if t is None or _padded(t, layout):
        return buf
    assert t.op is not None
    logic = t.op.logic
    assert isinstance(logic, BatchSlice)
    parent_ref = NodeRef(t.op.operands[0], NodeKind.VALUE)
    parent = buffer_of(parent_ref, layout)
    sym, bound = logic.symbol, t.op.operands[0].dims()[0]
    if parent.view is not None:  # a slice of a view: index the first parent further
        pv = parent.view
        lead = (*pv.lead, IndexExpr(((1, sym),), pv.shift[0]))
        view = View(pv.parent, lead, pv.shift[1:], (*pv.checks, (sym, bound)))
    else:
        m = _padded(parent_ref.tensor.base(), layout) or tuple((0, 0) for _ in parent.dims)
        view = View(parent, (IndexExpr(((1, sym),), m[0][0]),), tuple(lo for lo, _ in m[1:]),
                    ((sym, bound),))
    return Buffer(buf.id, buf.name, buf.dims, buf.uint4x32, view=view, precision=buf.precision)


def viewed(ref: NodeRef, layout: Mapping[int, Margins]) -> tuple[Tensor, str] | None:
    """For a batch slice's value that is a view: the sliced tensor and the index's name."""
    t = sliced(ref)
    if t is None or t.op is None or buffer_of(ref, layout).view is None:
        return None
    logic = t.op.logic
    assert isinstance(logic, BatchSlice)
    return t.op.operands[0], logic.symbol.name


def buffers_of(refs: Iterable[NodeRef], layout: Mapping[int, Margins]) -> tuple[Buffer, ...]:
    """`buffer_of` of each read reference."""
    return tuple(buffer_of(r, layout) for r in refs)


def _own_copy(it: AccumItem) -> Tensor | None:
    """The batch slice whose own forward copy (`v =: v1`, the parent's row into the slice)
    `it` is, or None."""
    if it.slots is None or not isinstance(it.record.logic, BatchSlice):
        return None
    t = sliced(it.lhs)
    return t if t is it.record.result else None


def copy_target(it: AccumItem, layout: Mapping[int, Margins],
                keep: frozenset[int]) -> Buffer | None:
    """The buffer `it` writes; None for a viewing slice's own forward copy, which through
    the view would copy the parent's cells onto themselves. A kept slice (the caller reads
    it with `ctx.get`) keeps that copy in an array of its own: a snapshot of the row when
    its forward code ran; every other access still goes through the view."""
    lhs = target(it, it.lhs, layout)
    if lhs.view is None or _own_copy(it) is None:
        return lhs
    return it.lhs.buffer(layout) if lhs.id in keep else None


def dropped(code: Code, layout: Mapping[int, Margins], keep: frozenset[int]) -> frozenset[int]:
    """The viewing slices whose forward copies `copy_target` dropped from `code`: like
    virtualized buffers, a routine that reads them with `ctx.get` keeps them next time."""
    return frozenset(buffer_id(t) for it in code.items if isinstance(it, AccumItem)
                     and (t := _own_copy(it)) is not None
                     and copy_target(it, layout, keep) is None)


def check_write(it: AccumItem | None, ref: NodeRef, buf: Buffer) -> None:
    """A write into a batch slice that is not a view would change only its private copy:
    a located error (at the write) saying why it is not a view."""
    t = sliced(ref)
    if t is None or buf.view is not None:
        return
    if it is not None and it.slots is not None and it.record.result is t:
        return  # the slice's own forward copy into its buffer
    assert t.op is not None
    parent = t.op.operands[0].label
    span = it.record.span if it is not None else None
    raise DslSyntaxError(
        f"a write into '{t.label}', a batch slice of '{parent}': that slice cannot be a "
        f"view of '{parent}' because its layout is padded (a padded reader, e.g. a "
        "convolution with padding, widened its margins), so it is a copy and the write "
        f"would never reach '{parent}'; write into '{parent}' (or an unpadded slice of it) "
        "instead", span)


def target(it: AccumItem | None, ref: NodeRef, layout: Mapping[int, Margins]) -> Buffer:
    """The buffer a write into `ref` goes to (`buffer_of`), checked by `check_write`."""
    buf = buffer_of(ref, layout)
    check_write(it, ref, buf)
    return buf
