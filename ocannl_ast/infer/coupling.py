"""The second union-find of projection inference (seed 004): concatenated axes couple
their component iterators. After the co-iteration classes are settled, every Concat is a
hyperedge over its components' classes; each connected component becomes one factor whose
iterators run one after another. A concatenated axis indexes at the active component's
iterator plus its injection offset (the sizes of the components before it).

Input: the concatenated axes met while matching an einsum spec (axis id, components) and
the co-iteration union-find. Output: the coupled factors and the axes' `ConcatIndex`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from ..errors import ShapeError
from ..lowering.assignments import ConcatIndex, Factor
from ..lowering.ids import fresh_id
from ..lowering.loop_ir import IndexExpr, Symbol
from .concat import AxisKey
from .spec_ast import Label
from .terms import Kind


class UnionFindLike(Protocol):
    size: list[int]
    pin: dict[int, int | Symbol]

    def find(self, a: int) -> int: ...

    def new(self, size: int) -> int: ...


class Coupling:
    """The concatenated axes of one operation's projection derivation."""

    def __init__(self, op: str) -> None:
        self.op = op
        self.verdicts: dict[AxisKey, tuple[bool, ...]] = {}
        self.slot, self.kind, self.pos = 0, Kind.OUTPUT, 0  #: where the matcher is
        #: axis id, component label names, discardable flags
        self.axes: list[tuple[int, tuple[str, ...], tuple[bool, ...]]] = []

    def add(self, i: int, comps: tuple[Label | int, ...], labels: dict[str, list[int]],
            new: Callable[[int], int]) -> None:
        """Record axis `i` = `comps`; an integer component is an internal label of that
        size (a known-size summand the other side may skip)."""
        names: list[str] = []
        for k, c in enumerate(comps):
            if isinstance(c, int):
                name = f"^{i}.{k}"
                labels[name] = [new(c)]
                names.append(name)
            else:
                names.append(c.name)
        if len(set(names)) != len(names):
            raise ShapeError(f"projections of {self.op}: a concatenation repeats a component "
                             f"({' ^ '.join(names)}); each summand needs its own label")
        flags = self.verdicts.get((self.slot, self.kind, self.pos),
                                  tuple(False for _ in names))
        self.axes.append((i, tuple(names), flags))

    def _sizes(self, uf: UnionFindLike, labels: dict[str, list[int]]) -> None:
        """Components seen only inside concatenations get classes sized by the sum rule:
        discardable unknowns fall to 0 (in order) until one unknown remains."""
        changed = True
        while changed:
            changed = False
            for i, names, flags in self.axes:
                unknown = [(n, f) for n, f in zip(names, flags, strict=True) if n not in labels]
                if not unknown:
                    continue
                if len(unknown) > 1:
                    disc = [n for n, f in unknown if f]
                    if not disc:
                        continue
                    labels[disc[0]] = [uf.new(0)]
                    changed = True
                    continue
                known = sum(uf.size[uf.find(labels[n][0])] for n in names if n in labels)
                labels[unknown[0][0]] = [uf.new(max(uf.size[i] - known, 0))]
                changed = True

    def couple(self, uf: UnionFindLike, labels: dict[str, list[int]],
               memo: dict[int, IndexExpr]) -> tuple[tuple[Factor, ...], dict[int, ConcatIndex]]:
        """Size the components, mint one iterator per component class (even a size-1 one:
        lowering needs it to know the summand is there), couple the classes into factors."""
        if not self.axes:
            return (), {}
        self._sizes(uf, labels)
        roots: dict[str, int] = {}
        for i, names, _ in self.axes:
            for n in names:
                if n not in labels:
                    raise ShapeError(f"projections of {self.op}: cannot tell how the "
                                     f"concatenated axis splits: the size of component '{n}' "
                                     "is not determined (give it, e.g. an integer component)")
                roots[n] = uf.find(labels[n][0])
            total = sum(uf.size[roots[n]] for n in names)
            if total != uf.size[i]:
                shown = " ^ ".join(f"{'(int)' if n.startswith('^') else n}"
                                   f"={uf.size[roots[n]]}" for n in names)
                raise ShapeError(f"projections of {self.op}: contradictory component sizes: "
                                 f"{shown} do not add up to the axis size {uf.size[i]}")
        syms = self._symbols(uf, roots, memo)
        return self._factors(uf, roots, syms), self._indices(uf, roots, syms)

    def _symbols(self, uf: UnionFindLike, roots: dict[str, int],
                 memo: dict[int, IndexExpr]) -> dict[int, Symbol]:
        syms: dict[int, Symbol] = {}
        for n, r in roots.items():
            if r in syms:
                continue
            if r in uf.pin:
                raise ShapeError(f"projections of {self.op}: concatenation component '{n}' "
                                 "cannot also be a fixed or sliced index")
            syms[r] = Symbol(fresh_id(), "c" if n.startswith("^") else n)
            memo[r] = IndexExpr(((1, syms[r]),), 0)
        return syms

    def _factors(self, uf: UnionFindLike, roots: dict[str, int],
                 syms: dict[int, Symbol]) -> tuple[Factor, ...]:
        """Connected components of the hyperedges, in order of first appearance."""
        parent = {r: r for r in syms}

        def find(r: int) -> int:
            while parent[r] != r:
                r = parent[r]
            return r

        order: list[int] = []
        for _, names, _ in self.axes:
            rs = [roots[n] for n in names]
            for r in rs:
                if r not in order:
                    order.append(r)
            for r in rs[1:]:
                a, b = find(rs[0]), find(r)
                if a != b:
                    parent[b] = a
        groups: dict[int, list[int]] = {}
        for r in order:
            groups.setdefault(find(r), []).append(r)
        return tuple(tuple((syms[r], uf.size[r]) for r in g) for g in groups.values())

    def _indices(self, uf: UnionFindLike, roots: dict[str, int],
                 syms: dict[int, Symbol]) -> dict[int, ConcatIndex]:
        out: dict[int, ConcatIndex] = {}
        for i, names, _ in self.axes:
            parts, off = [], 0
            for n in names:
                parts.append((syms[roots[n]], off))
                off += uf.size[roots[n]]
            out[i] = ConcatIndex(tuple(parts))
        return out
