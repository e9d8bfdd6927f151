#!/usr/bin/env bash
# Creates .venv (once) and installs the package with its test, cuda and examples extras
# (examples: scikit-learn for the digits data set, matplotlib for the plots) into it
# (cuda: cuda-python + the NVRTC wheel, ~250 MB; the NVRTC tests need no GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
if [ ! -f .venv/.installed ] || [ pyproject.toml -nt .venv/.installed ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e '.[test,cuda,examples]'
  touch .venv/.installed
fi
