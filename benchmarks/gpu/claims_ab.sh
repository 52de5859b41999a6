#!/usr/bin/env bash
# Claims 4, 9 and 11 of docs/findings.md §4 as A/B verdicts in rounds (benchmarks/gpu/claims_ab.py).
# On the device machine: bash benchmarks/gpu/claims_ab.sh "$OUT" [ROUNDS] [BUDGET_S]
set -euo pipefail
out=${1:?OUT dir}; rounds=${2:-5}; budget=${3:-240}
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
python3 "$(dirname "$0")/claims_ab.py" "$out" "$rounds" --budget "$budget" 2>&1 | tee "$out/claims_ab.txt"
