#!/usr/bin/env bash
# Thorough fault injection: SIGKILL at every durable filesystem step of a tiny store's lifecycle
# (admission, attempts, failure, dead letter, retry, Lite projection + index, resolve, tidy), REPEAT times
# over, restarting and checking exactly-once after each kill. CI runs one round (tests/test_fault_injection.py).
#   bash scripts/fault_injection.sh [REPEAT]      (default 5)
set -euo pipefail
cd "$(dirname "$0")/.."
TEMPOMEM_FAULT_REPEAT="${1:-5}" .venv/bin/python -m pytest -q -s -p no:cacheprovider tests/test_fault_injection.py
