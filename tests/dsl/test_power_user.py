"""Issue 23, from a power user's side: own optimizers and own ops in the @cd dialect compute
what NumPy (or torch) computes for the same update, name their state under the param it
belongs to, advance schedules, and reach every dialect function without an import.

Oracles: NumPy re-implementations of each update; torch.optim.SGD where torch is
importable; float64 central differences (oc.testing.check_grads) for every gradient.
"""

# The @cd bodies below use the dialect's names (declared nodes, primitives) unimported.
# ruff: noqa: F821

from __future__ import annotations

import importlib.util
import inspect
import textwrap
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

import ocannl_ast as oc


def _module(tmp_path: Path, source: str, name: str = "user_mod") -> ModuleType:
    """`source` written to a file and imported (the decorator reads real source lines)."""
    path = tmp_path / f"{name}.py"
    path.write_text("import ocannl_ast as oc\n" + textwrap.dedent(source))
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _sum_sq(ps: list[oc.Tensor]) -> oc.Tensor:
    total: oc.Tensor | None = None
    for p in ps:
        s = oc.einsum("i=>0", p * p)
        total = s if total is None else total + s
    assert total is not None
    return total


# ---- item 1: state declared in a loop is one node per iteration, named under its param ----

@oc.cd
def momentum_all(params, lr, mom):
    for p in params:
        {vel}[...] = mom * vel + p.grad
        p -= lr * vel


def _momentum_reference(inits: list[np.ndarray], lr: float, mom: float,
                        steps: int) -> list[np.ndarray]:
    ps = [a.copy() for a in inits]
    vel = [np.zeros_like(a) for a in inits]
    for _ in range(steps):
        for i, p in enumerate(ps):
            vel[i] = mom * vel[i] + 2.0 * p  # d(sum p^2)/dp
            ps[i] = p - lr * vel[i]
    return ps


@pytest.mark.parametrize("sizes", [(3, 3), (3, 4)], ids=["same_shape", "different_shapes"])
def test_loop_state_is_one_node_per_param(sizes: tuple[int, ...]) -> None:
    inits = [np.arange(1.0, n + 1.0) * 0.1 * (k + 1) for k, n in enumerate(sizes)]
    ps = [oc.param(f"mom_p{k}", init=a) for k, a in enumerate(inits)]
    code = momentum_all(ps, 0.1, 0.9)
    vel_names = sorted(t.name for t in code.tensors() if t.label == "vel")
    assert vel_names == sorted(f"{p.name}/vel" for p in ps)
    ctx = oc.Context(precision="float64")
    step = ctx.compile([oc.grad_update(_sum_sq(ps)), code])
    for _ in range(3):
        step()
    for p, want in zip(ps, _momentum_reference(inits, 0.1, 0.9, 3), strict=True):
        np.testing.assert_allclose(ctx.get(p), want, rtol=1e-12)


def test_loop_momentum_matches_torch_sgd() -> None:
    torch = pytest.importorskip("torch", reason="torch is the oracle of this comparison")
    inits = [np.array([0.5, -1.0, 2.0]), np.array([1.5, 0.25])]
    ps = [oc.param(f"tm_p{k}", init=a) for k, a in enumerate(inits)]
    ctx = oc.Context(precision="float64")
    step = ctx.compile([oc.grad_update(_sum_sq(ps)), momentum_all(ps, 0.05, 0.8)])
    tps = [torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in inits]
    opt = torch.optim.SGD(tps, lr=0.05, momentum=0.8)
    for _ in range(4):
        step()
        opt.zero_grad()
        sum((t * t).sum() for t in tps).backward()
        opt.step()
    for p, t in zip(ps, tps, strict=True):
        np.testing.assert_allclose(ctx.get(p), t.detach().numpy(), rtol=1e-12)


def test_reading_loop_state_before_its_declaration_is_located(tmp_path: Path) -> None:
    src = """
    @oc.cd
    def bad(params, lr):
        for p in params:
            p -= lr * vel
            {vel}[...] = p.grad
    """
    with pytest.raises(oc.DslSyntaxError) as info:
        _module(tmp_path, src, "loop_read")
    e = info.value
    assert e.span is not None and e.span.line == 6 and e.span.col == 18, e
    assert "declared inside a loop" in e.message and "declare it before the loop" in e.message


# ---- item 9: optimizer state named under its param; ops with extra arguments --------------

@oc.cd
def lion_step(p, lr, beta1, beta2):
    accum({lion_m}, "=+", 0.0)  # declares the momentum, kept from run to run
    {lion_c}[...] = beta1 * lion_m + (1.0 - beta1) * p.grad
    p -= lr * sign(lion_c)
    lion_m[...] = beta2 * lion_m + (1.0 - beta2) * p.grad


def test_custom_optimizer_state_is_named_under_its_param() -> None:
    inits = [np.array([0.5, -1.0, 2.0]), np.array([[1.5, -0.25], [0.0, 3.0]])]
    w = oc.param("lion_w", init=inits[0])
    b = oc.param("lion_b", init=inits[1])
    loss = oc.einsum("i=>0", w * w) + oc.einsum("ij=>0", b * b * b)
    code = [lion_step(p, 0.01, 0.9, 0.99) for p in (w, b)]
    names = sorted(t.name for c in code for t in c.tensors() if t.label.startswith("lion_"))
    assert f"{w.name}/lion_m" in names and f"{b.name}/lion_m" in names, names
    assert f"{w.name}/lion_c" in names and f"{b.name}/lion_c" in names, names
    ctx = oc.Context(precision="float64")
    step = ctx.compile([oc.grad_update(loss), code])
    ref = [a.copy() for a in inits]
    m = [np.zeros_like(a) for a in inits]
    for _ in range(3):
        step()
        grads = [2.0 * ref[0], 3.0 * ref[1] ** 2]
        for k in range(2):
            c = 0.9 * m[k] + 0.1 * grads[k]
            ref[k] = ref[k] - 0.01 * np.sign(c)
            m[k] = 0.99 * m[k] + 0.01 * grads[k]
    np.testing.assert_allclose(ctx.get(w), ref[0], rtol=1e-12)
    np.testing.assert_allclose(ctx.get(b), ref[1], rtol=1e-12)


@oc.cd
def scaled_tanh_op(v, v1, projections, temperature):
    v[...] = tanh(v1 / temperature)


@oc.cd
def scaled_tanh_grad(v, g, g1, projections, temperature):
    g1 += g * (1.0 - v * v) / temperature


@oc.cd
def band_op(v, v1, projections, lo, hi=1.0):
    v[...] = where(lt(v1, lo), lo, where(lt(hi, v1), hi, v1))


@oc.cd
def band_grad(g, g1, v1, projections, lo, hi=1.0):
    g1 += where(lt(v1, lo), 0.0, where(lt(hi, v1), 0.0, g))


def test_op_functions_take_extra_arguments_by_keyword() -> None:
    scaled_tanh = oc.unary_op(scaled_tanh_op, scaled_tanh_grad, name="scaled_tanh")
    band = oc.unary_op(band_op, band_grad, name="band")
    x = np.array([-2.0, -0.3, 0.4, 1.7, 3.0])
    got = oc.eval(scaled_tanh(oc.ndarray(x), temperature=2.0))
    np.testing.assert_allclose(got, np.tanh(x / 2.0), rtol=1e-6)
    np.testing.assert_allclose(oc.eval(band(oc.ndarray(x), lo=-0.5)), np.clip(x, -0.5, 1.0))
    np.testing.assert_allclose(oc.eval(band(oc.ndarray(x), lo=-1.0, hi=2.0)),
                               np.clip(x, -1.0, 2.0))
    oc.testing.check_grads(lambda a: oc.einsum("i=>0", scaled_tanh(a, temperature=0.7) * a),
                           [x])
    oc.testing.check_grads(lambda a: oc.einsum("i=>0", band(a, lo=-1.0, hi=2.0) * a), [x])
    with pytest.raises(oc.ArgumentError, match="missing extra argument.*temperature"):
        scaled_tanh(oc.ndarray(x))
    with pytest.raises(oc.ArgumentError, match="unknown keyword argument.*temp "):
        scaled_tanh(oc.ndarray(x), temp=1.0)


# ---- item 3: a schedule read by a custom optimizer advances once per run ----------------

@oc.cd
def plain_sgd(params, lr):
    for p in params:
        p -= lr * p.grad


def test_schedule_advances_in_a_custom_optimizer() -> None:
    p = oc.param("sched_p", init=np.array([1.0, -2.0]))
    loss = oc.einsum("i=>0", p)  # gradient 1 everywhere
    lr = oc.lr_warmup(1.0, 4)
    ctx = oc.Context(precision="float64")
    step = ctx.compile([oc.grad_update(loss), plain_sgd([p], lr)])
    want = np.array([1.0, -2.0])
    for k in range(1, 7):
        step()
        want = want - min(1.0, k / 4)
        np.testing.assert_allclose(ctx.get(p), want, rtol=1e-12)


def test_explicit_advance_steps_advances_once() -> None:
    p = oc.param("sched_q", init=np.array([0.0]))
    loss = oc.einsum("i=>0", p)
    lr = oc.lr_warmup(1.0, 3)
    ctx = oc.Context(precision="float64")
    step = ctx.compile([oc.grad_update(loss), plain_sgd([p], lr), oc.advance_steps(lr, loss)])
    for _ in range(3):
        step()
    np.testing.assert_allclose(ctx.get(p), [-(1 / 3 + 2 / 3 + 1.0)], rtol=1e-12)


def test_forward_only_routine_does_not_advance() -> None:
    lr = oc.lr_warmup(1.0, 4)
    ctx = oc.Context(precision="float64")
    show = ctx.compile(lr.forward_all())
    for _ in range(3):
        show()
    np.testing.assert_allclose(ctx.get(lr), [0.25])


# ---- item 8: dialect functions anywhere, without imports; new elementwise ops --------------

X = np.array([-2.3, -1.5, -0.4, 0.2, 0.5, 1.25, 2.5, 3.7])


@pytest.mark.parametrize(("name", "fn", "ref"), [
    ("abs", lambda a: oc.abs(a), np.abs),
    ("sign", lambda a: oc.sign(a), np.sign),
    ("floor", lambda a: oc.floor(a), np.floor),
    ("round", lambda a: oc.round(a), np.round),
    ("sigmoid", lambda a: oc.sigmoid(a), lambda x: 1.0 / (1.0 + np.exp(-x))),
    ("clamp", lambda a: oc.clamp(a, -1.0, 2.0), lambda x: np.clip(x, -1.0, 2.0)),
    ("mod", lambda a: oc.mod(a, 1.5), lambda x: np.mod(x, 1.5)),
    ("mod_neg", lambda a: oc.mod(a, -0.75), lambda x: np.mod(x, -0.75)),
    ("exp2", lambda a: oc.exp2(a), np.exp2),
    ("fma", lambda a: oc.fma_pointwise(a, a, 1.0), lambda x: x * x + 1.0),
    ("relu_gate", lambda a: oc.relu_gate(a, 3.0 * a), lambda x: np.where(x > 0, 3 * x, 0.0)),
])
@pytest.mark.parametrize("precision", ["float32", "float64"])
def test_elementwise_values_match_numpy(name, fn, ref, precision) -> None:
    ctx = oc.Context(precision=precision)
    got = ctx.eval(fn(oc.ndarray(X))) if hasattr(ctx, "eval") else oc.eval(fn(oc.ndarray(X)))
    tol = 1e-6 if precision == "float32" else 1e-12
    np.testing.assert_allclose(got, ref(X), rtol=tol, atol=tol)


def test_positive_only_functions_match_numpy() -> None:
    pos = np.array([0.1, 0.5, 2.0, 7.5])
    np.testing.assert_allclose(oc.eval(oc.log2(oc.ndarray(pos))), np.log2(pos), rtol=1e-6)
    np.testing.assert_allclose(oc.eval(oc.recip_sqrt(oc.ndarray(pos))), 1 / np.sqrt(pos),
                               rtol=1e-6)


@pytest.mark.parametrize(("fn", "arity"), [
    (oc.sign, 1), (oc.floor, 1), (oc.exp2, 1), (oc.log2, 1), (oc.recip_sqrt, 1),
    (oc.mod, 2), (oc.fma_pointwise, 3)])
def test_elementwise_ops_take_exactly_their_operands(fn, arity) -> None:
    # a surplus operand used to be accepted and ignored (oc.floor(x, y) was floor(x))
    x = oc.ndarray(X)
    with pytest.raises(TypeError, match="positional argument"):
        fn(*[x] * (arity + 1))
    assert list(inspect.signature(fn).parameters)[-1] == "spec"


def test_elementwise_ops_take_a_spec() -> None:
    m = np.arange(6.0).reshape(2, 3) * 0.7 - 1.0
    a = oc.ndarray(m)
    np.testing.assert_allclose(oc.eval(oc.floor(a, spec="ij=>ji")), np.floor(m).T)
    np.testing.assert_allclose(oc.eval(oc.mod(a, oc.ndarray(np.array([1.5, 2.0])),
                                              spec="ij;i=>ji")),
                               np.mod(m, np.array([[1.5], [2.0]])).T, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("fn", [
    lambda a: oc.abs(a) * a,
    lambda a: oc.sigmoid(a) * a,
    lambda a: oc.clamp(a, -1.0, 2.0) * a,
    lambda a: oc.mod(a, 1.5) * a,
    lambda a: oc.exp2(a),
    lambda a: oc.log2(a * a + 1.0),
    lambda a: oc.recip_sqrt(a * a + 1.0),
    lambda a: oc.fma_pointwise(a, oc.sin(a), a),
    lambda a: oc.relu_gate(a, a * a),
    lambda a: oc.floor(a) * a + oc.sign(a) * a + oc.round(a) * a,
], ids=["abs", "sigmoid", "clamp", "mod", "exp2", "log2", "recip_sqrt", "fma", "relu_gate",
        "floor_sign_round"])
def test_elementwise_gradients(fn) -> None:
    # away from the jumps of floor, round, mod and the kinks of abs, clamp, relu_gate
    smooth = np.array([-2.3, -1.2, -0.4, 0.2, 0.7, 1.25, 2.4, 3.7])
    oc.testing.check_grads(lambda a: oc.einsum("i=>0", fn(a)), [smooth])


def test_mod_gradient_in_the_divisor() -> None:
    oc.testing.check_grads(lambda a, b: oc.einsum("i=>0", oc.mod(a, b)),
                           [np.array([-2.3, -1.2, -0.4, 0.2, 0.7, 1.25, 2.4, 3.7]),
                            np.array([1.5, 0.7, -0.9, 1.1, 2.2, -1.3, 0.45, 1.9])])


def test_straight_through_round_passes_the_gradient() -> None:
    w = oc.param("st_w", init=X)
    _, (plain,) = oc.value_and_grad(oc.einsum("i=>0", oc.round(w)), [w])
    _, (st,) = oc.value_and_grad(oc.einsum("i=>0", oc.round(w, straight_through=True)), [w])
    np.testing.assert_array_equal(plain, np.zeros_like(X))
    np.testing.assert_array_equal(st, np.ones_like(X))


@oc.op
def nested_everywhere(x):
    return sqrt(abs(x)) * sign(x) + 0.5 * clamp(sigmoid(x), 0.2, 0.8) + mod(x, 2.0) \
        + where(lt(x, 0.0), exp(x), recip(1.0 + x)) + floor(round(x) * 0.5)


def test_dialect_functions_nest_in_op_bodies_without_imports() -> None:
    got = oc.eval(nested_everywhere(oc.ndarray(X)))
    s = 1 / (1 + np.exp(-X))
    want = (np.sqrt(np.abs(X)) * np.sign(X) + 0.5 * np.clip(s, 0.2, 0.8) + np.mod(X, 2.0)
            + np.where(X < 0, np.exp(X), 1 / (1 + X)) + np.floor(np.round(X) * 0.5))
    np.testing.assert_allclose(got, want, rtol=1e-5)


@oc.op
def python_values_keep_builtins(x, n):
    k = round(n / 4)
    return x * abs(-k)


def test_builtin_abs_and_round_on_python_values() -> None:
    got = oc.eval(python_values_keep_builtins(oc.ndarray([1.0, 2.0]), 10))
    np.testing.assert_allclose(got, [2.0, 4.0])  # round(2.5) == 2: Python's, on a Python value


@oc.cd
def soft_sign_op(v, v1, projections):
    v[...] = v1 * recip(1.0 + abs(v1))


@oc.cd
def soft_sign_grad(g, g1, v1, projections):
    g1 += g * recip((1.0 + abs(v1)) * (1.0 + abs(v1)))


@oc.cd
def sign_sgd(params, lr):
    for p in params:
        p -= lr * sign(p.grad) * sqrt(abs(p.grad))


def test_dialect_functions_nest_in_op_and_grad_bodies() -> None:
    soft_sign = oc.unary_op(soft_sign_op, soft_sign_grad, name="soft_sign")
    np.testing.assert_allclose(oc.eval(soft_sign(oc.ndarray(X))), X / (1 + np.abs(X)),
                               rtol=1e-6)
    oc.testing.check_grads(lambda a: oc.einsum("i=>0", soft_sign(a) * a), [X])


def test_dialect_functions_nest_in_an_optimizer() -> None:
    p = oc.param("signsgd_p", init=X)
    ctx = oc.Context(precision="float64")
    step = ctx.compile([oc.grad_update(oc.einsum("i=>0", p * p * p)), sign_sgd([p], 0.1)])
    step()
    g = 3 * X * X
    np.testing.assert_allclose(ctx.get(p), X - 0.1 * np.sign(g) * np.sqrt(np.abs(g)),
                               rtol=1e-12)


# ---- item 10: check_grads names the op -------------------------------------------------------

@oc.cd
def cube_op(v, v1, projections):
    v[...] = v1 * v1 * v1


@oc.cd
def cube_wrong_grad(g, g1, v1, projections):
    g1 += 2.0 * v1 * v1 * g


def test_check_grads_failure_names_the_op() -> None:
    cube = oc.unary_op(cube_op, cube_wrong_grad, name="my_cube")
    with pytest.raises(AssertionError, match=r"operation\(s\) 'my_cube'"):
        oc.testing.check_grads(lambda a: oc.einsum("i=>0", cube(a)), [X])


# ---- item 6: a dead rebinding of a tensor warns at the user's line --------------------------

def test_dead_rebinding_of_a_tensor_warns_at_its_line(tmp_path: Path) -> None:
    mod = _module(tmp_path, """
    @oc.cd
    def forgetful(params, lr):
        for p in params:
            p = p - lr * p.grad

    @oc.cd
    def careful(p, lr, steps):
        k = steps
        k = k + 1
        g = p.grad
        p -= lr * k * g
    """, "rebinds")
    p = oc.param("dead_p", init=np.array([1.0, 2.0]))
    with pytest.warns(UserWarning, match="rebinds the Python name `p`.*updates no tensor") as rec:
        mod.forgetful([p], 0.1)
    assert [(Path(w.filename).name, w.lineno) for w in rec] == [("rebinds.py", 6)]
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        mod.careful(p, 0.1, 3)  # `k` is rebound to a Python number, `g` is read: no warning


# ---- item 10: error polish -------------------------------------------------------------------

def test_unknown_name_hints_reducers_only_for_reducer_like_names(tmp_path: Path) -> None:
    mod = _module(tmp_path, """
    @oc.cd
    def uses_mean(v, x):
        v[...] = mean(x)

    @oc.cd
    def uses_typo(v, x):
        v[...] = x * sqrtt(x)

    @oc.cd
    def reads_undeclared(v, x):
        v[...] = x * velocity
    """, "hints")
    x, v = oc.ndarray([1.0, 4.0]), oc.node("hint_v", output_dims=[2])
    with pytest.raises(oc.DslSyntaxError, match="reducers of a whole right-hand side"):
        mod.uses_mean(v, x)
    with pytest.raises(oc.DslSyntaxError) as info:
        mod.uses_typo(v, x)
    assert "did you mean sqrt?" in info.value.message and "reducer" not in info.value.message
    assert info.value.span is not None and info.value.span.line == 9
    with pytest.raises(oc.DslSyntaxError) as info:
        mod.reads_undeclared(v, x)
    assert "{velocity}[...] = e" in info.value.message and "reducer" not in info.value.message


def test_caret_on_the_decorator_line_when_op_is_not_innermost(tmp_path: Path) -> None:
    src = """
    import functools

    def logged(fn):
        @functools.wraps(fn)
        def wrapper(*args):
            return fn(*args)
        return wrapper

    @oc.op
    @logged
    def layer(x):
        return x
    """
    with pytest.raises(oc.DslSyntaxError) as info:
        _module(tmp_path, src, "deco_order")
    e = info.value
    assert e.span is not None and e.span.line == 11, e  # the `@oc.op` line
    assert "innermost" in e.message and "move @oc.op below" in e.message
    assert "@oc.op" in str(e)


def test_logic_typo_says_expected_arrow() -> None:
    with pytest.raises(oc.SpecError, match="expected '=>'"):
        oc.einsum("ik;kj=ij", oc.ndarray([[1.0, 2.0]]), oc.ndarray([[1.0], [2.0]]))
