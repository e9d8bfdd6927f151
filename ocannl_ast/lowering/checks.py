"""Error codes of a routine's bound checks: each distinct check (index, bound) its own code,
1, 2, ... in program order, so that a failed call names the index that is out of range (the
checks of static indices all come from the lowering with code 1).

Stage: after lowering (`pipeline.bind_statics`). Input: a loop program's body. Output: the
same body with its `CheckIndex` codes renumbered.
"""

from __future__ import annotations

from ocannl_ast.lowering.loop_ir import CheckIndex, IndexExpr, Stmt
from ocannl_ast.lowering.walk import map_stmt


def number_checks(body: Stmt) -> Stmt:
    """`body` with each distinct (index, bound) check coded 1, 2, ... in program order."""
    codes: dict[tuple[IndexExpr, int], int] = {}

    def number(s: Stmt) -> Stmt | None:
        if not isinstance(s, CheckIndex):
            return None
        code = codes.setdefault((s.index, s.bound), len(codes) + 1)
        return None if code == s.code else CheckIndex(s.index, s.bound, code)

    return map_stmt(body, stmt=number)
