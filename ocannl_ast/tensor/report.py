"""`oc.summary`: a text table of the parameters a tensor depends on, with their shapes in
OCANNL notation and element counts, and the totals.

Input: a tensor. Output: the table as a string (shapes are closed first).
"""

from __future__ import annotations

import numpy as np

from . import validate
from .node import Tensor


def summary(t: Tensor) -> str:
    """The parameters `t` depends on (creation order): name, shape ("batch|input->output"),
    element count; then the totals. Closes the shapes of everything `t` depends on.

    Example: ``print(oc.summary(loss))``.
    """
    validate.check_tensor("summary", "t", t)
    from .pipeline import close_tensors  # compile-time module: loaded on first use

    close_tensors([t], dependencies=True)
    rows = [(_name(p), p.shape.describe(), int(np.prod(p.dims()))) for p in t.params()]
    head = ("param", "shape", "elements")
    w0 = max([len(head[0]), *(len(r[0]) for r in rows)])
    w1 = max([len(head[1]), *(len(r[1]) for r in rows)])
    total = sum(r[2] for r in rows)
    w2 = max(len(head[2]), len(f"{total:,}"))
    lines = [f"{head[0]:<{w0}}  {head[1]:<{w1}}  {head[2]:>{w2}}",
             "-" * (w0 + w1 + w2 + 4)]
    lines += [f"{n:<{w0}}  {s:<{w1}}  {c:>{w2},}" for n, s, c in rows]
    lines.append("-" * (w0 + w1 + w2 + 4))
    noun = "param" if len(rows) == 1 else "params"
    lines.append(f"total: {len(rows)} {noun}, {total:,} elements")
    return "\n".join(lines)


def _name(p: Tensor) -> str:
    """The param's unique name where tensors have one (`tensor.name`), else its label."""
    name = getattr(p, "name", None)
    return name if isinstance(name, str) and name else p.label
