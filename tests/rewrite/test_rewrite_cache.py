"""The on-disk rewrite cache (ocannl_ast/rewrite/cache.py).

Checks: a cached rewrite equals a fresh one (code, positions, span table) for every golden
rewrite case and for the library's own @op/@cd functions; a changed or moved function is
rewritten, a damaged entry is ignored and rebuilt, an unusable directory only means no
cache; errors raised by a cached function carry the user's file:line:col; and a warm
`import ocannl_ast` (in a fresh interpreter) does not import libcst.
"""

from __future__ import annotations

import importlib.util
import json
import linecache
import os
import subprocess
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from code_describe import describe

import ocannl_ast as oc
import ocannl_ast.rewrite.rewriter as rewriter_module
from ocannl_ast.rewrite import cache, clear_cache, make_decorator
from ocannl_ast.rewrite.contract import SPANS
from ocannl_ast.rewrite.decorator import rewritten

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "rewrite"
CASES = sorted(p.name.removesuffix(".before.py") for p in GOLDEN.glob("*.before.py"))
DESCRIBE_DIR = Path(__file__).resolve().parent


class _Anything:
    def __getattr__(self, name: str) -> Any:
        return lambda *a, **k: None


class Rewrites:
    """Counts fresh rewrites (the cache misses) while it is installed."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        real = rewriter_module.rewrite_function

        def counting(*args: Any) -> Any:
            self.count += 1
            return real(*args)

        monkeypatch.setattr(rewriter_module, "rewrite_function", counting)


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private rewrite cache, and an empty in-memory cache."""
    directory = tmp_path / "rewrite_cache"
    monkeypatch.setenv("OCANNL_AST_REWRITE_CACHE", str(directory))
    clear_cache()
    return directory


def _load(path: Path, name: str, **names: object) -> types.ModuleType:
    """Execute the file `path` as a fresh module `name` with `names` predefined."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    module.__dict__.update(names)
    spec.loader.exec_module(module)
    return module


def _decorated(module: types.ModuleType) -> types.FunctionType:
    """The function compiled from the module's one decorated function's rewritten source
    (an @op function's call wrapper, which opens its name scope, holds it)."""
    (fn,) = [v for v in vars(module).values()
             if isinstance(v, types.FunctionType) and hasattr(v, "__wrapped__")]
    return rewritten(fn)


def _golden_fn(case: str) -> types.FunctionType:
    names = {k: make_decorator(k, _Anything()) for k in ("op", "cd")}  # type: ignore[arg-type]
    return _decorated(_load(GOLDEN / f"{case}.before.py", f"golden_{case}", **names))


def _entries(directory: Path) -> list[Path]:
    return sorted(directory.rglob("*.bin"))


@pytest.mark.filterwarnings("ignore::SyntaxWarning")  # `{w}[o, i]` in op_named_no_reducer
@pytest.mark.parametrize("case", CASES)
def test_cached_rewrite_equals_fresh_rewrite(
    case: str, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OCANNL_AST_REWRITE_CACHE", "off")
    fresh = _golden_fn(case)
    monkeypatch.setenv("OCANNL_AST_REWRITE_CACHE", str(cache_dir))
    rewrites = Rewrites(monkeypatch)
    for expected_rewrites in (1, 1):  # cold (rewrites, stores), then warm (loads: no rewrite)
        clear_cache()
        fn = _golden_fn(case)
        assert rewrites.count == expected_rewrites
        assert describe(fn.__code__) == describe(fresh.__code__)
        assert fn.__globals__[SPANS] == fresh.__globals__[SPANS]
    assert len(_entries(cache_dir)) == 1


def _write_user_module(path: Path, body: str, padding: int = 0) -> None:
    path.write_text("\n" * padding + f"@op\ndef layer(x):\n    return {body}\n")
    linecache.checkcache(str(path))


def _run_layer(fn: Callable[..., Any]) -> list[str]:
    calls: list[str] = []

    class Recorder:
        def __getattr__(self, name: str) -> Any:
            def record(*args: Any, **kwargs: Any) -> float:
                calls.append(f"{name}{args[:1]}")
                return 1.0

            return record

    fn.__globals__["__oc__"] = Recorder()
    fn(2.0)
    return calls


def test_changed_function_is_rewritten_not_served_stale(
    tmp_path: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rewrites = Rewrites(monkeypatch)
    path = tmp_path / "user_mod.py"
    op = make_decorator("op", _Anything())
    _write_user_module(path, "{w} * x")
    assert _run_layer(_decorated(_load(path, "user_a", op=op))) == ["param('w',)"]
    _write_user_module(path, "{wide} * x")  # same function, edited body
    clear_cache()
    assert _run_layer(_decorated(_load(path, "user_b", op=op))) == ["param('wide',)"]
    _write_user_module(path, "{wide} * x", padding=3)  # moved down: new positions
    clear_cache()
    moved = _decorated(_load(path, "user_c", op=op))
    assert moved.__code__.co_firstlineno == 5
    assert rewrites.count == 3
    assert len(_entries(cache_dir)) == 3
    clear_cache()  # unchanged since: every version is served from the cache
    _decorated(_load(path, "user_d", op=op))
    assert rewrites.count == 3


DAMAGE: dict[str, Callable[[bytes], bytes]] = {
    "truncated": lambda b: b[: len(b) // 2],
    "empty": lambda b: b"",
    "flipped byte": lambda b: b[:-5] + bytes([b[-5] ^ 0x40]) + b[-4:],
    "garbage": lambda b: os.urandom(len(b)),
    "edited payload": lambda b: b.replace(b"before.py", b"befoRe.py"),  # still loads
    "old format": lambda b: b.replace(cache.FORMAT, b"ocannl_ast-rewrite-cache 0\n", 1),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_damaged_entry_is_ignored_and_rebuilt(
    damage: str, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    case = "op_mlp_layer"
    good = _golden_fn(case)
    (entry,) = _entries(cache_dir)
    blob = entry.read_bytes()
    entry.write_bytes(DAMAGE[damage](blob))
    rewrites = Rewrites(monkeypatch)
    clear_cache()
    fn = _golden_fn(case)
    assert rewrites.count == 1
    assert describe(fn.__code__) == describe(good.__code__)
    assert entry.read_bytes() == blob, "the damaged entry is replaced by a good one"


def test_entry_of_another_function_is_not_served(
    cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = _golden_fn("op_mlp_layer"), _golden_fn("op_named_sum")
    a, b = _entries(cache_dir)
    a.write_bytes(b.read_bytes())  # a checksum-valid entry under the wrong key
    rewrites = Rewrites(monkeypatch)
    clear_cache()
    assert describe(_golden_fn("op_mlp_layer").__code__) == describe(first.__code__)
    assert describe(_golden_fn("op_named_sum").__code__) == describe(second.__code__)
    assert rewrites.count == 1


def test_unusable_cache_directory_only_disables_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("OCANNL_AST_REWRITE_CACHE", str(blocker / "sub"))
    clear_cache()
    rewrites = Rewrites(monkeypatch)
    fn = _golden_fn("op_mlp_layer")
    clear_cache()
    again = _golden_fn("op_mlp_layer")
    assert rewrites.count == 2
    assert describe(fn.__code__) == describe(again.__code__)
    assert blocker.read_text() == "not a directory"


def test_cache_directory_follows_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OCANNL_AST_REWRITE_CACHE", raising=False)
    monkeypatch.setenv("OCANNL_AST_CACHE", "/some/where")
    assert cache.cache_dir() == Path("/some/where/rewrite")
    monkeypatch.delenv("OCANNL_AST_CACHE")
    assert cache.cache_dir() == Path.home() / ".cache" / "ocannl_ast" / "rewrite"
    for off in ("off", "0", ""):
        monkeypatch.setenv("OCANNL_AST_REWRITE_CACHE", off)
        assert cache.cache_dir() is None
    monkeypatch.setenv("OCANNL_AST_REWRITE_CACHE", "/mine")
    assert cache.cache_dir() == Path("/mine")


ERRORS_MODULE = '''\
import ocannl_ast as oc


@oc.op
def op_shape(x, y):
    z = x + 1.0
    return z  +  y  # COL:op-shape


@oc.op
def op_named(x):
    y[i] = sum[j](x[i, j] * x[j, i])  # COL:op-named
    return y


@oc.op
def op_unknown(x):
    return mean(x)  # COL:op-unknown
'''


def _where(marker: str, text: str) -> tuple[int, int]:
    lines = ERRORS_MODULE.splitlines()
    (n,) = [k for k, s in enumerate(lines, 1) if s.endswith(f"# COL:{marker}")]
    return n, lines[n - 1].index(text)


def test_errors_from_a_cached_function_carry_file_line_col(
    tmp_path: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "user_errors.py"
    path.write_text(ERRORS_MODULE)
    _load(path, "user_errors_cold")
    rewrites = Rewrites(monkeypatch)
    clear_cache()
    mod = _load(path, "user_errors_warm")
    assert rewrites.count == 0, "every function came from the cache"
    cases: list[tuple[Callable[[], object], type[oc.OcannlError], str, str]] = [
        (lambda: mod.op_shape(oc.ndarray([1.0, 2.0]), oc.ndarray([1.0, 2.0, 3.0])),
         oc.ShapeError, "op-shape", "z  +  y"),
        (lambda: mod.op_named(oc.ndarray(np.ones((2, 3)))), oc.ShapeError, "op-named",
         "y[i] = sum"),
        (lambda: mod.op_unknown(oc.ndarray([1.0])), oc.DslSyntaxError, "op-unknown", "mean("),
    ]
    for call, error, marker, text in cases:
        with pytest.raises(error) as info:
            call()
        span = info.value.span
        assert span is not None, str(info.value)
        assert (span.file, span.line, span.col) == (str(path), *_where(marker, text))


_PROBE = """
import json, sys
sys.path.insert(0, {describe_dir!r})
import ocannl_ast
from code_describe import describe
from ocannl_ast.rewrite import decorator
deferred = decorator.cache_size()  # the library's functions are built at their first call
decorator.materialize_deferred()
print(json.dumps({{
    "built_at_import": deferred,
    "libcst": any(m.split(".")[0] == "libcst" for m in sys.modules),
    "entries": {{f"{{k[0]}}:{{k[1]}}:{{k[3].co_firstlineno}}": repr((describe(c), s))
                for k, (c, s) in decorator._CACHE.items()}},
}}))
"""


def _probe(rewrite_cache: str) -> dict[str, Any]:
    # the installation's prebuilt rewrites off: a cold cache must really rewrite
    env = {**os.environ, "OCANNL_AST_REWRITE_CACHE": rewrite_cache, "OCANNL_AST_PREBUILT": "off"}
    code = _PROBE.format(describe_dir=str(DESCRIBE_DIR))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_library_functions_cached_equal_fresh_and_warm_import_skips_libcst(
    tmp_path: Path,
) -> None:
    directory = tmp_path / "rewrite_cache"
    fresh = _probe("off")
    cold = _probe(str(directory))
    warm = _probe(str(directory))
    assert fresh["built_at_import"] == cold["built_at_import"] == warm["built_at_import"] == 0
    assert fresh["libcst"] and cold["libcst"]
    assert not warm["libcst"], "a warm import must not load libcst"
    assert len(fresh["entries"]) >= 40  # the library's own @op/@cd functions
    assert cold["entries"] == fresh["entries"]
    assert warm["entries"] == fresh["entries"]
    assert len(_entries(directory)) == len(fresh["entries"])
