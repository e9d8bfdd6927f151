"""The compile passes pause Python's cyclic collector (`lowering.gc_pause`) and restore its
state afterwards, also when a pass fails; user spans from long code objects stay exact."""

from __future__ import annotations

import gc
import runpy
from pathlib import Path

import numpy as np
import pytest

import ocannl_ast as oc
from ocannl_ast.lowering.gc_pause import gc_paused
from ocannl_ast.tensor import pipeline


def test_paused_inside_restored_after() -> None:
    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
        with gc_paused():  # nested: still paused, and the inner exit does not re-enable
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()


def test_restored_after_an_exception() -> None:
    with pytest.raises(ZeroDivisionError), gc_paused():
        _ = 1 / 0
    assert gc.isenabled()


def test_left_off_when_the_caller_turned_it_off() -> None:
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_compile_leaves_the_collector_on_even_when_it_fails(
        monkeypatch: pytest.MonkeyPatch) -> None:
    x = oc.ndarray(np.ones((2, 3), np.float32))

    def failing(ir: object, opts: object) -> object:
        assert not gc.isenabled()  # paused while the passes run
        raise RuntimeError("a failing pass")

    stages = pipeline.STAGES
    monkeypatch.setattr(pipeline, "STAGES", (*stages[:3], pipeline.Stage("fail", failing)))
    with pytest.raises(RuntimeError, match="a failing pass"):
        oc.Context().compile((x * 2.0).forward)
    assert gc.isenabled()
    monkeypatch.setattr(pipeline, "STAGES", stages)
    np.testing.assert_array_equal(oc.Context().eval(x * 2.0), np.full((2, 3), 2.0, np.float32))
    assert gc.isenabled()


def test_spans_from_one_long_code_object_are_exact(tmp_path: Path) -> None:
    """Many ops built by one long piece of module code (a script): each error names the
    line and column of its own operation (the position table is cached per code object)."""
    lines = ["import numpy as np", "import ocannl_ast as oc",
             "a = oc.ndarray(np.ones((2, 3), np.float32))"]
    lines += [f"t{k} = a * {k}.0" for k in range(200)]
    lines += ["bad = a + oc.ndarray(np.ones((4, 5), np.float32))"]
    lines += [f"u{k} = a * {k}.0" for k in range(200)]
    lines += ["oc.Context().get(bad)"]
    script = tmp_path / "long_script.py"
    script.write_text("\n".join(lines) + "\n")
    with pytest.raises(oc.ShapeError) as err:
        runpy.run_path(str(script))
    assert err.value.span is not None
    assert (err.value.span.file, err.value.span.line) == (str(script), 204)
    assert err.value.span.col == len("bad = ")


def test_what_a_pause_allocated_goes_to_the_oldest_generation() -> None:
    """No young collection walks the compiler's long-lived objects when a pause ends: they
    are in the oldest generation, and a cycle among them is still collected by a full
    collection."""
    import weakref

    class Node:
        pass

    gc.collect()
    with gc_paused():
        a, b = Node(), Node()
        a.other, b.other = b, a  # type: ignore[attr-defined]  # a cycle
        held = [Node() for _ in range(1000)]
        gone = weakref.ref(a)
    assert gc.isenabled() and gc.get_count()[0] < 50
    assert any(x is held[0] for x in gc.get_objects(2))
    assert not any(x is held[0] for x in gc.get_objects(0))
    del a, b
    gc.collect(0)
    gc.collect(1)
    assert gone() is not None  # in the oldest generation: young collections skip it
    gc.collect()
    assert gone() is None  # a full collection frees the cycle


def test_objects_the_program_froze_stay_frozen() -> None:
    gc.collect()
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        with gc_paused():
            _ = [object() for _ in range(10)]
        assert gc.get_freeze_count() == frozen  # not unfrozen by the pause
    finally:
        gc.unfreeze()
