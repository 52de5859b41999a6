#!/usr/bin/env bash
# Second GPU call of 2026-11-29: the demo sweep with its HTML report (issues 3 and 6), the
# GPU-only trace test, and reduce-overhead under a changing batch (issue 4).
set -uo pipefail
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
timeout ${DEMO_S:-150} python3 -m nbtools demo --history "$OUT/demo-runs" --html "$OUT/demo.html" --quiet 2>&1 \
    | grep -v -E "^(USDT|\[rank)" | tee "$OUT/demo.txt"
timeout 40 python3 -m pytest -m gpu tests/trace/test_trace.py -q -p no:cacheprovider 2>&1 | tail -3 | tee "$OUT/gpu_tests.txt"
timeout ${BATCH_S:-80} python3 benchmarks/gpu/compile_experiments.py "$OUT/compile" batch 2>&1 \
    | grep -v -E "^(USDT|\[rank)" | tail -30
tar czf "$OUT/runs.tgz" -C "$OUT" demo-runs compile/runs 2>/dev/null && rm -rf "$OUT/demo-runs" "$OUT/compile/runs"
ls -la "$OUT"
