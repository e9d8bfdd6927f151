"""oc.summary: the params a tensor depends on with inferred shapes and counts, and totals."""

from __future__ import annotations

import numpy as np
import pytest

import ocannl_ast as oc


def test_summary_lists_params_shapes_counts_and_totals() -> None:
    x = oc.ndarray(np.ones((5, 3)), batch_axes=1)
    w1 = oc.param("summary_w1", output_dims=[4])  # input dims inferred from x
    b1 = oc.param("summary_b1")
    w2 = oc.param("summary_w2", output_dims=[2])
    y = w2 @ oc.relu(w1 @ x + b1)
    text = oc.summary(y)
    lines = text.splitlines()
    assert lines[0].split() == ["param", "shape", "elements"]
    body = [ln.split() for ln in lines[2:5]]
    assert body == [["summary_w1", "3->4", "12"], ["summary_b1", "4", "4"], ["summary_w2", "4->2", "8"]], text
    assert lines[-1] == "total: 3 params, 24 elements"
    # the table's counts match the inferred dims
    assert sum(int(np.prod(p.dims())) for p in (w1, b1, w2)) == 24


def test_summary_without_params_and_thousands() -> None:
    x = oc.ndarray(np.ones(3))
    assert oc.summary(x * 2.0).splitlines()[-1] == "total: 0 params, 0 elements"
    w = oc.param("summary_big", input_dims=[100], output_dims=[20])
    text = oc.summary(w)
    assert "100->20" in text and "2,000" in text and text.endswith("1 param, 2,000 elements")


def test_summary_rejects_non_tensor() -> None:
    with pytest.raises(oc.ArgumentError, match="summary"):
        oc.summary([1, 2])  # type: ignore[arg-type]
