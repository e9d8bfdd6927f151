"""Assignments-IR verifier: every malformed shape is reported (all problems at once),
and the IR the pipeline builds from public-API programs passes."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

import ocannl_ast as oc
from ocannl_ast.errors import OcannlError
from ocannl_ast.lowering import assignments as A
from ocannl_ast.lowering.asgn_verify import AsgnIRError, verify_asgn
from ocannl_ast.lowering.loop_ir import BinOp, Buffer, IndexExpr, Symbol, UnOp
from ocannl_ast.tensor.pipeline import Options, run

I, J = Symbol(1, "i"), Symbol(2, "j")
X = Buffer(10, "x", (2, 3))
Y = Buffer(11, "y", (2,))


def ix(*syms: Symbol) -> tuple[IndexExpr, ...]:
    return tuple(IndexExpr(((1, s),)) for s in syms)


def proj(lhs: tuple[IndexExpr, ...] = ix(I), rhs: tuple[tuple[IndexExpr, ...], ...] = (ix(I, J),),
         lhs_dims: tuple[int, ...] = (2,), rhs_dims: tuple[tuple[int, ...], ...] = ((2, 3),),
         product: tuple[tuple[Symbol, int], ...] = ((I, 2), (J, 3))) -> A.Projections:
    return A.Projections(product, lhs, rhs, lhs_dims, rhs_dims)


def row_sum(**changes: Any) -> A.Accum:
    """y[i] =:+ x[i, j] (a well-formed reduction), with fields replaced."""
    base = A.Accum(Y, BinOp.ADD, True, A.Prim(UnOp.IDENTITY, (A.Arg(0),)), (X,), proj())
    return dataclasses.replace(base, **changes)


def problems(code: A.Asgn) -> list[str]:
    with pytest.raises(AsgnIRError) as e:
        verify_asgn(code)
    assert isinstance(e.value, OcannlError)
    return e.value.problems


def test_well_formed_code_passes() -> None:
    fill = A.Fetch(Y, A.ConstantFill(0.0))
    verify_asgn(A.seq(fill, row_sum(), A.CheckStatic(I, 4, 1)))
    verify_asgn(A.Noop())


BAD = {
    "dims": (A.seq(A.Fetch(X, A.ConstantFill(1.0)), row_sum(rhs=(Buffer(10, "x", (3,)),))),
             "buffer id 10 is 'x' (2, 3) elsewhere, here 'x' (3,)"),
    "arity": (row_sum(projections=proj(rhs=(ix(I),))), "1 indices for rank-2 'x'"),
    "rhs dims": (row_sum(projections=proj(rhs_dims=((2, 2),))), "projections give 'x' dims"),
    "lhs dims": (row_sum(projections=proj(lhs_dims=(3,))), "projections give 'y' dims"),
    "map count": (row_sum(projections=proj(rhs=(), rhs_dims=())), "0 right-hand index maps"),
    "accumulator": (row_sum(accum=BinOp.LT), "lt is not an accumulation operator"),
    "operand index": (row_sum(expr=A.Arg(1)), "operand 1 read, but the assignment has 1"),
    "unused operand": (row_sum(expr=A.Lit(1.0)), "operand 0 ('x') is never read"),
    "prim arity": (row_sum(expr=A.Prim(BinOp.ADD, (A.Arg(0),))), "add takes 2 argument(s)"),
    "zero coeff": (row_sum(projections=proj(lhs=(IndexExpr(((0, I),)),))), "zero coefficient"),
    "iterator twice": (row_sum(projections=proj(product=((I, 2), (I, 2)))), "appears twice"),
    "negative extent": (row_sum(projections=proj(product=((I, 2), (J, -1)))), "negative extent"),
    "nested seq": (A.Seq((A.Seq((A.Fetch(Y, A.ConstantFill(0.0)),) * 2), row_sum())), "nested"),
    "short seq": (A.Seq((row_sum(),)), "a Seq of 1 item(s)"),
    "noop in seq": (A.Seq((A.Noop(), row_sum())), "a Noop inside a Seq"),
    "check bound": (A.CheckStatic(I, -1, 1), "negative bound"),
    "check code": (A.CheckStatic(I, 3, 0), "not a nonzero C int"),
    "random key": (A.Fetch(Y, A.RandomUniform((1, 2, 3), -1.0, 1.0)), "four 32-bit words"),
    "random range": (A.Fetch(Y, A.RandomUniform((1, 2, 3, 4), 1.0, -1.0)), "is empty"),
    "negative dims": (A.Fetch(Buffer(12, "z", (-1,)), A.ConstantFill(0.0)), "negative dims"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_each_malformed_shape_is_reported(case: str) -> None:
    code, expected = BAD[case]
    found = problems(code)
    assert any(expected in p for p in found), found


def test_every_problem_is_listed_at_once() -> None:
    found = problems(A.Seq((row_sum(accum=BinOp.EQ), A.CheckStatic(I, -2, 0))))
    assert len(found) == 3, found


def _programs() -> dict[str, oc.Code]:
    oc.set_seed(3)
    x = oc.ndarray(np.arange(3.0), label="x")
    w = oc.param("w", input_dims=[3], output_dims=[4])
    v = oc.param("v", output_dims=[4, 3])
    b = oc.static_index("b")
    xs = oc.ndarray(np.ones((5, 3)), batch_axes=1, label="xs")
    loss = oc.einsum("i=>", oc.relu(w @ x) + oc.einsum_max("ij=>i", v))
    return {"forward": loss.forward_all(), "backprop": loss.backprop,
            "train": oc.grad_update(loss) + oc.sgd_update(loss, learning_rate=0.1),
            "slice": oc.exp(xs.batch_slice(b)).forward}


@pytest.mark.parametrize("name", ["forward", "backprop", "train", "slice"])
def test_pipeline_assignments_pass_the_verifier(name: str) -> None:
    out = run(_programs()[name], Options(name))
    for stage, ir in out.trace:
        if stage in ("assignments", "simplify"):
            verify_asgn(ir)
