"""Before→after golden tests of the @op/@cd transformers (tests/golden/rewrite/*.py).

Each `<case>.before.py` holds one decorated def; `<case>.after.py` is what `rewrite_source`
makes of it (behind a two-line lint header). Regenerate with OCANNL_AST_REGEN_GOLDEN=1 and
review the diff: the .after files are the specification of the transformer.
"""

from __future__ import annotations

import ast
import re

import pytest
from golden_util import GOLDEN_DIR, assert_golden

from ocannl_ast.rewrite import rewrite_source

GOLDEN = GOLDEN_DIR / "rewrite"
HEADER = "# ruff: noqa\n# mypy: ignore-errors\n"
CASES = sorted(p.name.removesuffix(".before.py") for p in GOLDEN.glob("*.before.py"))

#: Every row of DESIGN.md's two dialect tables, and the named-index forms, has a case.
REQUIRED = {
    "op_compose", "op_pointwise", "op_numbers", "op_literal_matrix", "op_literal_batch",
    "op_param", "op_param_init", "op_param_fields", "op_einsum_calls", "op_batch_slice",
    "op_mlp_layer", "op_hoist_scopes", "op_named_sum", "op_named_matmul", "op_named_max",
    "op_named_no_reducer", "op_named_ellipsis", "op_named_affine", "op_named_values",
    "op_named_concat", "cd_assign", "cd_reducers", "cd_augmented", "cd_explicit_accum",
    "cd_logic", "cd_projections", "cd_compose", "cd_prims", "cd_grad_value",
    "cd_inline_nodes", "cd_slot_names", "cd_sgd", "cd_control", "cd_named_matmul",
    "cd_named_conv", "cd_named_affine", "cd_named_concat", "cd_named_misc",
}


def _kind_and_name(src: str) -> tuple[str, str]:
    kind = re.search(r"^@(op|cd)\b", src, re.MULTILINE)
    name = re.search(r"^def (\w+)", src, re.MULTILINE)
    assert kind and name, "a golden input holds one top-level def decorated with @op or @cd"
    return kind.group(1), name.group(1)


def _rewrite(case: str) -> str:
    src = (GOLDEN / f"{case}.before.py").read_text()
    kind, name = _kind_and_name(src)
    return HEADER + rewrite_source(src, kind, name)  # type: ignore[arg-type]


def test_every_dialect_row_has_a_case() -> None:
    assert set(CASES) >= REQUIRED, sorted(REQUIRED - set(CASES))


@pytest.mark.parametrize("case", CASES)
def test_golden(case: str) -> None:
    assert_golden(f"rewrite/{case}.after.py", _rewrite(case))


@pytest.mark.parametrize("case", CASES)
def test_golden_output_is_valid_python(case: str) -> None:
    tree = ast.parse(_rewrite(case))
    (fn,) = tree.body
    assert isinstance(fn, ast.FunctionDef) and not fn.decorator_list


def test_rewrite_source_is_pure() -> None:
    case = "op_mlp_layer"
    assert _rewrite(case) == _rewrite(case)
