"""Shared nest functions (`c_dedup`, `c_backend.SHARE_NESTS`): statements repeated but for
their buffers and cell offsets are compiled once and called; the step gives the same bits
as with every statement written out, in one translation unit or split, with or without the
thread team; unsafe repeats (a written buffer at two unknown offsets) stay written out."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import pytest

import ocannl_ast as oc
from ocannl_ast.backends import c_backend, c_dedup
from ocannl_ast.backends.c_dedup import Nest

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed")

X = np.random.default_rng(0).normal(size=(16, 6)).astype(np.float32)
Y = np.cos(X.sum(axis=1, keepdims=True)).astype(np.float32)
WIDTHS = (10, 10, 10, 1)  # two hidden layers of one shape: repeated nests


def weights() -> list[np.ndarray]:
    """w0, b0, w1, b1, ... of the MLP."""
    rng = np.random.default_rng(1)
    out, width_in = [], X.shape[1]
    for width in WIDTHS:
        out += [rng.normal(0, 0.5, (width, width_in)).astype(np.float32),
                rng.normal(0, 0.1, (width,)).astype(np.float32)]
        width_in = width
    return out


def build(ctx: oc.Context) -> tuple[oc.Routine, list[oc.Tensor], oc.Tensor]:
    """A tanh MLP regression step with Adam, from fixed weights."""
    ws = weights()
    h = oc.ndarray(X, batch_axes=1)
    params, width_in = [], X.shape[1]
    for i, width in enumerate(WIDTHS):
        w = oc.param(f"w{i}", output_dims=[width], input_dims=[width_in], init=ws[2 * i])
        b = oc.param(f"b{i}", output_dims=[width], init=ws[2 * i + 1])
        params += [w, b]
        h = w @ h + b if width == 1 else oc.tanh(w @ h + b)
        width_in = width
    d = h - oc.ndarray(Y, batch_axes=1)
    loss = oc.einsum("b|o=>o", d * d) * (1.0 / X.shape[0])
    step = ctx.compile([oc.grad_update(loss), oc.adam_update(loss, learning_rate=0.01)])
    return step, params, loss


def run(steps: int = 3) -> tuple[list[np.ndarray], str]:
    """The params after `steps` steps and the routine's C (all its units)."""
    ctx = oc.Context()
    step, params, loss = build(ctx)
    for _ in range(steps):
        step()
    src = Path(step.compiled.source_path)  # type: ignore[attr-defined]
    text = "\n".join(p.read_text() for p in
                     [src, *sorted(src.parent.glob(src.stem + ".u*.c"))])
    return [ctx.get(p).copy() for p in (*params, loss)], text


def shared_names(text: str) -> set[str]:
    return set(re.findall(r"\b\w+_n\d+(?=\()", text))


@pytest.mark.parametrize("jobs,threads", [("1", ""), ("2", ""), ("2", "2")])
def test_shared_functions_give_the_same_bits(monkeypatch: pytest.MonkeyPatch,
                                             tmp_path: Path, jobs: str, threads: str) -> None:
    monkeypatch.setattr(c_backend, "SPLIT_MIN_LINES", 0)
    monkeypatch.setattr(c_backend, "SHARE_MIN_LINES", 0)
    monkeypatch.setenv("OCANNL_AST_CC_JOBS", jobs)
    if threads:
        monkeypatch.setenv("OCANNL_AST_THREADS", threads)
    got = {}
    for share in (False, True):
        monkeypatch.setattr(c_backend, "SHARE_NESTS", share)
        monkeypatch.setenv("OCANNL_AST_CACHE", str(tmp_path / f"share_{share}"))
        got[share] = run()
    (plain, plain_c), (shared, shared_c) = got[False], got[True]
    assert not shared_names(plain_c)
    assert shared_names(shared_c), "the repeated layers share no function"
    if jobs == "1":  # (split, each unit declares the shared functions it does not define)
        assert len(shared_c) < len(plain_c)
    for a, b in zip(plain, shared):
        assert a.tobytes() == b.tobytes()
    assert np.isfinite(shared[-1]).all()


def test_a_small_routine_shares_nothing(monkeypatch: pytest.MonkeyPatch,
                                        tmp_path: Path) -> None:
    """Below `SHARE_MIN_LINES` every statement is written out (calls cost more there than
    gcc's time saved); the step's bits are those of a shared build."""
    monkeypatch.setenv("OCANNL_AST_CACHE", str(tmp_path / "default"))
    small, small_c = run()
    assert small_c.count("\n") < c_backend.SHARE_MIN_LINES + 400
    assert not shared_names(small_c)
    monkeypatch.setattr(c_backend, "SHARE_MIN_LINES", 0)
    monkeypatch.setenv("OCANNL_AST_CACHE", str(tmp_path / "shared"))
    shared, shared_c = run()
    assert shared_names(shared_c)
    for a, b in zip(small, shared, strict=True):
        assert a.tobytes() == b.tobytes()


def test_loss_matches_numpy_forward(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The shared build's first loss is the NumPy forward pass's (float32 tolerance)."""
    monkeypatch.setenv("OCANNL_AST_CACHE", str(tmp_path))
    ctx = oc.Context()
    step, _, loss = build(ctx)
    ws = [w.astype(np.float64) for w in weights()]
    step()
    h = X.astype(np.float64).T
    for i, width in enumerate(WIDTHS):
        z = ws[2 * i] @ h + ws[2 * i + 1][:, None]
        h = z if width == 1 else np.tanh(z)
    want = np.mean((h.T - Y) ** 2)
    np.testing.assert_allclose(ctx.get(loss), [want], rtol=2e-5)


def nest(lines: list[str], marks: list[tuple[str, int]], written: tuple[str, ...] = (),
         shareable: bool = True) -> Nest:
    return Nest(lines, marks, frozenset(written), shareable)


LOOP = ["  for (int64_t i{k} = 0; i{k} < 8; ++i{k}) {{",
        "    {out}[i{k} + \x010\x01] = {src}[i{k} + \x011\x01] * 2.0f;",
        "  }}"]


def loop(k: int, out: str, src: str) -> list[str]:
    return [ln.format(k=k, out=out, src=src) for ln in LOOP]


def test_offsets_that_differ_become_parameters() -> None:
    nests = [nest(loop(0, "a", "x"), [("a", 16), ("x", 0)], ("a",)),
             nest(loop(1, "b", "y"), [("b", 24), ("y", 0)], ("b",))]
    types = dict.fromkeys("abxy", "float")
    fns, calls = c_dedup.share(nests, "r", types, frozenset())
    assert len(fns) == 1 and fns[0].offsets == ("ocannl_do0",)
    assert "ocannl_dp0[ocannl_dv0 + ocannl_do0] = ocannl_dp1[ocannl_dv0] * 2.0f;" in fns[0].body[1]
    assert calls == {0: "  r_n0(a, x, 16);", 1: "  r_n0(b, y, 24);"}


def test_outer_extents_that_differ_become_parameters() -> None:
    """The same update over 8 and over 12 cells: one function looping to a parameter; an
    extent the same in all stays a number, and an inner loop's extent is never one."""
    longer = [ln.replace("< 8;", "< 12;") for ln in loop(1, "b", "y")]
    nests = [nest(loop(0, "a", "x"), [("a", 0), ("x", 0)], ("a",)),
             nest(longer, [("b", 0), ("y", 0)], ("b",)), nest(loop(2, "c", "z"),
                                                          [("c", 0), ("z", 0)], ("c",))]
    fns, calls = c_dedup.share(nests, "r", dict.fromkeys("abcxyz", "float"), frozenset())
    assert len(fns) == 1 and fns[0].offsets == ("ocannl_dn0",)
    assert fns[0].body[0] == "  for (int64_t ocannl_dv0 = 0; ocannl_dv0 < ocannl_dn0; ++ocannl_dv0) {"
    assert calls == {0: "  r_n0(a, x, 8);", 1: "  r_n0(b, y, 12);", 2: "  r_n0(c, z, 8);"}
    same = c_dedup.share([nests[0], nests[2]], "r", dict.fromkeys("acxz", "float"), frozenset())
    assert same[0][0].offsets == () and "ocannl_dv0 < 8;" in same[0][0].body[0]
    inner = [["  {", *(" " + ln for ln in body), "  }"] for body in (loop(0, "a", "x"), longer)]
    nested = [nest(inner[0], [("a", 0), ("x", 0)], ("a",)), nest(inner[1], [("b", 0), ("y", 0)],
                                                                 ("b",))]
    assert c_dedup.share(nested, "r", dict.fromkeys("abxy", "float"), frozenset()) == ([], {})


def test_adam_over_params_of_several_sizes_shares_one_update(monkeypatch: pytest.MonkeyPatch,
                                                             tmp_path: Path) -> None:
    """The MLP's Adam updates (params of 60, 100, 10 and 1 cells) call one function with
    the cell count as an argument; the bits are those of the unshared build."""
    monkeypatch.setattr(c_backend, "SHARE_MIN_LINES", 0)
    monkeypatch.setenv("OCANNL_AST_CACHE", str(tmp_path / "shared"))
    shared, text = run()
    assert re.search(r"< ocannl_dn0; \+\+ocannl_dv0\) \{\n.*0\.8999999761581421f", text)
    monkeypatch.setattr(c_backend, "SHARE_NESTS", False)
    monkeypatch.setenv("OCANNL_AST_CACHE", str(tmp_path / "plain"))
    plain, _ = run()
    for a, b in zip(plain, shared, strict=True):
        assert a.tobytes() == b.tobytes()


def test_written_buffer_at_two_unknown_offsets_is_not_shared() -> None:
    """`a[i + o0] = a[i + o1] * 2`: gcc could not tell the offsets apart."""
    nests = [nest(loop(0, "a", "a"), [("a", 16), ("a", 0)], ("a",)),
             nest(loop(1, "b", "b"), [("b", 24), ("b", 8)], ("b",))]
    fns, calls = c_dedup.share(nests, "r", dict.fromkeys("ab", "float"), frozenset())
    assert fns == [] and calls == {}


def test_unshareable_and_different_statements_stay() -> None:
    ret = ["  if (f(a)) return 1;", "  a[0] = 1.0f;", "  a[1] = 2.0f;"]
    types = dict.fromkeys("abcxy", "float")
    nests = [nest(ret, []), nest(ret, []),
             nest(loop(0, "a", "x"), [("a", 0), ("x", 0)], ("a",), shareable=False),
             nest(loop(1, "b", "y"), [("b", 0), ("y", 0)], ("b",), shareable=False),
             nest(loop(2, "c", "x"), [("c", 0), ("x", 0)], ("c",))]
    assert c_dedup.share(nests, "r", types, frozenset()) == ([], {})
    # other element types of a buffer: other functions
    pair = [nest(loop(0, "a", "x"), [("a", 0), ("x", 0)], ("a",)),
            nest(loop(1, "b", "y"), [("b", 0), ("y", 0)], ("b",))]
    fns, _ = c_dedup.share(pair, "r", {**types, "y": "double"}, frozenset())
    assert fns == []


def test_literal_gives_the_plain_offsets() -> None:
    lines = ["  a[4*i0 + \x010\x01] = b[\x011\x01] + c[i0 + \x012\x01] + d[i0 + \x013\x01];"]
    marks = [("a", 0), ("b", 7), ("c", -3), ("d", 12)]
    assert c_dedup.literal(lines, marks) == ["  a[4*i0] = b[7] + c[i0 - 3] + d[i0 + 12];"]


def test_units_weigh_inlined_transcendentals(monkeypatch: pytest.MonkeyPatch) -> None:
    """gcc spends on one inlined exp what it spends on dozens of plain lines: a part calling
    two gets a translation unit of its own against two parts of 100 plain lines."""
    from ocannl_ast.backends.c_backend import _groups, _Part

    monkeypatch.setattr(c_backend, "SPLIT_MIN_LINES", 0)
    heavy = _Part(("  y[0] = ocannl_exp_f(x[0]) + ocannl_tanh_f(x[1]);",), (), (), False)
    plain = _Part(tuple(f"  y[{k}] = x[{k}] + 1.0f;" for k in range(100)), (), (), False)
    assert _groups([plain, heavy, plain], False, 2) == [[0, 2], [1]]


def test_tokens_are_marks_and_words_at_a_boundary() -> None:
    """The renaming's tokenizer (written for speed) splits every text as the plain pattern
    ``\\x01\\d+\\x01|\\b[A-Za-z_]\\w*\\b`` does: words inside numbers (``1.0f``, ``0x1p``)
    and after non-ASCII letters are no tokens."""
    import random

    plain = re.compile(r"(\x01\d+\x01|\b[A-Za-z_]\w*\b)")
    rnd = random.Random(0)
    alphabet = "ab_Z09 \u00e9\x01\x01+*[](\n.\x02"
    texts = ["".join(rnd.choice(alphabet) for _ in range(rnd.randint(0, 24)))
             for _ in range(20000)]
    texts += ["  a[4*i0 + \x010\x01] = 1.0f * b_1[\x0112\x01] + 0x1p-3f;", "\u00e9x f x\u00e9 _"]
    for text in texts:
        assert c_dedup._TOKEN.split(text) == plain.split(text), repr(text)
    assert c_dedup._TOKEN.split("1.0f + f")[1::2] == ["f"]


def test_heavy_calls_are_counted_at_a_word_start() -> None:
    """`_weight` counts a transcendental helper's call only where it starts a word."""
    body = ["  y[0] = ocannl_exp_f(x[0]) + my_ocannl_exp_f(x[1]);", "  ocannl_tanh_d(z);"]
    assert c_backend._weight(body) == 2 + 2 * c_backend.HELPER_CALL_LINES
