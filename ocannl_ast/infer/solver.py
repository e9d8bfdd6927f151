"""Shape constraint solver (seed 002): the entry points of one inference component, adding
constraints and closing shapes, each a transaction, and the worklist driving the rules.

A component is the set of shapes that constraints have connected. Each starts with its own
Solver; `join` merges two components (union by size: the smaller one's state moves into the
larger, the smaller Solver then forwards to it), so a solver only ever holds the state of
the graph being inferred and finished, unrelated graphs never slow it down. Variable and
constraint ids come from the one process-wide source (`lowering.ids`), so merging never
renumbers. The state is in `infer.state`, constraint rules in `infer.propagate`, closing in
`infer.closing`, least upper bounds in `infer.lub`.

Input: constraints from `infer.logic`. Output: substitutions read through
`subst_dim`/`subst_row`; after `close`, every variable of the closed shapes is solved.
"""

from __future__ import annotations

from collections.abc import Iterable

from .. import config
from ..errors import ShapeError
from . import closing, propagate
from .constraints import Constraint, constraint_vars
from .state import MAX_RANK, SolverState

__all__ = ["MAX_RANK", "MAX_STEPS", "ClosableShape", "Solver"]

MAX_STEPS = 1_000_000  #: a safety net against non-termination (per `add` / `close`)

ClosableShape = closing.ClosableShape


class Solver(SolverState):
    """One component's solver state with its entry points: `add`, `close`, `run`."""

    def add(self, constraints: Iterable[Constraint]) -> None:
        """Add constraints and propagate to a fixpoint (raises ShapeError on conflict, and
        then leaves the solver as it was before the call). Every variable they mention must
        belong to this component (`join` the components first)."""
        if self._parent is not None:
            self.find().add(constraints)
            return
        cs = list(constraints)
        if config.checking():  # an internal invariant (`join` first): verified in checking mode
            self._check_owned(cs)

        def go() -> None:
            self.queue.extend(cs)
            self.run()

        try:
            self.atomically(go)
        except ShapeError as e:
            _note_added_by(e, cs)
            raise

    def _check_owned(self, cs: list[Constraint]) -> None:
        """A variable of another component would be silently unconstrained there: fail."""
        keys: set[tuple[str, int]] = set()
        for c in cs:
            constraint_vars(c, keys)
        foreign = sorted(i for _, i in keys if i not in self._owned)
        if foreign:
            raise ShapeError(f"internal: constraints mention variables {foreign[:5]} of "
                             "another shape component (join the shapes' solvers first)")

    def run(self) -> None:
        if self._parent is not None:
            self.find().run()
            return
        queue, process, stash = self.queue, propagate.process, self.stash
        steps = self._steps  # (a local count, stored back: hot)
        try:
            while queue:
                steps += 1
                if steps > MAX_STEPS:
                    raise ShapeError("shape inference did not terminate (constraint cycle)")
                c = queue.popleft()
                if not process(self, c):
                    stash(c)
        finally:
            self._steps = steps

    def close(self, shapes: Iterable[ClosableShape]) -> None:
        """Solve every variable of these shapes (see `infer.closing.close`); shapes of other
        components (a `solver` attribute) are joined to this one first."""
        shapes = list(shapes)
        others = [s for sh in shapes if isinstance(s := getattr(sh, "solver", None), Solver)]
        root = self.join(*others)
        root.atomically(lambda: closing.close(root, shapes))


def _note_added_by(e: ShapeError, cs: list[Constraint]) -> None:
    """A conflict found in an earlier operation's pending constraint was triggered by the
    operation being added now: name that one too, so the message shows both lines."""
    span = next((c.origin.span for c in cs if c.origin.span is not None), None)
    if span is None or e.span is None or (span.file, span.line) == (e.span.file, e.span.line):
        return
    op = next(c.origin.op for c in cs if c.origin.span is span)
    e.message += f"\n  found while adding operation '{op}' at {span}"
    e.args = (e._render(),)
