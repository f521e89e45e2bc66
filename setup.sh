#!/usr/bin/env bash
# Install pfedkit into the current Python. torch 2.13.0 (a CPU build here) goes in first when torch is missing,
# because an unpinned torch would pull the newest build with gigabytes of CUDA packages.
# Usage: bash setup.sh          (the package)
#        bash setup.sh --test   (the package and its test tools)
set -euo pipefail
cd "$(dirname "$0")"
PYTHON=${PYTHON:-python3}
if ! "$PYTHON" -c "import torch" 2>/dev/null; then
  "$PYTHON" -m pip install --quiet "torch==2.13.0"
fi
extra=""
if [ "${1:-}" = "--test" ]; then extra="[test]"; fi
"$PYTHON" -m pip install --quiet -e ".${extra}"
