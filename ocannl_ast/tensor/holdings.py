"""What a context holds (its *state*: what a checkpoint stores) and how a checkpoint's
entries match the held tensors.

State, by principle rather than by name: a tensor is state iff it is a parameter, or a
persistent node (`Init.NODE`: optimizer state, step counters, a user's @cd `{x}`) that some
routine of the context *carries across runs* — reads before overwriting it whole, so that
the value it reads is the one a previous run left (`carried`) — and that is not shaped by
the data (no batch axes, unless it is a parameter's own optimizer state). A node every
routine overwrites whole before reading it (a max-gradient's tie counts `ties_lhs`, Adam's
denominator, SGD's delta) is scratch: it is recomputed each run and, being shaped by the
batch, would tie a checkpoint to one batch size.

Matching (`match`): by name, the file must have exactly the held names; by order, the
i-th parameter by creation order (and each piece of its optimizer state, by declaration)
takes the file's i-th (`order_keys`), for a model rebuilt under other names. A mismatch is
an `oc.CheckpointError` naming the parameter as the user's model names it and where it was
declared, with a hint at `by="order"` when the entries line up that way.

Input: assignments (`carried`), held tensors, a checkpoint's `Entries`. Output: sets of
buffer ids, tensors, entry names.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable, Mapping
from pathlib import Path
from typing import Any, assert_never

import numpy as np

from .. import naming
from ..errors import CheckpointError, user_span
from ..lowering import assignments as A
from ..lowering import unit_memo
from ..lowering.loop_ir import BinOp, Buffer, storage_id
from .checkpoint import Entries, check_entry, names
from .node import Code, Init, Tensor, buffer_id

BY = ("name", "order")


def carried(asgn: A.Asgn) -> set[int]:
    """The buffers a routine may read with a value from before it runs: read (or
    accumulated into) before the routine overwrites every cell of them. A write counts as
    whole only when its projections cover every cell (`Projections.lhs_surjective`).

    Example: ``carried(lowered.asgn)`` holds Adam's moments, not a max-gradient's ties."""
    out: set[int] = set()
    whole: set[int] = set()

    def read(b: Buffer) -> None:
        if storage_id(b) not in whole:
            out.add(storage_id(b))

    def cover(b: Buffer) -> None:
        """A whole write of `b`: through a batch slice's view, only part of its parent."""
        if b.view is not None:
            read(b)
        else:
            whole.add(b.id)

    def walk(a: A.Asgn) -> None:
        match a:
            case A.Accum(lhs=lhs, rhs=rhs, accum=acc, initialize_neutral=init,
                         projections=proj):
                for b in rhs:
                    read(b)
                if not init and acc != BinOp.ARG2:
                    read(lhs)  # accumulates into the old value
                elif proj.lhs_surjective():
                    cover(lhs)
            case A.Block(lhs=lhs, rhs=rhs, accum=acc, initialize_neutral=init,
                         projections=proj):
                for b in rhs:
                    read(b)
                if init and acc == BinOp.ADD and proj.lhs_surjective():
                    cover(lhs)
                else:
                    read(lhs)  # a gap keeps the target's cells
            case A.RevSides(src=src, targets=targets):
                read(src)
                for b in targets:
                    read(b)  # scattered by accumulation
            case A.Fetch(buffer=b):
                cover(b)
            case A.VecSet(lhs=lhs, rhs=rhs):
                read(rhs)
                cover(lhs)
            case A.CheckStatic() | A.Noop():
                pass
            case A.Seq(items=items):
                for x in items:
                    walk(x)
            case _:
                assert_never(a)

    walk(asgn)
    return out


#: `code.tensors()`, computed once per pipeline run (`unit_memo`): its stages ask again;
#: callers only read the list
tensors_of: Callable[[Code], list[Tensor]] = unit_memo.memoized(Code.tensors)


def scratch(tensors: Iterable[Tensor], asgn: A.Asgn, keep: Container[int]) -> frozenset[int]:
    """The buffer ids of the scratch nodes among `tensors` (see the module's docstring) that
    the routine of `asgn` overwrites whole before reading and then reads, and that are not
    in `keep` (what the caller keeps): intermediates like any other, which the compiler may
    inline or store with other intermediates (`ctx.get` of one then says so, and keeps it
    from the next run on). A node the routine only writes is left to the caller.

    Example: ``scratch(code.tensors(), lowered.asgn, frozenset())`` holds Adam's
    denominators."""
    from ..lowering.asgn_analysis import flat, read_write_sets

    read = {b for a in flat(asgn) for b in read_write_sets(a)[0]}
    kept = carried(asgn)
    return frozenset(b for t in tensors if t.init is Init.NODE and not t.uint4x32
                     and (b := buffer_id(t)) in read and b not in kept and b not in keep)


def _owner(name: str) -> str | None:
    """The parameter name an optimizer-state name hangs under ("w/adam_m" -> "w")."""
    owner, sep, _ = name.partition("/")
    return owner if sep else None


def held(tensors: Iterable[Tensor], carried_ids: Container[int] | None,
         key: Callable[[Tensor], str]) -> list[Tensor]:
    """The state among these tensors: params, and the nodes whose buffer is carried across
    runs (`carried_ids`; None: every node, read as it is) and not shaped by the data. Never
    the 128-bit word tensors of the random initializer. `key`: a tensor's name in the
    context (`tensor.name` but where `name_uniquely` gave it another)."""
    ts = [t for t in tensors if t.init in (Init.PARAM, Init.NODE) and not t.uint4x32]
    params = {key(t) for t in ts if t.init is Init.PARAM}

    def state(t: Tensor) -> bool:
        if t.init is Init.PARAM:
            return True
        if carried_ids is not None and buffer_id(t) not in carried_ids:
            return False  # scratch: overwritten whole before every read
        return not t.shape.batch or _owner(key(t)) in params

    return [t for t in ts if state(t)]


def order_keys(tensors: Mapping[str, Tensor]) -> dict[str, str]:
    """Each held tensor's place (by its name in the context) by creation order: the i-th
    parameter created is "p<i>", its optimizer state "p<i>/<declaration>" ("p0/adam_m"),
    the j-th other node "n<j>"."""
    ts = sorted(tensors.items(), key=lambda kv: kv[1].id)
    index = {n: i for i, n in enumerate(n for n, t in ts if t.init is Init.PARAM)}
    keys: dict[str, str] = {}
    others = 0
    for name, t in ts:
        owner = _owner(name)
        if t.init is Init.PARAM:
            keys[name] = f"p{index[name]}"
        elif owner in index:
            keys[name] = f"p{index[owner]}/{name.partition('/')[2]}"
        else:
            keys[name] = f"n{others}"
            others += 1
    return keys


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _place(key: str) -> str:
    """An order key in words: "p2/adam_m" -> "the 3rd param's 'adam_m'"."""
    head, _, decl = key.partition("/")
    what = f"the {_ordinal(int(head[1:]) + 1)} " + ("param" if head[0] == "p" else "node")
    return f"{what} (by creation order)" + (f"'s '{decl}'" if decl else "")


def _declared(t: Tensor) -> str:
    span = t.shape.span
    return f" (declared at {span.file}:{span.line})" if span is not None else ""


#: the dtype a held tensor's entry must have (its `ctx.get` dtype)
DtypeOf = Callable[[Tensor], np.dtype[Any]]


def match(source: Path, entries: Entries, want: Mapping[str, Tensor], dtype: DtypeOf,
          by: str, scratch: Container[str] = ()) -> dict[str, str]:
    """The held tensors' names in the context -> the file's entry that loads into each,
    every entry checked for dims and dtype; a `CheckpointError` when they do not match one
    to one. By name, an entry named as one of the context's `scratch` tensors (compiled
    there, not state: a file of an earlier version saved Adam's denominator) is ignored."""
    if by == "order":
        return _by_order(source, entries, want, dtype)
    missing = sorted(want.keys() - entries.arrays.keys(),  # params first, as created
                     key=lambda n: (want[n].init is not Init.PARAM, want[n].id))
    extra = sorted((n for n in entries.arrays.keys() - want.keys() if n not in scratch),
                   key=lambda n: ("/" in n, n))
    if missing or extra:
        raise CheckpointError(_name_mismatch(source, entries, want, dtype, missing, extra),
                              user_span())
    for name, t in sorted(want.items()):
        check_entry(source, name, entries.arrays[name], t.dims(), dtype(t))
    return {n: n for n in want}


def _name_mismatch(source: Path, entries: Entries, want: Mapping[str, Tensor],
                   dtype: DtypeOf, missing: list[str], extra: list[str]) -> str:
    if missing:
        first = want[missing[0]]
        what = "the entry" if len(missing) == 1 else f"{len(missing)} entries,"
        msg = (f"checkpoint {source} is missing {what} {names(missing)} that this "
               f"context holds: {'param' if first.init is Init.PARAM else 'node'} "
               f"'{missing[0]}'{_declared(first)} has no entry")
        if extra:
            msg += f"; the file has {names(extra)} instead"
    else:
        msg = (f"checkpoint {source} has the extra entry {names(extra)}, which this "
               "context does not hold (compile the routines that use it before loading)")
    try:
        _by_order(source, entries, want, dtype)
    except CheckpointError:
        return msg
    return (msg + ". Its entries line up with this context's by creation order and shape "
            "(the model was rebuilt under other names?): load it with "
            "ctx.load(path, by=\"order\")")


def _by_order(source: Path, entries: Entries, by_name: Mapping[str, Tensor],
              dtype: DtypeOf) -> dict[str, str]:
    if entries.order is None:
        raise CheckpointError(f"checkpoint {source} records no creation order (written by "
                              "another tool or an older version): load it by name",
                              user_span())
    mine = order_keys(by_name)
    theirs = {k: n for n, k in entries.order.items()}
    missing = sorted((k for k in mine.values() if k not in theirs), key=_sort_key)
    extra = sorted((k for k in theirs if k not in set(mine.values())), key=_sort_key)
    if missing:
        name = {k: n for n, k in mine.items()}[missing[0]]
        raise CheckpointError(f"checkpoint {source} has no entry for {_place(missing[0])}: "
                              f"'{name}'{_declared(by_name[name])} (and {len(missing) - 1} "
                              f"more); "
                              f"it has {len(theirs)} entries, this context holds "
                              f"{len(mine)}", user_span())
    if extra:
        raise CheckpointError(f"checkpoint {source} has the entry '{theirs[extra[0]]}' for "
                              f"{_place(extra[0])} (and {len(extra) - 1} more), which this "
                              "context does not hold (compile the routines that use it "
                              "before loading)", user_span())
    out: dict[str, str] = {}
    for name, key in sorted(mine.items(), key=lambda kv: _sort_key(kv[1])):
        t, theirs_name = by_name[name], theirs[key]
        what = f"{_place(key)} '{name}'{_declared(t)}"
        check_entry(source, theirs_name, entries.arrays[theirs_name], t.dims(), dtype(t), what)
        out[name] = theirs_name
    return out


def _sort_key(key: str) -> tuple[str, int, str]:
    head, _, decl = key.partition("/")
    return head[0], int(head[1:]), decl


def name_uniquely(names: dict[str, Tensor], keys: dict[int, str], tensors: Iterable[Tensor],
                  known_elsewhere: Callable[[Tensor], bool]) -> None:
    """Register `tensors` in a context's `names` (its name -> tensor), so that no two
    tensors share a name there: one whose `tensor.name` another tensor holds there (a
    tensor of an earlier naming epoch, `ocannl_ast.naming`) is renamed, its top segment
    numbered (`naming.renumbered`), a parameter's optimizer state following it and its
    default init keyed by the new name. A tensor another context knows already keeps its
    `tensor.name` and gets the numbered name in this context only (`keys`: tensor id ->
    such a context-local name)."""
    for t in tensors:
        if t.id in keys or names.setdefault(t.name, t) is t:
            continue
        if known_elsewhere(t):
            keys[t.id] = naming.renumbered(t.name, names)
            names[keys[t.id]] = t
            continue
        old = t.name
        _rename(t, naming.renumbered(old, names))
        names[t.name] = t
        states: list[Tensor] = naming.states_of(t)
        for s in states:
            if s.name.startswith(old + "/") and s.id not in keys:
                if names.get(s.name) is s:
                    del names[s.name]
                new = t.name + s.name[len(old):]
                _rename(s, naming.renumbered(new, names) if new in names else new)
                names[s.name] = s


def _rename(t: Tensor, new: str) -> None:
    if t.init_key is not None and t.init_key == (t.name, 0):
        t.init_key = (new, 0)  # not initialized anywhere yet: it has no other context
    t._name = new
