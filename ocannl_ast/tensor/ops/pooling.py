"""Unary pooling: a window given by name and size instead of a dummy window tensor.

OCANNL's `max_pool2d` sets the window labels' dims from scope (`Shape.set_dim wh 2`) and
passes a constant kernel (`0.0 + 0.0`) as a second operand, because projection inference
runs per assignment and must see the window axes on some tensor. Here the caller writes the
unary spec and gives the window sizes by label:
``oc.einsum_max("b|2*oh<+kh => b|oh", x, window={"kh": 2})``; the library supplies the
constant window operand (-0.0 for a max: max over x + -0.0, which is x exactly; 1 for a
sum), so shapes and projections are those of OCANNL's binary form. The operand is a filled
constant (`leaves.filled`): the compiler reads it as its number and drops the exact
identities ``x * 1`` and ``x + -0.0`` (`lowering.fold_constants`), so no window buffer
is read and a convolution's product reaches the contraction kernel with two factors.
"""

from __future__ import annotations

from collections.abc import Mapping

from ...errors import ShapeError, user_span
from ...infer.spec_ast import EinsumSpec, Label, RowSpec, ShapeSpec
from ...infer.spec_parser import parse_spec, spec_labels
from ..leaves import filled
from ..node import Tensor


def window_operand(spec: str, window: Mapping[str, int], fill: float
                   ) -> tuple[EinsumSpec, Tensor]:
    """The spec with one more operand over the window labels, and that operand: a constant
    of `fill` with the given sizes (in the mapping's order)."""
    parsed = parse_spec(spec)
    if not isinstance(window, Mapping) or not window:
        raise ShapeError(f'the window of "{spec}" must be a non-empty dict label -> size, '
                         f"got {window!r}", user_span())
    labels = set(spec_labels(parsed))
    for name, size in window.items():
        if name not in labels:
            raise ShapeError(f'window label {name!r} does not occur in the spec "{spec}"',
                             user_span())
        if not isinstance(size, int) or isinstance(size, bool) or size < 1:
            raise ShapeError(f"window size of {name!r} must be a positive int, got {size!r}",
                             user_span())
    row = RowSpec((), None, tuple(Label(n) for n in window))
    extra = ShapeSpec(None, None, row)
    joined = EinsumSpec((*parsed.operands, extra), parsed.result, parsed.text)
    return joined, filled(tuple(window.values()), fill, label="window")
