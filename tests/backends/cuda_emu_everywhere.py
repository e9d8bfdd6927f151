"""A pytest plugin that runs whole test directories on the emulated CUDA backend: every
``oc.Context()``, ``oc.eval``, ``oc.value_and_grad``, ``oc.default_context`` without a
backend argument and `oc.testing.check_grads` get ``backend="cuda"``, served by
`cuda_emu.FakeDriver`. Tests that name ``backend="c"`` or call the C compiler directly are
unchanged. Slow (each kernel runs twice, for the race
check); used to hunt CUDA-only bugs with the whole suite's value checks:

    PYTHONPATH=tests/backends .venv/bin/python -m pytest -p cuda_emu_everywhere tests/engine

At exit it prints how many kernels and modules the emulator ran.
"""

from __future__ import annotations

import atexit
import sys
import tempfile
from pathlib import Path

import cuda_emu

import ocannl_ast as oc
from ocannl_ast import testing as _testing
from ocannl_ast.tensor import context as _context


def _cuda_context(backend: str = "cuda", **kwargs: object) -> _context.Context:
    return _context.Context("cuda", **kwargs)  # type: ignore[arg-type]


_context.Context.__init__.__defaults__ = ("cuda",)
_context.default_context.__defaults__ = ("cuda",)
for _f in (oc.eval, oc.value_and_grad):
    assert _f.__kwdefaults__ is not None
    _f.__kwdefaults__["backend"] = "cuda"
_testing.Context = _cuda_context  # type: ignore[assignment,misc]
_DRIVER = cuda_emu.FakeDriver(Path(tempfile.mkdtemp(prefix="ocannl_cuda_emu_")))
_INSTALLED = cuda_emu.installed(_DRIVER)
_INSTALLED.__enter__()
atexit.register(lambda: print(f"\ncuda emulator: {_DRIVER.stats.launches} kernel launches, "
                              f"{_DRIVER.stats.modules} modules", file=sys.stderr))
