"""Python's truth tests on symbolic values (a tensor, a slot reference, a primitive tree,
a static index): the located errors that `__bool__` and `__abs__` raise, with the elementwise
forms to write instead. A leaf module: `tensor.node` and `tensor.builders` both use it."""

from __future__ import annotations

import re

from .errors import ArgumentError, user_span

#: the elementwise forms to write instead of Python's branching on a symbolic value
_ELEMENTWISE = (
    "branch per element with oc.where(cond, a, b) (cond: oc.lt/le/eq/ne(a, b), a < b, ...), "
    "oc.relu, arithmetic on 0/1 masks, or the primitives prim(\"and_\", a, b), "
    "prim(\"or_\", a, b), prim(\"not\", a), prim(\"where\", c, a, b)")
_MAX_MIN = (
    "Python's builtin {f}() compares its arguments with < and picks one of them whole; "
    "for the elementwise {f}imum write oc.where(oc.lt(a, b), {ab}) (in @cd, `v[...] = "
    "{f}(a, b)` as a whole right-hand side is the elementwise primitive; with accum, "
    "prim(\"{f}\", a, b))")


def truth_value_error(what: str, hint: str | None = None) -> ArgumentError:
    """The located error of `bool(x)` on a symbolic value (a tensor, a slot reference,
    a primitive tree, a static index): Python's `if`/`and`/`or`/`not`/`while` and the
    builtins `max`/`min` would decide once, for every element, from an always-true object."""
    span = user_span()
    text = (span.text or "") if span is not None else ""
    builtin = re.match(r"(max|min)\s*\(", text)
    if builtin is not None:
        f = builtin.group(1)
        detail = _MAX_MIN.format(f=f, ab="b, a" if f == "max" else "a, b")
    else:
        detail = ("Python's `if`, `and`, `or`, `not`, `while` would take one branch for "
                  f"every element; {_ELEMENTWISE}")
    hint = f" ({hint})" if hint else ""
    return ArgumentError(f"{what} has no truth value{hint}: {detail}", span)


def abs_error(what: str) -> ArgumentError:
    """The located error of the builtin `abs(x)` on a symbolic value outside @op/@cd
    bodies (inside them `abs` is the elementwise `oc.abs`)."""
    return ArgumentError(
        f"abs() of {what}: the builtin abs cannot act elementwise here; write oc.abs(x) (in "
        "an @op/@cd body `abs(x)` is oc.abs)", user_span())
