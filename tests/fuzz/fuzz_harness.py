"""Runner of the differential fuzzer: a generated program is two snippets of plain Python
(`build`: NumPy data and public-API tensors; `oracle`: the NumPy answer), run many to one
compiled routine, and on any failure re-run alone so the report is a pasteable repro."""

from __future__ import annotations

import os
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import ocannl_ast as oc

#: `OCANNL_AST_FUZZ_N=10` runs ten times as many programs (local soak runs).
FUZZ_N = float(os.environ.get("OCANNL_AST_FUZZ_N", "1"))
#: `OCANNL_AST_FUZZ_SEED` shifts every seed (CI keeps the fixed default, 0).
FUZZ_SEED = int(os.environ.get("OCANNL_AST_FUZZ_SEED", "0"))
RTOL, ATOL = 1e-9, 1e-9


def scaled(n: int) -> int:
    """How many programs a category runs: `n` times the `OCANNL_AST_FUZZ_N` multiplier."""
    return max(1, round(n * FUZZ_N))


def seeds(category: int, n: int) -> list[int]:
    """The fixed seeds of one category (disjoint ranges per category)."""
    base = 1_000_000 * category + 100_000 * FUZZ_SEED
    return [base + k for k in range(scaled(n))]


@dataclass(frozen=True)
class Program:
    """One generated program. `build` defines `t` (the tensor to check) from `rng` data;
    `oracle` defines `want` from the build's names, `got` and `get` (ctx.get, for random
    params); `expect` is "value", "shape_error" (must raise oc.ShapeError), "spec_error"
    (must raise oc.SpecError: a result label no operand names), or "either" (a
    ShapeError, or a value the oracle accepts)."""

    kind: str  #: generator name, e.g. "einsum/basic"
    seed: int
    note: str  #: spec and shapes, for the failure message
    build: str
    oracle: str
    expect: str = "value"
    grads: tuple[str, ...] = ()  #: names of float64 params to check against finite differences
    tags: frozenset[str] = field(default_factory=frozenset)  #: features, for coverage tests

    def repro(self) -> str:
        """A standalone script that reproduces this program."""
        run = ("ctx = oc.Context(precision='float64')\n"
               "ctx.compile([t.forward_all()" + (", t.backprop" if self.grads else "")
               + "])()\nget = ctx.get\ngot = get(t)\n")
        check = "np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9)\n"
        if self.expect == "shape_error":
            run, check = ("try:\n    ctx = oc.Context(precision='float64')\n"
                          "    ctx.compile(t.forward_all())()\n    print('BUG: no ShapeError',"
                          " ctx.get(t))\nexcept oc.ShapeError as e:\n    print('ok:', e)\n"), ""
            body = _guard_build(self.build) + run
        else:
            body = self.build + run + self.oracle + check
        return (f"# {self.kind} seed={self.seed}: {self.note}\n"
                "# (run from tests/fuzz, or with PYTHONPATH=tests/fuzz)\n"
                "import numpy as np\nimport ocannl_ast as oc\n"
                f"rng = np.random.default_rng({self.seed})\n" + body)


def _guard_build(build: str) -> str:
    return ("try:\n" + textwrap.indent(build, "    ")
            + "except oc.ShapeError as e:\n    print('ok:', e)\n    raise SystemExit\n")


def _namespace(p: Program) -> dict[str, Any]:
    return {"np": np, "oc": oc, "rng": np.random.default_rng(p.seed)}


class _Built:
    """A program after its build ran: the namespace, or the exception the build raised."""

    def __init__(self, p: Program) -> None:
        self.p = p
        self.ns = _namespace(p)
        self.error: BaseException | None = None
        try:
            exec(p.build, self.ns)  # noqa: S102 - generated test code
        except Exception as e:  # noqa: BLE001 - classified by the caller
            self.error = e

    @property
    def tensor(self) -> oc.Tensor:
        return self.ns["t"]

    def code(self) -> list[Any]:
        t = self.tensor
        return [t.forward_all(), t.backprop] if self.p.grads else [t.forward_all()]


def _fail(p: Program, why: str) -> str:
    return f"--- {why}\n{p.repro()}"


def _check_error(b: _Built) -> str | None:
    """A program whose build or compile raised: fine when a ShapeError was allowed."""
    e = b.error
    if isinstance(e, oc.ShapeError) and b.p.expect in ("shape_error", "either"):
        return None
    if isinstance(e, oc.SpecError) and b.p.expect == "spec_error":
        return None
    return _fail(b.p, f"raised {type(e).__name__}: {str(e).splitlines()[0][:300]}")


def _check_value(b: _Built, ctx: oc.Context) -> str | None:
    p = b.p
    if p.expect == "spec_error":
        return _fail(p, "no SpecError for a result label no operand names")
    if p.expect == "shape_error":
        return _fail(p, "no ShapeError for inconsistent sizes; got shape "
                        f"{ctx.get(b.tensor).shape}")
    b.ns.update(get=ctx.get, got=ctx.get(b.tensor))
    try:
        exec(p.oracle, b.ns)  # noqa: S102 - generated test code
    except Exception as e:  # noqa: BLE001 - an oracle assertion is a finding
        return _fail(p, f"oracle rejected the result: {type(e).__name__}: {e}")
    got, want = b.ns["got"], np.asarray(b.ns["want"], dtype=np.float64)
    if got.shape != want.shape:
        return _fail(p, f"shape: got {got.shape}, want {want.shape}")
    if not np.allclose(got, want, rtol=RTOL, atol=ATOL, equal_nan=True):
        worst = np.unravel_index(np.argmax(np.abs(got - want)), got.shape) if got.size else ()
        return _fail(p, f"value: at {worst} got {got[worst]!r}, want {want[worst]!r}")
    return None


GradCheck = Callable[[_Built, oc.Context, Any], "str | None"]


def _run_group(built: list[_Built], grad_check: GradCheck | None) -> list[str | None]:
    ctx = oc.Context(precision="float64")
    routine = ctx.compile([c for b in built for c in b.code()])
    routine()
    out: list[str | None] = []
    for b in built:
        r = _check_value(b, ctx)
        if r is None and grad_check is not None and b.p.grads:
            r = grad_check(b, ctx, routine)
        out.append(r)
    return out


def run_programs(programs: Sequence[Program], *, group: int = 24,
                 grad_check: GradCheck | None = None) -> list[str]:
    """Run the programs `group` to a routine; a routine that fails to build or run is
    retried program by program, so that each failure names one program."""
    failures: list[str] = []
    for i in range(0, len(programs), group):
        built = [_Built(p) for p in programs[i:i + group]]
        for b in built:
            if b.error is not None:
                failures.append(_check_error(b) or "")
        ok = [b for b in built if b.error is None]
        try:
            results = _run_group(ok, grad_check) if ok else []
        except Exception:  # noqa: BLE001 - attribute it: one program at a time
            results = [_alone(b.p, grad_check) for b in ok]
        failures.extend(r for r in results if r)
    return [f for f in failures if f]


def _alone(p: Program, grad_check: GradCheck | None) -> str | None:
    b = _Built(p)
    if b.error is None:
        try:
            return _run_group([b], grad_check)[0]
        except Exception as e:  # noqa: BLE001 - classified below
            b.error = e
    return _check_error(b)


def report(failures: list[str], total: int, limit: int = 4) -> str:
    """An assertion message: the count, then the first few reproducers."""
    shown = "\n".join(failures[:limit])
    return f"{len(failures)} of {total} fuzz programs failed; first {min(limit, len(failures))}:\n{shown}"
