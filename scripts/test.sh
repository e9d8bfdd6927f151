#!/usr/bin/env bash
# The README's test command: set up .venv, then run the whole suite (no tests = failure).
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh || exit 1
export OCANNL_AST_CHECK=1
.venv/bin/python -m pytest -p no:cacheprovider "$@"
rc=$?
if [ "$rc" -eq 5 ]; then echo "pytest collected no tests: failing" >&2; exit 1; fi
exit "$rc"
