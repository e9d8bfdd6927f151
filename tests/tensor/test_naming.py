"""`tensor.name`: unique, stable, hierarchical names (ocannl_ast.naming), from the user's
side: @op scopes, repeated layers numbered, optimizer state under its param, every tensor
named, the same names in a fresh process, the default init keyed by the name."""

# Written partly in the @op dialect: names declared inline ({w_fail}) exist after rewriting.
# ruff: noqa: F821, F841

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest

import ocannl_ast as oc


def _x(features: int = 3) -> oc.Tensor:
    return oc.term("x", batch_dims=[2], output_dims=[features])


@oc.op
def two_layers(x):
    first = oc.nn.linear(3)
    return first(first(x)) + oc.nn.linear(3)(x)


@oc.op
def block(x):
    return {scale := 2.0} * two_layers(x)


@oc.op
def failing(x):
    y = {w_fail} * x
    raise ValueError(f"boom {y.name}")


def _tail(name: str) -> str:
    """The name without its top-level scope segment (numbered by earlier tests)."""
    return name.split(".", 1)[1]


def test_mlp_names_are_hierarchical_and_numbered() -> None:
    model = oc.nn.mlp([4, 4, 1])
    names = [p.name for p in model(_x()).params()]
    top = names[0].split(".")[0]
    assert top.startswith("mlp")
    assert names == [f"{top}.linear.w", f"{top}.linear.b", f"{top}.linear_1.w",
                     f"{top}.linear_1.b", f"{top}.linear_2.w", f"{top}.linear_2.b"]


def test_user_op_calling_a_layer_twice() -> None:
    y = two_layers(_x())
    names = [p.name for p in y.params()]
    assert [_tail(n) for n in names] == ["linear.w", "linear.b", "linear_1.w", "linear_1.b"]
    # the layer used twice shares its params: each name once
    assert len(set(names)) == len(names) == 4
    again = [p.name for p in two_layers(_x()).params()]
    assert [_tail(n) for n in again] == [_tail(n) for n in names]
    assert not set(again) & set(names), "a second call is a second scope instance"
    assert again[0].split(".")[0] != names[0].split(".")[0]


def test_nested_ops_give_nested_scopes() -> None:
    y = block(_x())
    names = [p.name for p in y.params()]
    top = names[0].split(".")[0]
    assert top.startswith("block")
    assert sorted(names) == sorted([f"{top}.scale", f"{top}.two_layers.linear.w",
                                    f"{top}.two_layers.linear.b",
                                    f"{top}.two_layers.linear_1.w",
                                    f"{top}.two_layers.linear_1.b"])


def test_top_level_repeated_declarations_are_numbered() -> None:
    a = oc.param("rep_decl", output_dims=[2])
    b = oc.param("rep_decl", output_dims=[2])
    c = oc.term("rep_decl", output_dims=[2])
    assert (a.name, b.name, c.name) == ("rep_decl", "rep_decl_1", "rep_decl_2")


def test_labels_with_separators_are_sanitized() -> None:
    a = oc.param("odd.na/me#x", output_dims=[2])
    b = oc.param("odd_na_me_x", output_dims=[2])
    assert a.name == "odd_na_me_x" and b.name == "odd_na_me_x_1"
    assert a.label == "odd.na/me#x"


def test_every_tensor_has_a_unique_name() -> None:
    x = _x()
    y = oc.nn.softmax(two_layers(x) * 2.0 + 1.0)
    tensors = y.subgraph()
    names = [t.name for t in tensors]
    assert all(isinstance(n, str) and n for n in names)
    assert len(set(names)) == len(names)
    assert x.name.startswith("x")


def _saved_names(ctx: oc.Context, tmp_path: Path) -> set[str]:
    from safetensors.numpy import load_file

    ctx.save(tmp_path / "names.safetensors")
    return set(load_file(tmp_path / "names.safetensors"))


def test_optimizer_state_is_named_under_its_param(tmp_path: Path) -> None:
    model = oc.nn.mlp([2, 1])
    x, t = _x(2), oc.term("t", batch_dims=[2], output_dims=[1])
    loss = oc.nn.mse(model(x), t)
    ctx = oc.Context()
    ctx.compile([oc.grad_update(loss), oc.adam_update(loss),
                 oc.sgd_update(loss, learning_rate=0.1, momentum=0.9)])
    names = _saved_names(ctx, tmp_path)
    params = {p.name for p in loss.params()}
    assert params <= names
    for p in params:
        for state in ("adam_m", "adam_v", "adam_c1", "adam_c2", "sgd_momentum"):
            assert f"{p}/{state}" in names
    assert all(n in params or n.split("/")[0] in params for n in names)
    # a second optimizer over the same params has its own state
    ctx.compile([oc.grad_update(loss), oc.adam_update(loss)])
    first = loss.params()[0].name
    assert f"{first}/adam_m_1" in _saved_names(ctx, tmp_path)


def test_scope_is_left_when_an_op_raises() -> None:
    with pytest.raises(ValueError):
        failing(_x())
    p = oc.param("after_fail", output_dims=[1])
    assert p.name == "after_fail"  # top level again, not inside `failing`


def test_threads_start_at_top_level() -> None:
    out: list[str] = []

    def build() -> None:
        out.append(oc.param("threaded", output_dims=[1]).name)

    th = [threading.Thread(target=build) for _ in range(4)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    assert sorted(out) == ["threaded", "threaded_1", "threaded_2", "threaded_3"]


def test_default_init_is_keyed_by_the_unique_name() -> None:
    """Two params both declared `w` (two linear layers) get different values; the same
    program gives the same values whatever was created before it, up to the names."""
    from ocannl_ast.tensor.seed import _seed
    from ocannl_ast.tensor.random_init import reference_values

    y = two_layers(_x())
    ctx = oc.Context()
    x = next(t for t in y.subgraph() if t.label == "x")
    ctx.set(x, np.ones((2, 3)))
    ctx.compile(y.forward)()
    w0, _, w1, _ = y.params()
    a, b = ctx.get(w0), ctx.get(w1)
    assert a.shape == b.shape == (3, 3) and not np.array_equal(a, b)
    # linear's weights default to torch's init, U(+-1/sqrt(fan_in)), fan_in 3 here
    d = oc.init.kaiming_uniform().resolve(w0)
    assert np.isclose(d.high, 1 / np.sqrt(3)) and d.low == -d.high
    np.testing.assert_array_equal(a, reference_values((w0.name, 0), _seed[0], (3, 3),
                                                      low=d.low, high=d.high))
    np.testing.assert_array_equal(b, reference_values((w1.name, 0), _seed[0], (3, 3),
                                                      low=d.low, high=d.high))


_PROGRAM = """
import sys
sys.path.insert(0, {here!r})
import ocannl_ast as oc
import test_naming as m
x = oc.term("x", batch_dims=[2], output_dims=[3])
y = m.block(x) + oc.nn.mlp([3, 3])(x) + m.two_layers(x)
print(sorted(t.name for t in y.subgraph()))
"""


def test_names_are_stable_across_processes(tmp_path: Path) -> None:
    code = textwrap.dedent(_PROGRAM.format(here=str(Path(__file__).parent)))
    outs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           check=True).stdout for _ in range(2)]
    assert outs[0] == outs[1]
    assert "'block.two_layers.linear_1.w'" in outs[0]
    assert "'mlp.linear_1.b'" in outs[0] and "'two_layers.linear.w'" in outs[0]


def test_name_is_read_only() -> None:
    p = oc.param("ro_name", output_dims=[1])
    with pytest.raises(AttributeError):
        p.name = "other"  # type: ignore[misc]
    assert p.name == "ro_name"
