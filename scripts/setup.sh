#!/usr/bin/env bash
# Creates .venv (once) and installs the package with its test (pytest, pytest-xdist: the
# suite runs in one worker per CPU, see scripts/test.sh), cuda, examples and dist extras
# (examples: scikit-learn for the digits data set, matplotlib for the plots; dist: mpi4py and
# the Open MPI wheels, ~21 MB, for ocannl_ast.distributed) into it
# (cuda: cuda-python + the NVRTC wheel, ~250 MB; the NVRTC tests need no GPU), and the CPU
# build of PyTorch as a test oracle (and JAX, a benchmark baseline).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
if [ ! -f .venv/.installed ] || [ pyproject.toml -nt .venv/.installed ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e '.[test,cuda,examples,dist]'
  # PyTorch (CPU build, ~200 MB) is the oracle of the tests that compare against it and of the
  # benchmarks' baselines; those skip with the reason when it cannot be installed.
  .venv/bin/python -m pip install -q "torch==${OCANNL_AST_TORCH:-2.13.0+cpu}" \
    || echo "setup: PyTorch (CPU) not installed; the tests that compare against it will skip"
  # JAX (CPU) is a baseline of the transformer benchmark only (its jax.jit row skips without it).
  .venv/bin/python -m pip install -q "jax[cpu]==${OCANNL_AST_JAX:-0.10.2}" \
    || echo "setup: JAX not installed; the benchmark's jax.jit row will skip"
  touch .venv/.installed
fi
# Bytecode of the package, written once: an editable install never gets it from pip, and with
# PYTHONDONTWRITEBYTECODE set every process would compile the lazily imported modules again.
.venv/bin/python -m compileall -q ocannl_ast > /dev/null \
  || echo "setup: the package's bytecode was not written; Python compiles it at each import"
# What the installation keeps prebuilt (ocannl_ast/_prebuilt/, see docs/generated_code.md):
# the C backend's contraction kernel objects (float32 and float64, with and without OpenMP)
# and the library's own @op/@cd functions rewritten; routines link those objects and load
# those rewrites from any compile cache. Cached: a second run builds nothing. Where the
# package directory cannot be written they go into the compile and rewrite caches instead.
if ! .venv/bin/python -m ocannl_ast.prebuilt > /dev/null; then
  .venv/bin/python -m ocannl_ast.backends.prebuild > /dev/null \
    || echo "setup: the contraction kernel was not prebuilt (gcc missing?); routines build it"
  .venv/bin/python -c "import ocannl_ast.nn; from ocannl_ast.rewrite.decorator import materialize_deferred as m; m()" \
    || echo "setup: the rewrite cache was not filled; the library's functions rewrite at first use"
fi
