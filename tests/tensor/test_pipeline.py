"""The compile pipeline (`tensor/pipeline.py`): one visible sequence of passes that both
`Context.compile` and `oc.render` run, verified between stages with OCANNL_AST_CHECK=1."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import ocannl_ast as oc
from ocannl_ast.backends import get_backend
from ocannl_ast.lowering import assignments as A
from ocannl_ast.lowering.asgn_verify import AsgnIRError
from ocannl_ast.lowering.loop_ir import LoopProgram
from ocannl_ast.tensor import pipeline
from ocannl_ast.tensor.node import Code


def _mlp() -> oc.Tensor:
    x = oc.ndarray(np.linspace(-1.0, 1.0, 3), label="x")
    w = oc.param("w", input_dims=[3], output_dims=[2], init=np.arange(6.0).reshape(2, 3) - 2)
    return oc.einsum("i=>", oc.relu(w @ x))


def test_stages_in_order() -> None:
    names = [s.name for s in pipeline.STAGES]
    assert names == ["close_shapes", "projections", "assignments", "simplify", "lower",
                     "fold_constants", "unroll", "inline", "fuse_epilogue", "interchange",
                     "fuse_nests", "parallel", "share_storage", "bind_statics", "name"]


def test_each_stage_turns_one_ir_into_the_next() -> None:
    out = pipeline.run(_mlp().forward, pipeline.Options("mlp"))
    kinds = [type(ir) for _, ir in out.trace]
    assert kinds[0] is Code and kinds[1] is pipeline.ProjectedCode
    assert all(isinstance(ir, A.Seq | A.Accum | A.Fetch) for ir in (out.trace[2][1],
                                                                    out.trace[3][1]))
    assert kinds[4] is LoopProgram and kinds[5] is LoopProgram
    assert out.prog is out.trace[-1][1] and out.asgn is out.trace[3][1]


def test_render_is_what_compile_builds() -> None:
    """`oc.render` and `Context.compile` run the same pipeline: the rendered source is the
    backend's rendering of the program the context compiles (routine names aside)."""
    y = _mlp()
    ctx = oc.Context()
    prog, _, _ = ctx.lower_code(y.forward, name="routine")
    assert oc.render(y.forward) == get_backend("c").render(prog)
    r = ctx.compile(y.forward)
    r()
    w = np.arange(6.0).reshape(2, 3) - 2
    np.testing.assert_allclose(ctx.get(y), [np.maximum(w @ np.linspace(-1, 1, 3), 0).sum()],
                               rtol=1e-6)


def test_static_arguments_are_bound_by_their_own_pass() -> None:
    b = oc.static_index("b")
    xs = oc.ndarray(np.arange(6.0).reshape(3, 2), batch_axes=1, label="xs")
    y = xs.batch_slice(b) * 2.0
    out = pipeline.run(y.forward, pipeline.Options("slice"))
    assert out.trace[4][1].static_args == ()  # lowering alone binds none
    assert [s.name for s in out.prog.static_args] == ["b"]
    ctx = oc.Context()
    r = ctx.compile(y.forward)
    r(b=2)
    np.testing.assert_allclose(ctx.get(y), [8.0, 10.0])


def test_projections_are_derived_once_per_operation() -> None:
    """The stage returns what it derived; a caller passing it back is not derived again
    (a context does so), and nothing is kept on the graph."""
    y = _mlp()
    first = pipeline.run(y.forward, pipeline.Options("a"))
    again = pipeline.run(y.forward, pipeline.Options("b", projections=first.projections))
    assert first.projections and all(again.projections[r] is p
                                      for r, p in first.projections.items())
    fresh = pipeline.run(y.forward, pipeline.Options("c"))
    assert all(fresh.projections[r] is not p for r, p in first.projections.items())


def _corrupting_simplify(asgn: A.Asgn, opts: pipeline.Options) -> A.Asgn:
    """A broken pass: reads operand 7 of the first assignment."""
    items = asgn.items if isinstance(asgn, A.Seq) else (asgn,)
    bad = [dataclasses.replace(it, expr=A.Arg(7)) if isinstance(it, A.Accum) else it
           for it in items]
    return A.seq(*bad)


def _with_broken_simplify() -> tuple[pipeline.Stage, ...]:
    return tuple(dataclasses.replace(s, run=_corrupting_simplify) if s.name == "simplify"
                 else s for s in pipeline.STAGES)


def test_a_broken_pass_is_caught_by_the_verifier_after_it(monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    monkeypatch.setenv("OCANNL_AST_CHECK", "1")
    monkeypatch.setattr(pipeline, "STAGES", _with_broken_simplify())
    with pytest.raises(AsgnIRError, match="operand 7 read"):
        oc.Context().compile(_mlp().forward)


def test_verifiers_run_only_when_checking(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    stages = tuple(dataclasses.replace(s, verify=lambda ir, n=s.name: calls.append(n))
                   if s.verify is not None else s for s in pipeline.STAGES)
    monkeypatch.setattr(pipeline, "STAGES", stages)
    monkeypatch.setenv("OCANNL_AST_CHECK", "0")
    oc.render(_mlp().forward)
    assert calls == []
    monkeypatch.setenv("OCANNL_AST_CHECK", "1")
    oc.render(_mlp().forward)
    assert calls == ["assignments", "simplify", "bind_statics"]
