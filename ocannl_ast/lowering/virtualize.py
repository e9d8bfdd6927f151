"""Virtualization (OCANNL's virtual memory mode), the three loop-IR passes in order:
`fold_constants`, `inline` (single-use pointwise intermediates) and `fuse_epilogue`
(a reduction's single pointwise reader). The pipeline runs them as separate stages.

Input: a `LoopProgram`, the buffer ids that escape and the constants to fold. Output: an
equivalent `LoopProgram` over fewer buffers, its decisions as leading comments, and the
ids of the buffers it virtualized and folded.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..records import record
from .fold_constants import fold_constants
from .fuse_epilogue import fuse_epilogue
from .inline import MAX_VISITS, inline
from .loop_ir import CONTRACTION_MIN_WORK, LoopProgram


@record
class Virtualized:
    """The program after virtualization and what was decided."""

    prog: LoopProgram
    virtual: frozenset[int]  #: ids of the buffers inlined into their readers
    folded: frozenset[int]  #: ids of the constant buffers folded into expressions


def virtualize(prog: LoopProgram, escaping: frozenset[int], constants: Mapping[int, float],
               max_visits: int = MAX_VISITS, fusion_limit: int = CONTRACTION_MIN_WORK
               ) -> Virtualized:
    """Fold the constants, then inline every eligible buffer, then fuse epilogues.

    Example: ``virtualize(prog, frozenset({w.id}), {}).prog``.
    """
    folded = fold_constants(prog, constants)
    inlined = inline(folded.prog, escaping, max_visits)
    fused = fuse_epilogue(inlined.prog, escaping, fusion_limit)
    return Virtualized(fused.prog, inlined.virtual | fused.virtual, folded.folded)
