#!/usr/bin/env bash
# The README's test command: set up .venv, then run the whole suite (no tests = failure).
# `--sanitize` builds every routine with ASan+UBSan (OCANNL_AST_SANITIZE=1, own cache key)
# and preloads the ASan runtime into Python; other arguments go to pytest.
# The tests run in one pytest-xdist worker per CPU (`-n auto`; OCANNL_AST_TEST_WORKERS sets
# the count, 0 runs them in this process), each test module whole in one worker
# (`--dist loadfile`: module-scoped fixtures are built once); `-n ...` among the arguments
# overrides this.
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh || exit 1
export OCANNL_AST_CHECK=1
args=()
for arg in "$@"; do
  if [ "$arg" = "--sanitize" ]; then
    asan="$(gcc -print-file-name=libasan.so)"
    if [ ! -e "$asan" ]; then echo "libasan.so not found (gcc -print-file-name)" >&2; exit 1; fi
    export OCANNL_AST_SANITIZE=1
    export LD_PRELOAD="$asan${LD_PRELOAD:+:$LD_PRELOAD}"
    export ASAN_OPTIONS="detect_leaks=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
    export UBSAN_OPTIONS="print_stacktrace=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
  else
    args+=("$arg")
  fi
done
workers=(-n "${OCANNL_AST_TEST_WORKERS:-auto}" --dist loadfile)
if ! .venv/bin/python -c "import xdist" 2>/dev/null; then
  echo "test.sh: pytest-xdist is not installed: running the tests in one process" >&2
  workers=()
fi
for arg in "${args[@]}"; do
  case "$arg" in -n|-n*|--numprocesses|--numprocesses=*|--dist|--dist=*) workers=() ;; esac
done
.venv/bin/python -m pytest -p no:cacheprovider "${workers[@]}" "${args[@]}"
rc=$?
if [ "$rc" -eq 5 ]; then echo "pytest collected no tests: failing" >&2; exit 1; fi
exit "$rc"
