"""A "same" 3x3 convolution written out with a window mask operand that is not all ones, for
tests of the contraction kernel's third factor: `oc.nn.conv2d`'s own window of ones is
folded away by the compiler (`lowering.fold_constants`), a mask like this one stays a
buffer, multiplied into the kernel's panels."""

from __future__ import annotations

import numpy as np

import ocannl_ast as oc

#: the mask over (kh, kw): zeros, negatives and non-unit weights
MASK = np.array([[1.0, 0.5, 0.0], [2.0, 1.0, -1.0], [0.25, 1.0, 1.5]])


def masked_conv(x: oc.Tensor, out_channels: int) -> oc.Tensor:
    """``y[b, i, j, o] = sum x[b, i+kh-1, j+kw-1, c] kernel[kh, kw, c, o] MASK[kh, kw]``
    (zero-padded), its one param the kernel."""
    kernel = oc.param("kernel", output_dims=[out_channels])
    mask = oc.ndarray(MASK.astype(np.float32), label="window")
    return oc.einsum("..b..|1*oh=+kh, 1*ow=+kw, c; kh, kw, c -> oc; kh, kw "
                     "=> ..b..|oh, ow, oc", x, kernel, mask)
