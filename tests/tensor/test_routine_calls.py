"""Calling a compiled routine with its static arguments every way a user writes it: by
name, by position, mixed, wrong, repeated, with NumPy ints, and with names that are Python
keywords or clash with the call's own parameter names. Every call that runs must add the
right row (NumPy oracle); every wrong one must raise a located ArgumentError and run
nothing."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import ocannl_ast as oc

ROWS = np.arange(12.0).reshape(4, 3)


def _accumulating_step(*names: str) -> tuple[oc.Context, Any, oc.Tensor]:
    """``acc += rows[s0] * 10**0 + rows[s1] * 10**1 + ...``, one static per name."""
    rows = oc.ndarray(ROWS, batch_axes=1, label="rows")
    acc = oc.param("acc", init=np.zeros(3), output_dims=[3])
    statics = [oc.static_index(n) for n in names]
    terms = [rows.batch_slice(s) * float(10 ** k) for k, s in enumerate(statics)]

    @oc.cd
    def add(acc, terms):
        for t in terms:
            acc += t

    ctx = oc.Context(precision="float64")
    return ctx, ctx.compile(add(acc, terms)), acc


def _want(*calls: tuple[int, ...]) -> np.ndarray:
    out = np.zeros(3)
    for statics in calls:
        for k, s in enumerate(statics):
            out += ROWS[s] * 10 ** k
    return out


def test_one_static_by_name_and_by_position_agree() -> None:
    ctx, step, acc = _accumulating_step("batch")
    step(batch=1)
    step(2)
    step(batch=1)  # the fast path after a checked run
    for i in range(4):
        step(batch=i)
        step(i)
    step(np.int64(3))
    step(batch=np.int32(0))
    want = _want((1,), (2,), (1,), *[(i,) for i in range(4) for _ in range(2)], (3,), (0,))
    np.testing.assert_array_equal(ctx.get(acc), want)


def test_two_statics_every_way() -> None:
    ctx, step, acc = _accumulating_step("i", "j")
    step(i=1, j=2)
    step(j=3, i=0)
    step(2, 1)
    step(3, j=0)  # positional then by name
    np.testing.assert_array_equal(ctx.get(acc), _want((1, 2), (0, 3), (2, 1), (3, 0)))


@pytest.mark.parametrize("names", [("self",), ("args", "kwargs"), ("_r_self",), ("lambda",),
                                   ("type", "int"), ("len",)])
def test_static_names_that_clash_with_python_names(names: tuple[str, ...]) -> None:
    ctx, step, acc = _accumulating_step(*names)
    step(**{n: k for k, n in enumerate(names)})
    step(**{n: 1 for n in names})
    step(*[2] * len(names))
    want = _want(tuple(range(len(names))), (1,) * len(names), (2,) * len(names))
    np.testing.assert_array_equal(ctx.get(acc), want)


@pytest.mark.parametrize("call", [
    lambda s: s(),
    lambda s: s(1, 2),
    lambda s: s(1, batch=2),
    lambda s: s(batc=1),
    lambda s: s(batch=1, other=2),
    lambda s: s(batch=1.0),
    lambda s: s(batch="1"),
    lambda s: s(batch=None),
])
def test_wrong_static_arguments_are_located_errors_and_run_nothing(call: Any) -> None:
    ctx, step, acc = _accumulating_step("batch")
    step(batch=1)  # the next call would take the fast path if it could
    with pytest.raises(oc.ArgumentError) as info:
        call(step)
    assert info.value.span is not None and info.value.span.file == __file__, str(info.value)
    step(batch=2)
    np.testing.assert_array_equal(ctx.get(acc), _want((1,), (2,)))


@pytest.mark.parametrize("value", [-1, 4, 2**63, -(2**63) - 1])
def test_out_of_range_statics_run_nothing(value: int) -> None:
    ctx, step, acc = _accumulating_step("batch")
    step(batch=0)
    with pytest.raises((oc.ArgumentError, oc.RuntimeDataError)):
        step(batch=value)
    with pytest.raises((oc.ArgumentError, oc.RuntimeDataError)):
        step(value)
    step(batch=3)
    np.testing.assert_array_equal(ctx.get(acc), _want((0,), (3,)))


def test_a_routine_is_still_a_routine() -> None:
    _, step, _ = _accumulating_step("batch")
    assert isinstance(step, oc.Routine)
    assert type(step).__name__ == "Routine"


def test_threads_sharing_a_routine_lose_no_update() -> None:
    """Calls are serialized per context: two threads running the same accumulating step
    (fast path and checked path interleaved by `ctx.get`) add every row exactly once."""
    import threading

    ctx, step, acc = _accumulating_step("batch")
    step(batch=0)
    calls = 300

    def work(k: int) -> None:
        for i in range(calls):
            step(batch=(i + k) % 4)
            if i % 50 == 0:
                ctx.get(acc)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    want = _want((0,), *[((i + k) % 4,) for k in range(2) for i in range(calls)])
    np.testing.assert_array_equal(ctx.get(acc), want)
