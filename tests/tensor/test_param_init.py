"""The default param init is seed 001's expression (tensor/random_init.py): values equal
the NumPy reference built on lowering/threefry.py, deterministic per seed, keyed by the
param's unique name (`tensor.name`: a repeated "w" is "w_1"), bit-identical across processes, roughly uniform."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import ocannl_ast as oc
from ocannl_ast.tensor.seed import _seed
from ocannl_ast.tensor.random_init import reference_values


def _init(p: oc.Tensor, precision: str = "float32") -> np.ndarray:
    ctx = oc.Context(precision=precision)
    ctx.compile((p * 1.0).forward)()
    return ctx.get(p)


@pytest.mark.parametrize("precision", ["float32", "float64"])
@pytest.mark.parametrize("dims", [(1,), (3,), (5, 7), (2, 3, 3)])
def test_values_equal_numpy_reference(precision: str, dims: tuple[int, ...]) -> None:
    p = oc.param("pref", output_dims=list(dims[:1]), input_dims=list(dims[1:]))
    assert p.init_key is not None
    np.testing.assert_array_equal(_init(p, precision),
                                  reference_values(p.init_key, _seed[0], dims, precision))


def test_deterministic_per_seed() -> None:
    old = _seed[0]
    try:
        oc.set_seed(7)
        pa = oc.param("ds", output_dims=[20])
        pb = oc.param("ds", output_dims=[20])  # named "ds_1": a different stream
        a, b = _init(pa), _init(pb)
        oc.set_seed(7)
        # built after a context was created (a new naming epoch): "ds" again, same stream
        pa2 = oc.param("ds", output_dims=[20])
        a2 = _init(pa2)
        oc.set_seed(8)
        pc = oc.param("ds", output_dims=[20])
        c = _init(pc)
    finally:
        oc.set_seed(old)
    assert pb.name == pa.name + "_1" and pa2.name == pc.name == pa.name
    assert not np.array_equal(a, b) and not np.array_equal(a2, c)
    np.testing.assert_array_equal(a2, a)
    assert pa2.init_key is not None and pc.init_key is not None
    np.testing.assert_array_equal(a2, reference_values(pa2.init_key, 7, (20,)))
    np.testing.assert_array_equal(c, reference_values(pc.init_key, 8, (20,)))


def test_independent_of_unrelated_tensor_creation() -> None:
    p = oc.param("indep_a", output_dims=[6])
    first = _init(p)
    for _ in range(5):
        oc.number(1.0) + oc.param("other_name", output_dims=[2])
    q = oc.param("indep_b", output_dims=[6])
    assert p.init_key == ("indep_a", 0) and q.init_key == ("indep_b", 0)
    np.testing.assert_array_equal(first, reference_values(("indep_a", 0), _seed[0], (6,)))


@pytest.mark.parametrize("precision", ["float32", "float64"])
def test_distribution_roughly_uniform(precision: str) -> None:
    v = _init(oc.param("dist", output_dims=[100], input_dims=[100]), precision).ravel()
    assert v.min() >= -1.0 and v.max() < 1.0
    assert abs(v.mean()) < 0.03  # sd of the mean: 0.577 / 100
    assert abs(v.var() - 1 / 3) < 0.02
    hist, _ = np.histogram(v, bins=10, range=(-1, 1))
    assert (abs(hist - 1000) < 150).all()


def test_bit_identical_across_processes() -> None:
    prog = ("import ocannl_ast as oc; oc.set_seed(42); oc.number(3.0);"
            "p = oc.param('xproc', output_dims=[4], input_dims=[3]); ctx = oc.Context();"
            "ctx.compile((p * 1.0).forward)(); print(ctx.get(p).tobytes().hex())")
    outs = [subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True,
                           check=True).stdout.strip() for _ in range(2)]
    assert outs[0] == outs[1]
    got = np.frombuffer(bytes.fromhex(outs[0]), np.float32).reshape(4, 3)
    np.testing.assert_array_equal(got, reference_values(("xproc", 0), 42, (4, 3)))


def test_init_array_of_another_shape_is_an_error_not_a_reshape() -> None:
    """Found by a user-side check: a (2, 3) array for a (3, 2) weight was reshaped row-major
    and the model trained from scrambled weights. Flat data and size-1 axes still fit."""
    init = np.arange(6.0).reshape(2, 3)
    w = oc.param("w_t", output_dims=[3], input_dims=[2], init=init)
    with pytest.raises(oc.RuntimeDataError, match=r"'w_t' has dims \(3, 2\).*shape \(2, 3\): "
                                                  r"transposed\?") as e:
        oc.eval(w)
    assert "test_param_init.py" in str(e.value)
    w2 = oc.param("w_3d", output_dims=[3, 2], init=np.arange(6.0).reshape(2, 3))
    with pytest.raises(oc.RuntimeDataError, match="'w_3d' has dims"):
        oc.eval(w2)
    flat = oc.param("w_flat", output_dims=[3], input_dims=[2], init=np.arange(6.0))
    np.testing.assert_array_equal(oc.eval(flat), np.arange(6.0).reshape(3, 2))
    col = oc.param("w_col", output_dims=[3], init=np.arange(3.0).reshape(3, 1))
    np.testing.assert_array_equal(oc.eval(col), [0.0, 1.0, 2.0])
    exact = oc.param("w_ok", output_dims=[3], input_dims=[2], init=init.T)
    np.testing.assert_array_equal(oc.eval(exact @ oc.ndarray([1.0, 0.0])), [0.0, 1.0, 2.0])
