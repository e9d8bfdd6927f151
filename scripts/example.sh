#!/usr/bin/env bash
# The README's main command: set up .venv, then train the moons MLP on the C backend.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python examples/moons.py "$@"
