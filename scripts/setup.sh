#!/usr/bin/env bash
# Set up .venv for k3chat on a fresh machine (CPU torch).  `--dev` adds the test tools.
# GPU machines: see docs/install.md.
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$py" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
.venv/bin/python -m pip install -q -r requirements/cpu.txt
if [ "${1:-}" = "--dev" ]; then
  .venv/bin/python -m pip install -q -c requirements/cpu.txt -e ".[dev]"
else
  .venv/bin/python -m pip install -q -c requirements/cpu.txt -e .
fi
