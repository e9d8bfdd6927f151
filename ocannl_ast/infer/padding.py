"""Padding margins of padded convolutions (seed 001 "Padding"): shapes carry sizes without
padding, buffers carry the margins.

A padded (`=+`) affine axis reads `stride*o + dilation*k + offset - left`; the buffer of
the addressed tensor is widened by `left` positions before and `right` after. The margin of
a tensor axis is the running maximum over every operation addressing it, frozen when the
tensor is first lowered (then its buffer is allocated with it).

The split follows the PyTorch `padding="same"` convention on the dilated kernel's span
`e = 1 + (k - 1) * dilation`: `left = (e - 1) // 2`, `right = e - 1 - left`. For odd spans
this is OCANNL's `right = (k + 1) / 2, left = k - right` read shift; OCANNL's right margin
is one position larger than any read reaches, and it ignores the dilation (a dilated kernel
would read past it), so the span is used here.
"""

from __future__ import annotations

from .terms import kernel_span

Margins = tuple[tuple[int, int], ...]  #: (left, right) per axis of a tensor, layout order


def padding_margins(kernel: int, dilation: int) -> tuple[int, int]:
    """(left, right) margins for a kernel of `kernel` taps spaced `dilation` apart.

    Example: ``padding_margins(3, 1) == (1, 1)``; ``padding_margins(2, 1) == (0, 1)``.
    """
    if kernel <= 0:
        return (0, 0)
    e = kernel_span(kernel, dilation)
    left = (e - 1) // 2
    return (left, e - 1 - left)


def widen(current: Margins, axis: int, need: tuple[int, int]) -> Margins:
    """The running maximum: `current` with axis `axis` widened to fit `need`."""
    left, right = current[axis]
    out = list(current)
    out[axis] = (max(left, need[0]), max(right, need[1]))
    return tuple(out)


def padded_dims(dims: tuple[int, ...], margins: Margins | None) -> tuple[int, ...]:
    """Buffer dims: each axis widened by its margins. Example: ``((5,), ((1, 1),)) -> (7,)``."""
    if margins is None:
        return dims
    return tuple(d + lo + hi for d, (lo, hi) in zip(dims, margins, strict=True))
