"""A comparable description of a code object (nested code included), for the rewrite-cache
tests: equal descriptions mean the same bytecode, names, constants, file, lines and
columns (`co_positions`). Imports nothing from ocannl_ast (used in bare subprocesses)."""

from __future__ import annotations

import types
from typing import Any


def describe(code: types.CodeType) -> tuple[Any, ...]:
    """Everything of `code` that execution, tracebacks or error locations can observe."""
    consts = tuple(describe(c) if isinstance(c, types.CodeType) else (type(c).__name__, repr(c))
                   for c in code.co_consts)
    return (code.co_name, code.co_qualname, code.co_filename, code.co_firstlineno,
            code.co_flags, code.co_argcount, code.co_posonlyargcount, code.co_kwonlyargcount,
            code.co_varnames, code.co_freevars, code.co_cellvars, code.co_names,
            code.co_code, code.co_linetable, code.co_exceptiontable,
            tuple(code.co_positions()), consts)
