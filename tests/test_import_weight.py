"""`import ocannl_ast` stays light (issue 19: import time): it loads neither the rewriter
(libcst), the compilers and backends (cffi, the C renderer, CUDA), distributed training,
checkpoints, nor the standard modules only those need; the library's own @op/@cd functions
are built at their first call. Checked in a fresh interpreter, against what `import numpy`
alone loads there."""

from __future__ import annotations

import json
import subprocess
import sys

#: modules (and their submodules) that `import ocannl_ast` must not load
HEAVY = (
    "libcst", "cffi", "torch", "cuda", "jax",
    "ocannl_ast.backends", "ocannl_ast.distributed", "ocannl_ast.tensor.routine",
    "ocannl_ast.tensor.pipeline", "ocannl_ast.tensor.checkpoint", "ocannl_ast.lowering.lower",
    "ocannl_ast.rewrite.rewriter", "ocannl_ast.rewrite.cache", "ocannl_ast.nn",
    "ocannl_ast.testing",
    "hashlib", "json", "difflib", "sysconfig", "threading", "tempfile", "subprocess",
)

_PROBE = """
import sys
import numpy
before = set(sys.modules)
import ocannl_ast as oc
new = sorted(set(sys.modules) - before)
import json
from ocannl_ast.rewrite import decorator
print(json.dumps({"new": new, "built": decorator.cache_size(),
                  "deferred": len(getattr(decorator, "_DEFERRED", ()))}))
"""


def _probe() -> dict[str, object]:
    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _heavy(name: str) -> bool:
    return any(name == h or name.startswith(h + ".") for h in HEAVY)


def test_import_loads_no_heavy_module() -> None:
    found = _probe()
    new = found["new"]
    assert isinstance(new, list) and "ocannl_ast.tensor.node" in new  # the probe works
    assert [m for m in new if _heavy(m)] == []


def test_library_dialect_functions_are_built_at_first_call() -> None:
    found = _probe()
    assert found["built"] == 0 and isinstance(found["deferred"], int)
    assert found["deferred"] >= 40  # the library's @op/@cd functions, none built yet


def test_a_deferred_library_function_builds_once_and_computes() -> None:
    import numpy as np

    import ocannl_ast as oc
    from ocannl_ast.rewrite.decorator import rewritten

    x = oc.ndarray(np.array([-1.0, 0.5, 2.0]))
    np.testing.assert_allclose(oc.eval(oc.relu(x) + oc.sigmoid(x)),
                               np.maximum([-1.0, 0.5, 2.0], 0)
                               + 1 / (1 + np.exp(-np.array([-1.0, 0.5, 2.0]))), rtol=1e-6)
    from ocannl_ast.tensor.ops import elementwise

    stand_in = elementwise._abs_op  # an @cd function of the library
    built = rewritten(stand_in)
    assert rewritten(stand_in) is built and built is not stand_in
    assert built.__code__.co_name == "_abs_op" and "__oc__" in built.__code__.co_names
