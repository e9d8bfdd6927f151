#!/usr/bin/env bash
# The CUDA backend's checks on a GPU host (5 minutes at most): the gpu tests, the moons
# example, bench_cuda.py (moons and the transformer step with CUDA graph replay against direct
# launches, OCANNL_AST_CUDA_GRAPHS=0, and against PyTorch CUDA eager), the cold NVRTC compile
# of the transformer step as one program and as several at once, and whether routines really
# replay graphs on this driver. Each step runs under `timeout`; logs go to $OUT (default
# ./gpu_check_out). Run from the repository root with PYTHONPATH set and python3 having
# cuda-bindings, the NVRTC wheel, numpy, libcst, cffi, pytest(-xdist) and torch.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-gpu_check_out}"
mkdir -p "$OUT"
PY="${PYTHON:-python3}"
step() {  # step NAME SECONDS COMMAND...: run it, log it, print its status and tail
  local name="$1" secs="$2"; shift 2
  local t0=$SECONDS
  timeout "$secs" "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  echo "== $name: rc=$rc in $((SECONDS - t0)) s (log $OUT/$name.log)" | tee -a "$OUT/summary.txt"
  tail -n 25 "$OUT/$name.log" | tee -a "$OUT/summary.txt"
}
: >"$OUT/summary.txt"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >>"$OUT/summary.txt" 2>&1
step graph_state 35 "$PY" - <<'PY'
import sys, time
sys.path.insert(0, "tests/backends")
import cuda_cases
import ocannl_ast as oc
from ocannl_ast.backends import cuda_runtime
case = cuda_cases.moons_step(n=256, batch=32)
ctx = oc.Context(backend="cuda")
t = time.perf_counter()
step = ctx.compile(case["code"])
print(f"moons step compile {time.perf_counter() - t:.2f} s")
for i in range(5):
    step(batch=i % case["n_batches"], step=i)
print("loss", float(ctx.get(case["loss"])[0]))
import gc
found = [o for o in gc.get_objects() if isinstance(o, cuda_runtime.CudaRoutine)]
for r in found:
    print(f"routine {r.name}: {len(r.plan.kernels)} kernels, graphs {r.graphs.state}, "
          f"captures {r.graphs.captures}")
PY
step gpu_tests 95 "$PY" -m pytest -p no:cacheprovider -q -n 8 -m gpu tests/backends/
step moons_example 30 "$PY" examples/moons.py --backend cuda
step bench_cuda 80 "$PY" benchmarks/bench_cuda.py
step nvrtc_parts 60 "$PY" benchmarks/bench_cuda.py --nvrtc
# the step's kernels as NVRTC builds them with less optimization (compiles ~3x faster here)
step transformer_ofast 25 env OCANNL_AST_NVRTC_FLAGS=--Ofast-compile=min \
  "$PY" benchmarks/bench_cuda.py --transformer
echo "done: $OUT/summary.txt"
