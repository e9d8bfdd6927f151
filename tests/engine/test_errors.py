"""Errors through the public API: the right class, a message naming the operation, the
tensors and their labels, the conflicting facts, and the user's file and line; a failed
operation leaves the shared solver usable; nothing crashes the interpreter or hangs."""

from __future__ import annotations

import contextlib
import os
import random
import signal
from collections.abc import Iterator

import numpy as np
import pytest

import ocannl_ast as oc

HERE = os.path.basename(__file__)
with open(__file__, encoding="utf-8") as _f:
    _SOURCE = _f.read().splitlines()


def line_of(marker: str) -> int:
    """The line carrying the comment `# <marker>` (unique in this file)."""
    hits = [n for n, text in enumerate(_SOURCE, 1) if text.rstrip().endswith(f"# {marker}")]
    assert len(hits) == 1, (marker, hits)
    return hits[0]


def assert_located(err: BaseException, marker: str) -> None:
    msg = str(err)
    assert f"{HERE}:{line_of(marker)}:" in msg, msg


def assert_mentions(err: BaseException, *words: str) -> None:
    msg = str(err)
    for w in words:
        assert w in msg, (w, msg)


@contextlib.contextmanager
def time_limit(seconds: int) -> Iterator[None]:
    def on_alarm(signum: int, frame: object) -> None:
        raise TimeoutError(f"did not finish within {seconds} s")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


# ---- malformed specs ---------------------------------------------------------------------


def test_malformed_spec_shows_the_column_and_the_line() -> None:
    a = oc.ndarray(np.ones((2, 3)), label="a")
    b = oc.ndarray(np.ones((3, 4)), label="b")
    spec = "ij;jk=>i k)"
    with pytest.raises(oc.SpecError) as info:
        oc.einsum(spec, a, b)  # MARK:bad-spec
    err = info.value
    assert err.col == spec.index(")")
    assert_mentions(err, spec, f"column {spec.index(')') + 1}", "unexpected character ')'")
    assert_located(err, "MARK:bad-spec")
    assert isinstance(err, oc.OcannlError)


@pytest.mark.parametrize(("spec", "bad_col"), [
    ("ij;jk", 5),  # missing '=>': reported at the end
    ("ij;=>i", 3),  # empty operand
    ("i..j=>i", 1),  # a row variable is '...' or '..name..'
    ("2*i+3 => i", 4),  # offset not below the stride
])
def test_malformed_specs(spec: str, bad_col: int) -> None:
    with pytest.raises(oc.SpecError) as info:
        oc.einsum(spec, oc.ndarray(np.ones(4)))  # MARK:bad-spec-param
    assert info.value.col == bad_col
    assert_mentions(info.value, spec, f"column {bad_col + 1}")
    assert_located(info.value, "MARK:bad-spec-param")


def test_spec_with_the_wrong_number_of_operands() -> None:
    a = oc.ndarray(np.ones((2, 3)), label="a")
    with pytest.raises(oc.ShapeError) as info:
        oc.einsum("ij;jk=>ik", a)  # MARK:arity
    assert_mentions(info.value, "ij;jk=>ik", "2 operand", "1")
    assert_located(info.value, "MARK:arity")


# ---- shape conflicts at construction --------------------------------------------------------


def test_pointwise_size_mismatch() -> None:
    x3 = oc.ndarray([1.0, 2.0, 3.0], label="x3")
    x4 = oc.ndarray([1.0, 2.0, 3.0, 4.0], label="x4")
    with pytest.raises(oc.ShapeError) as info:
        x3 + x4  # MARK:pointwise
    assert_mentions(info.value, "add", "pointwise", "x3", "x4", "3", "4")
    assert_located(info.value, "MARK:pointwise")


def test_compose_inner_dims_mismatch() -> None:
    m = oc.ndarray(np.ones((2, 3)), input_axes=1, label="mat")
    v = oc.ndarray(np.ones(4), label="vec")
    with pytest.raises(oc.ShapeError) as info:
        m @ v  # MARK:compose
    assert_mentions(info.value, "compose", "mat", "vec", "3", "4", "mat.input")
    assert_located(info.value, "MARK:compose")


def test_einsum_contraction_mismatch() -> None:
    a = oc.ndarray(np.ones((2, 3)), label="lhs_a")
    b = oc.ndarray(np.ones((4, 5)), label="rhs_b")
    with pytest.raises(oc.ShapeError) as info:
        oc.einsum("ij;jk=>ik", a, b)  # MARK:contract
    assert_mentions(info.value, "ij;jk=>ik", "lhs_a", "rhs_b", "3", "4")
    assert_located(info.value, "MARK:contract")


def test_basis_label_clash() -> None:
    img = oc.param("img", output_dims=[(3, "rgb")])
    pts = oc.param("pts", output_dims=[(3, "xyz")])
    assert "rgb=3" in str(img.shape)
    with pytest.raises(oc.ShapeError) as info:
        img + pts  # MARK:basis
    assert_mentions(info.value, "basis clash", "rgb", "xyz", "img", "pts", "add")
    assert_located(info.value, "MARK:basis")


def test_basis_labels_that_agree_are_fine() -> None:
    a = oc.param("ca", output_dims=[(3, "rgb")], init=1.0)
    b = oc.param("cb", output_dims=[(3, "rgb")], init=2.0)
    np.testing.assert_allclose(oc.eval(a + b), np.full(3, 3.0))
    assert (a + b).shape.labels() == ("rgb",)


def test_fixed_index_out_of_range() -> None:
    e = oc.ndarray(np.ones((3, 4)), label="table")
    with pytest.raises(oc.ShapeError) as info:
        oc.eval(oc.einsum("3d=>d", e))  # MARK:fixed
    assert_mentions(info.value, "fixed index 3", "table")
    assert_located(info.value, "MARK:fixed")


# ---- undetermined parameters (found when closing, at eval time) ---------------------------


def test_undetermined_param_row() -> None:
    p = oc.param("p_undet")  # MARK:p-undet
    q = oc.param("q_undet")  # MARK:q-undet
    t = p + q  # builds fine: nothing contradicts
    with pytest.raises(oc.ShapeError) as info:
        oc.eval(t)
    named = "p_undet" if "p_undet" in str(info.value) else "q_undet"
    assert_mentions(info.value, named, "not determined", "parameter")
    assert_located(info.value, "MARK:p-undet" if named == "p_undet" else "MARK:q-undet")


def test_undetermined_param_dim() -> None:
    p = oc.param("p_dim")  # MARK:p-dim
    q = oc.param("q_dim")  # MARK:q-dim
    t = oc.einsum("i;i=>i", p, q)  # one axis each, of unknown size
    with pytest.raises(oc.ShapeError) as info:
        oc.eval(t)
    named = "p_dim" if "p_dim" in str(info.value) else "q_dim"
    assert_mentions(info.value, named, "dimension is not determined")
    assert_located(info.value, "MARK:p-dim" if named == "p_dim" else "MARK:q-dim")


def test_param_determined_by_use_is_fine() -> None:
    p = oc.param("p_ok", init=2.0)
    t = p * oc.ndarray(np.ones((2, 3)))
    np.testing.assert_allclose(oc.eval(t), np.full((2, 3), 2.0))
    assert p.shape.output == (2, 3)


# ---- row-rank cycles ------------------------------------------------------------------------


def test_row_rank_cycle_is_an_error_and_names_both_operations() -> None:
    x = oc.param("x_cyc")
    y = oc.param("y_cyc")
    z = x + y  # MARK:cycle-add
    with time_limit(20), pytest.raises(oc.ShapeError) as info:
        # z >= x pointwise, but this asks x to have one more axis than z
        oc.einsum("..a..;..a..i=>..a..", z, x)  # MARK:cycle-einsum
    assert_mentions(info.value, "row-rank cycle", "x_cyc", "einsum")
    assert_located(info.value, "MARK:cycle-add")
    assert_located(info.value, "MARK:cycle-einsum")
    assert len(str(info.value)) < 2000  # runaway rows are abbreviated


# ---- a failure does not poison what comes after ------------------------------------------


def test_failed_operation_leaves_no_pending_constraints() -> None:
    with pytest.raises(oc.ShapeError) as info:
        # two conflicts in one operation: the second must not surface later
        oc.einsum("ij;ij=>ij", oc.ndarray(np.ones((2, 3))), oc.ndarray(np.ones((4, 5))))
    assert "ij;ij=>ij" in str(info.value)
    a, b = np.arange(2.0), np.arange(2.0) + 10
    t = oc.ndarray(a) + oc.ndarray(b)
    np.testing.assert_allclose(oc.eval(t), a + b)


def test_failed_operation_does_not_bind_its_operands() -> None:
    p = oc.param("p_keep", init=1.0)
    with pytest.raises(oc.ShapeError):
        # p's row is bound to (2, 3) by the second operand before the third conflicts
        oc.einsum("ij;ij;ij=>ij", p, oc.ndarray(np.ones((2, 3))), oc.ndarray(np.ones((5, 7))))
    # p's shape is still open: a later, valid use decides it
    t = p * oc.ndarray(np.ones(4))
    np.testing.assert_allclose(oc.eval(t), np.ones(4))
    assert p.shape.output == (4,)


# ---- nothing crashes or hangs ------------------------------------------------------------------


def _random_case(rng: random.Random) -> tuple[str, list[str], list[np.ndarray]]:
    labels = rng.sample("abcd", rng.randint(1, 3))
    sizes = {lbl: rng.randint(1, 3) for lbl in labels}
    ops = ["".join(rng.choice(labels) for _ in range(rng.randint(1, 3)))
           for _ in range(rng.randint(1, 2))]
    used = sorted(set("".join(ops)))
    out = "".join(lbl for lbl in used if rng.random() < 0.5)
    mismatch = rng.random() < 0.6
    arrays = [np.ones([rng.randint(1, 3) if mismatch else sizes[c] for c in o]) for o in ops]
    return ";".join(ops) + "=>" + out, ops, arrays


def _consistent(ops: list[str], arrays: list[np.ndarray]) -> bool:
    """As NumPy: a label has one size within an operand (a diagonal), and across operands
    sizes are equal or 1 (a size-1 axis broadcasts against the label's size)."""
    sizes: dict[str, set[int]] = {}
    for o, a in zip(ops, arrays, strict=True):
        for c in set(o):
            here = {n for ch, n in zip(o, a.shape, strict=True) if ch == c}
            if len(here) > 1:
                return False
            sizes.setdefault(c, set()).update(here)
    return all(len(v - {1}) <= 1 for v in sizes.values())


def test_random_programs_either_work_or_raise_ocannl_errors() -> None:
    rng = random.Random(7)
    errors = 0
    with time_limit(120):
        for _ in range(60):
            spec, ops, arrays = _random_case(rng)
            ok = _consistent(ops, arrays)
            try:
                got = oc.eval(oc.einsum(spec, *map(oc.ndarray, arrays)), precision="float64")
            except oc.OcannlError as e:
                errors += 1
                assert not ok, (spec, e)
                assert isinstance(e, oc.ShapeError), (spec, e)
                continue
            assert ok, spec
            want = np.einsum(spec.replace(";", ",").replace("=>", "->"), *arrays)
            np.testing.assert_allclose(got, want, err_msg=spec)
    assert errors > 5  # the generator does produce bad programs
