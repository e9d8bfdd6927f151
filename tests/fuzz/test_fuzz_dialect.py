"""Differential fuzzing of the @cd dialect (issue 23): random small optimizers and
`unary_op`/`binary_op` bodies (`gen_dialect`), each written to its own module file and
imported as a user would, either compute what the NumPy reading of the same statements
computes (float64, two optimizer steps; op values and the gradients the grad_asn writes)
or raise an oc error located in that file. Anything else — a wrong number, a crash, an
error located elsewhere, a planted invalid form that passes — is a failure.
"""

from __future__ import annotations

import importlib.util
import warnings
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
from fuzz_harness import seeds
from gen_dialect import GradArray, Source, interpret, op_source, optimizer_source

import ocannl_ast as oc

RTOL, ATOL = 1e-9, 1e-10
STEPS = 2


def _load(src: Source, tmp: Path) -> tuple[ModuleType | None, Path, Exception | None]:
    path = tmp / f"dialect_{src.kind}_{src.seed}.py"
    path.write_text("import ocannl_ast as oc\n\n\n" + src.text)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # dead rebindings warn; they compute nothing
            spec.loader.exec_module(mod)
    except Exception as e:  # noqa: BLE001 - judged by _located
        return None, path, e
    return mod, path, None


def _located(e: BaseException, path: Path) -> bool:
    """An oc error whose span is a line of the generated file."""
    if not isinstance(e, oc.OcannlError) or e.span is None:
        return False
    n = len(path.read_text().splitlines())
    return Path(e.span.file) == path and 1 <= e.span.line <= n


def _repro(src: Source, why: str) -> str:
    return f"--- {src.kind} seed {src.seed} ({src.invalid or 'valid'}): {why}\n{src.text}"


class _Run:
    """Programs of one kind: outcome per program; values checked for a group at once."""

    def __init__(self) -> None:
        self.failures: list[str] = []
        self.computed = 0
        self.errors = 0

    def error(self, src: Source, e: BaseException, path: Path) -> None:
        if _located(e, path):
            self.errors += 1
            return
        self.failures.append(_repro(src, f"unlocated or foreign error {type(e).__name__}: {e}"))


def _optimizers(srcs: list[Source], tmp: Path, run: _Run) -> None:
    rng = np.random.default_rng(7)
    built: list[tuple[Source, list[oc.Tensor], list[np.ndarray], list[np.ndarray], Any]] = []
    loss: oc.Tensor | None = None
    for src in srcs:
        mod, path, err = _load(src, tmp)
        if err is not None:
            run.error(src, err, path)
            continue
        inits = [rng.normal(size=int(n)) for n in rng.integers(2, 5, size=2)]
        cs = [rng.uniform(0.5, 1.5, size=a.shape) for a in inits]
        ps = [oc.param(f"fz{src.seed}_{k}", init=a) for k, a in enumerate(inits)]
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                code = mod.opt(ps, 0.1, 0.9)
        except Exception as e:  # noqa: BLE001 - every outcome is judged
            run.error(src, e, path)
            continue
        if src.expect == "error":
            run.failures.append(_repro(src, "the planted invalid form was accepted"))
            continue
        for p, c in zip(ps, cs, strict=True):
            term = oc.einsum("i=>0", oc.ndarray(c) * p * p)
            loss = term if loss is None else loss + term
        built.append((src, ps, inits, cs, code))
    if loss is None:
        return
    ctx = oc.Context(precision="float64")
    step = ctx.compile([oc.grad_update(loss), *(b[4] for b in built)])
    for _ in range(STEPS):
        step()
    for src, ps, inits, cs, _ in built:
        want = _numpy_optimizer(src, inits, cs)
        for p, w in zip(ps, want, strict=True):
            if not np.allclose(ctx.get(p), w, rtol=RTOL, atol=ATOL):
                run.failures.append(_repro(src, f"got {ctx.get(p)}, NumPy {w}"))
                break
        else:
            run.computed += 1


def _numpy_optimizer(src: Source, inits: list[np.ndarray],
                     cs: list[np.ndarray]) -> list[np.ndarray]:
    ps = [a.copy() for a in inits]
    states: list[dict[str, Any]] = [{} for _ in ps]
    for _ in range(STEPS):
        grads = [2.0 * c * p for p, c in zip(ps, cs, strict=True)]
        for k, (p, g) in enumerate(zip(ps, grads, strict=True)):
            ga = p.view(GradArray)
            ga.grad = g
            env: dict[str, Any] = {"p": ga, "lr": 0.1, "mom": 0.9, **states[k]}
            env.setdefault("s0", np.zeros_like(p))
            env.setdefault("s1", np.zeros_like(p))
            interpret(src.steps, env)
            states[k] = {n: env[n] for n in ("s0", "s1")}
    return ps


def _ops(srcs: list[Source], tmp: Path, run: _Run) -> None:
    rng = np.random.default_rng(11)
    built: list[tuple[Source, list[oc.Tensor], list[np.ndarray], oc.Tensor]] = []
    for src in srcs:
        mod, path, err = _load(src, tmp)
        if err is not None:
            run.error(src, err, path)
            continue
        xs = [rng.normal(size=4) for _ in range(src.arity)]
        ps = [oc.param(f"fzo{src.seed}_{k}", init=a) for k, a in enumerate(xs)]
        make = oc.unary_op if src.arity == 1 else oc.binary_op
        try:
            out = oc.einsum("i=>0", make(mod.op_asn, mod.grad_asn, name=f"fz{src.seed}")(*ps))
            out.backprop  # noqa: B018 - builds the grad_asn code now, for this program
        except Exception as e:  # noqa: BLE001 - every outcome is judged
            run.error(src, e, path)
            continue
        if src.expect == "error":
            run.failures.append(_repro(src, "the planted invalid form was accepted"))
            continue
        built.append((src, ps, xs, out))
    if not built:
        return
    total = built[0][3]
    for b in built[1:]:
        total = total + b[3]
    ctx = oc.Context(precision="float64")
    ctx.compile(oc.grad_update(total), keep=[b[3] for b in built])()
    for src, ps, xs, out in built:
        env: dict[str, Any] = {f"v{k + 1}": x for k, x in enumerate(xs)}
        interpret(src.steps, env)
        v = np.broadcast_to(env["v"], xs[0].shape)
        genv: dict[str, Any] = {"g": np.ones_like(xs[0]), "v": v, **env}
        genv.update({f"g{k + 1}": np.zeros_like(x) for k, x in enumerate(xs)})
        interpret(src.grad_steps, genv)
        got_v = float(ctx.get(out).reshape(-1)[0])
        ok = np.isclose(got_v, float(np.sum(v)), rtol=RTOL, atol=ATOL)
        for k, p in enumerate(ps):
            want = np.broadcast_to(genv[f"g{k + 1}"], xs[k].shape)
            ok = ok and np.allclose(ctx.get(p.grad), want, rtol=RTOL, atol=ATOL)
        if ok:
            run.computed += 1
        else:
            run.failures.append(_repro(src, "value or gradient differs from NumPy"))


def _check(run: _Run, total: int) -> None:
    assert not run.failures, f"{len(run.failures)} of {total} programs failed:\n" + \
        "\n".join(run.failures[:5])
    assert run.computed > total // 2 and run.errors > 0, (run.computed, run.errors)


def test_fuzz_cd_optimizers(tmp_path: Path) -> None:
    srcs = [optimizer_source(s) for s in seeds(40, 40)]
    run = _Run()
    _optimizers(srcs, tmp_path, run)
    _check(run, len(srcs))


def test_fuzz_op_bodies(tmp_path: Path) -> None:
    srcs = [op_source(s) for s in seeds(41, 40)]
    run = _Run()
    _ops(srcs, tmp_path, run)
    _check(run, len(srcs))
