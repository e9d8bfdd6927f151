"""Concatenation and its family (seed 004) through `oc.concat`, from the user's side:
concatenate, slices, partial placement, N-ary, nested, along batch/input/output rows, block
matrices and block-diagonal/banded cases, empty components.

Oracles: NumPy (np.concatenate, slicing, np.block) for values; float64 central finite
differences for gradients (every perturbed copy of the graph evaluated by one `oc.eval`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest
from fd_util import central_differences

import ocannl_ast as oc

EPS = 1e-6
RNG = np.random.default_rng(4)


def _param(name: str, arr: np.ndarray, batch: int, inputs: int) -> oc.Tensor:
    d = arr.shape
    return oc.param(name, batch_dims=list(d[:batch]), output_dims=list(d[batch:len(d) - inputs]),
                    input_dims=list(d[len(d) - inputs:]), init=arr.copy())


def _weighted_sum(out: oc.Tensor, W: np.ndarray) -> oc.Tensor:
    oc.infer_shapes(out)
    b, o, i = tuple(out.shape.batch), tuple(out.shape.output), tuple(out.shape.input)
    assert W.shape == b + o + i, (W.shape, b, o, i)
    letters = iter("abcdefghijk")
    bs, os_, is_ = ("".join(next(letters) for _ in r) for r in (b, o, i))
    spec = (f"{bs}|" if bs else "") + (f"{is_}->" if is_ else "") + os_
    w = oc.ndarray(W, batch_axes=len(b), input_axes=len(i))
    return oc.einsum(f"{spec};{spec}=>", out, w)


def check(build_fn: Callable[..., oc.Tensor], arrays: Sequence[np.ndarray],
          np_fn: Callable[..., np.ndarray], *, batch: Sequence[int] | None = None,
          inputs: Sequence[int] | None = None) -> None:
    """Forward value against NumPy, gradients against central finite differences."""
    base = [np.asarray(a, dtype=np.float64) for a in arrays]
    bs = list(batch) if batch is not None else [0] * len(base)
    ins = list(inputs) if inputs is not None else [0] * len(base)
    ref = np.asarray(np_fn(*base), dtype=np.float64)
    W = np.random.default_rng(7).standard_normal(ref.shape)

    def build(arrs: list[np.ndarray]) -> tuple[oc.Tensor, list[oc.Tensor], oc.Tensor]:
        ps = [_param(f"p{k}", a, b, n) for k, (a, b, n) in enumerate(zip(arrs, bs, ins))]
        out = build_fn(*ps)
        return _weighted_sum(out, W), ps, out

    loss, ps, out = build(base)
    value, grads = oc.value_and_grad(loss, ps, precision="float64")
    np.testing.assert_allclose(oc.eval(out, precision="float64"), ref, rtol=1e-12, atol=1e-12)
    assert float(np.asarray(value).reshape(())) == pytest.approx(float((ref * W).sum()),
                                                                 rel=1e-12, abs=1e-12)
    base_loss, nums = central_differences(lambda arrs: build(arrs)[0], base, EPS)
    assert base_loss == pytest.approx(float(np.asarray(value).reshape(())), rel=1e-12, abs=1e-12)
    for k, (g, num) in enumerate(zip(grads, nums)):
        np.testing.assert_allclose(g, num, rtol=1e-6, atol=1e-7,
                                   err_msg=f"gradient of operand {k} vs finite differences")


def r(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape)


# ---- the family, one axis -------------------------------------------------------------------

def test_concatenate_two() -> None:
    check(lambda a, b: oc.concat("a;b=>a^b", a, b), [r(3), r(4)], lambda a, b: np.concatenate([a, b]))


def test_concatenate_n_ary() -> None:
    check(lambda a, b, c: oc.concat("a;b;c=>a^b^c", a, b, c), [r(2), r(1), r(3)],
          lambda a, b, c: np.concatenate([a, b, c]))


def test_concatenate_with_an_empty_component() -> None:
    check(lambda a, b, c: oc.concat("a;b;c=>a^b^c", a, b, c), [r(2), np.zeros(0), r(3)],
          lambda a, b, c: np.concatenate([a, b, c]))


def test_nested_concat() -> None:
    def f(a: Any, b: Any, c: Any) -> Any:
        return oc.concat("x;c=>x^c", oc.concat("a;b=>a^b", a, b), c)
    check(f, [r(2), r(3), r(1)], lambda a, b, c: np.concatenate([a, b, c]))


def test_prefix_and_suffix_extraction() -> None:
    check(lambda x: oc.concat("a^3=>a", x), [r(7)], lambda x: x[:4])
    check(lambda x: oc.concat("3^b=>b", x), [r(7)], lambda x: x[3:])


def test_prefix_inferred_from_context() -> None:
    """`a^b => a` with the result's size fixed by a later einsum: the suffix is inferred
    (the discardable suffix stays open until closing, so context wins over the 0 guess)."""
    def f(x: Any, y: Any) -> Any:
        return oc.einsum("i;i=>i", oc.concat("a^b=>a", x), y)
    check(f, [r(6), r(2)], lambda x, y: x[:2] * y)


def test_prefix_alone_takes_everything() -> None:
    """Nothing fixes the prefix: the discardable suffix closes to 0, the prefix is all."""
    x = r(5)
    out = oc.concat("a^b=>a", oc.ndarray(x))
    np.testing.assert_allclose(oc.eval(out), x.astype(np.float32))


def test_middle_extraction() -> None:
    check(lambda x: oc.concat("2^b^1=>b", x), [r(6)], lambda x: x[2:5])


def test_partial_placement() -> None:
    check(lambda x: oc.concat("a=>a^2", x), [r(3)], lambda x: np.concatenate([x, np.zeros(2)]))
    check(lambda x: oc.concat("b=>1^b^2", x), [r(3)],
          lambda x: np.concatenate([np.zeros(1), x, np.zeros(2)]))


def test_three_way_concat_with_one_unknown_component() -> None:
    """`a^b^c` where the result's size is fixed by a later einsum and one component only
    appears there: c = 7 - 2 - 3, a slot no source fills (zeros)."""
    def f(a: Any, b: Any, y: Any) -> Any:
        return oc.einsum("i;i=>i", oc.concat("a;b=>a^b^c", a, b), y)
    check(f, [r(2), r(3), r(7)], lambda a, b, y: np.concatenate([a, b, np.zeros(2)]) * y)


def test_unfilled_result_component_is_silently_empty() -> None:
    """The seed's open question, decided: `a; b => a^b^c` with nothing sizing c gives c
    the empty summand, silently: it is the very rule that makes `a => a^b` a partial
    placement (b is an unfilled result component there too), so it cannot be an error."""
    a, b = r(2), r(3)
    out = oc.concat("a;b=>a^b^c", oc.ndarray(a), oc.ndarray(b))
    np.testing.assert_allclose(oc.eval(out), np.concatenate([a, b]).astype(np.float32))


# ---- other rows, broadcasting partners, several axes ----------------------------------------

def test_concat_along_output_with_row_variables() -> None:
    check(lambda a, b: oc.concat("...|i->a;...|i->b=>...|i->a^b", a, b),
          [r(2, 3, 4), r(2, 5, 4)], lambda a, b: np.concatenate([a, b], axis=1),
          batch=[1, 1], inputs=[1, 1])


def test_concat_along_batch() -> None:
    check(lambda a, b: oc.concat("a|o;b|o=>a^b|o", a, b), [r(2, 3), r(1, 3)],
          lambda a, b: np.concatenate([a, b], axis=0), batch=[1, 1])


def test_concat_along_input() -> None:
    check(lambda a, b: oc.concat("a->o;b->o=>a^b->o", a, b), [r(3, 2), r(3, 4)],
          lambda a, b: np.concatenate([a, b], axis=1), inputs=[1, 1])


def test_concat_with_broadcasting_partner() -> None:
    def f(a: Any, b: Any, s: Any) -> Any:
        return oc.concat("i,a;i,b=>i,a^b", a, b) * s
    check(f, [r(2, 3), r(2, 1), r(4)],
          lambda a, b, s: np.concatenate([a, b], axis=1) * s)


def test_block_matrix() -> None:
    spec = "r,c;r,t;s,c;s,t=>r^s,c^t"
    check(lambda a, b, c, d: oc.concat(spec, a, b, c, d),
          [r(2, 3), r(2, 1), r(1, 3), r(1, 1)], lambda a, b, c, d: np.block([[a, b], [c, d]]))


def test_block_diagonal_leaves_gaps_zero() -> None:
    def ref(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.block([[a, np.zeros((2, 1))], [np.zeros((3, 3)), b]])
    check(lambda a, b: oc.concat("r,c;s,t=>r^s,c^t", a, b), [r(2, 3), r(3, 1)], ref)


def test_shared_iterators_give_a_banded_result() -> None:
    """Row and column split driven by the same iterators: only the diagonal is active."""
    check(lambda a, b: oc.concat("a;b=>a^b,a^b", a, b), [r(2), r(3)],
          lambda a, b: np.diag(np.concatenate([a, b])))


def test_split_both_halves_recombine() -> None:
    def f(x: Any) -> Any:
        lo = oc.concat("a^3=>a", x)
        hi = oc.concat("2^b=>b", x)
        return oc.concat("a;b=>a^b", hi, lo)
    check(f, [r(5)], lambda x: np.concatenate([x[2:], x[:2]]))


# ---- negative cases: located ShapeErrors -----------------------------------------------------

def test_overlapping_slices_are_a_located_error() -> None:
    a, b = oc.ndarray(r(3)), oc.ndarray(r(3))
    out = oc.concat("a;a=>a^b", a, b)  # both sources claim the `a` slice
    with pytest.raises(oc.ShapeError, match="overlapping") as e:
        oc.eval(out)
    assert e.value.span is not None and e.value.span.file.endswith("test_concat.py")


def test_contradictory_component_sizes_are_a_located_error() -> None:
    x = oc.concat("a^b=>a", oc.ndarray(r(5)))
    # einsum operands broadcast (label >= operand axis), so the conflict surfaces when
    # closing sizes the prefix from its context: it cannot be longer than 5
    t = oc.einsum("i;i=>i", x, oc.ndarray(r(7)))
    with pytest.raises(oc.ShapeError, match="contradictory component sizes") as e:
        oc.infer_shapes(t)
    assert e.value.span is not None and e.value.span.file.endswith("test_concat.py")


def test_integer_components_too_large_are_a_located_error() -> None:
    with pytest.raises(oc.ShapeError, match="contradictory component sizes") as e:
        oc.concat("3^a^4=>a", oc.ndarray(r(5)))
    assert e.value.span is not None and e.value.span.file.endswith("test_concat.py")


def test_repeated_component_is_a_located_error() -> None:
    out = oc.concat("a=>a^a", oc.ndarray(r(2)))
    with pytest.raises(oc.ShapeError, match="repeats a component") as e:
        oc.eval(out)
    assert e.value.span is not None and e.value.span.file.endswith("test_concat.py")


def test_ambiguous_split_is_an_error() -> None:
    with pytest.raises(oc.ShapeError, match="cannot tell how the concatenated axis splits"):
        oc.eval(oc.concat("a^b=>a^b", oc.ndarray(r(5))))
