"""Rewriting stage behind `@op` and `@cd`: user source → libcst transform → compiled code.

Input: a decorated function. Output: a function with the same name, docstring and lines,
whose body calls the builder namespace bound to the global `__oc__` (see `contract`).
This package never imports `ocannl_ast.tensor`; the builders arrive at decoration time.
Dialect decisions: DIALECT.md beside this file.
"""

from ocannl_ast.rewrite.contract import ACCUM_OPS, Builders, CodeCollector
from ocannl_ast.rewrite.decorator import (
    LazyBuilders,
    cache_size,
    clear_cache,
    make_decorator,
    rewrite_source,
)

__all__ = [
    "ACCUM_OPS",
    "Builders",
    "CodeCollector",
    "LazyBuilders",
    "cache_size",
    "clear_cache",
    "make_decorator",
    "rewrite_source",
]
