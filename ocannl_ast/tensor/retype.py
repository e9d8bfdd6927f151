"""`oc.set_precision`: a tensor's storage precision changed in place (OCANNL's
``Tn.update_prec``), for tensors built elsewhere (a model's params, a layer's output).
See `tensor.precisions`. Input: a tensor and a precision name. Output: nothing."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import ArgumentError, user_span
from . import precisions, validate
from .context import holds_buffer
from .node import Init


def set_precision(t: Any, precision: Any) -> None:
    """Store `t`'s cells in `precision` from now on (OCANNL's ``Tn.update_prec``): for a
    tensor built elsewhere, e.g. every param of a model, ``for p in loss.params():
    oc.set_precision(p, "float32")``. Integer precisions only for data (`oc.ndarray`,
    `oc.term`) that is not differentiable. A tensor some context already holds an array
    for keeps its precision: an `ArgumentError` (set it before the first compile)."""
    validate.check_tensor("set_precision", "t", t)
    data = t.init is Init.CONST and not t.diff
    p = precisions.parse("set_precision", precision, integers=data)
    if p is None:
        raise ArgumentError("set_precision: precision must be a precision name, got None",
                            user_span())
    if t.alias_of is not None or t.uint4x32:
        raise ArgumentError(f"set_precision: '{t.label}' is a view of another tensor's cells "
                            "(set the precision of the tensor it views)", user_span())
    if p is not t.precision and holds_buffer(t):
        had = t.precision.value if t.precision is not None else "the context's precision"
        raise ArgumentError(f"set_precision: '{t.label}' already has cells of {had} in a "
                            "context: set its precision before compiling code that uses it",
                            user_span())
    if p.is_integer and not isinstance(t.init_value, np.ndarray | None):
        raise ArgumentError(f"set_precision: '{t.label}' is a number constant, filled by "
                            f"the routine: integer precisions ({p.value}) are for data "
                            "(oc.ndarray, oc.term)", user_span())
    if p.is_integer and isinstance(t.init_value, np.ndarray):
        t.init_value = np.ascontiguousarray(precisions.host_values(p, t.label, t.init_value))
    t.precision = p
