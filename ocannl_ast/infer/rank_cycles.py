"""Row-rank cycle detection (seed 002 termination): broadcast inequalities between open rows
that together ask a row to have more axes than itself.

Input: the pending row inequalities, substituted. Output: the inequalities forming such a
cycle (for the solver's ShapeError), or None. Each `cur >= subr` between rows with row
variables A and B says `len(A) >= len(B) + (known axes of subr - known axes of cur)`; a
cycle whose required increments sum to more than 0 has no solution, and the solver would
otherwise keep growing the rows until its step budget runs out.
"""

from __future__ import annotations

from .constraints import RowIneq
from .terms import Row


def _edge(cur: Row, subr: Row) -> tuple[int, int, int] | None:
    """(from B, to A, weight): A's variable needs `weight` more axes than B's."""
    if cur.var is None or subr.var is None:
        return None
    return subr.var.id, cur.var.id, subr.known_len - cur.known_len


def rank_cycle(new: tuple[RowIneq, Row, Row],
               pending: list[tuple[RowIneq, Row, Row]]) -> list[RowIneq] | None:
    """A cycle through the `new` inequality and `pending` ones (each with its substituted
    cur and subr rows) whose rank increments sum to more than zero, in cycle order; None if
    there is none. Only the rows reachable from `new` are searched.

    Example: ``a >= b ++ [x]``, ``b >= c ++ [y]``, ``c >= a ++ [z]`` is such a cycle.
    """
    first = _edge(new[1], new[2])
    if first is None:
        return None
    edges = [(e, c) for c, cur, sub in pending if (e := _edge(cur, sub)) is not None]
    edges.append((first, new[0]))
    edges = _reachable(edges, first[1])
    if not any(v == first[0] for (_, v, _), _ in edges):
        return None  # the new inequality closes no cycle
    return _positive_cycle(edges)


Edge = tuple[tuple[int, int, int], RowIneq]


def _reachable(edges: list[Edge], start: int) -> list[Edge]:
    """The edges among the rows reachable from `start`."""
    out: dict[int, list[Edge]] = {}
    for e in edges:
        out.setdefault(e[0][0], []).append(e)
    seen, todo, kept = {start}, [start], []
    while todo:
        for e in out.get(todo.pop(), []):
            kept.append(e)
            if e[0][1] not in seen:
                seen.add(e[0][1])
                todo.append(e[0][1])
    return kept


def _positive_cycle(edges: list[Edge]) -> list[RowIneq] | None:
    """Bellman-Ford for longest paths: still improving after |V| rounds means a cycle."""
    nodes = {n for (u, v, _), _ in edges for n in (u, v)}
    best = dict.fromkeys(nodes, 0)  # longest required rank increment reaching each node
    pred: dict[int, int] = {}  # node -> index of the edge that last raised it
    last = None
    for _ in range(len(nodes)):
        last = None
        for k, ((u, v, w), _) in enumerate(edges):
            if best[u] + w > best[v]:
                best[v] = best[u] + w
                pred[v] = k
                last = v
        if last is None:
            return None
    assert last is not None
    for _ in range(len(nodes)):  # walk back onto the cycle itself
        last = edges[pred[last]][0][0]
    cycle: list[RowIneq] = []
    node = last
    while True:
        k = pred[node]
        cycle.append(edges[k][1])
        node = edges[k][0][0]
        if node == last:
            break
    cycle.reverse()
    return cycle
