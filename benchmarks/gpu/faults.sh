#!/usr/bin/env bash
# Issue 16 on 2 x H200: time to a clear error and to the next ready run after each fault
# (exception, CUDA OOM, hang past the timeout, os._exit, SIGKILL, segfault, Ctrl-C), warm
# spares vs lab.restart(); Lab() start-up (median of 3); close() at 2 GPU ranks and at 16
# CPU ranks. Then the fault tests' client-SIGKILL and socket checks on the GPU engines.
set -uo pipefail
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
# REPEATS/STARTS/TESTS_K trim it to one device call (10 minutes at most)
timeout ${FAULTS_S:-900} python3 benchmarks/faults.py --repeats ${REPEATS:-3} --baseline-repeats 1 --starts ${STARTS:-3} \
    --close-ranks 2 16 --out "$OUT/faults.json" 2>&1 | grep -v -E "^(USDT|\[rank)" | tee "$OUT/faults.txt"
# after the lab above is closed (or its client killed by the timeout): within 10 s nothing
# of it may be left on the GPUs
sleep 10; nvidia-smi --query-compute-apps=pid,used_memory --format=csv | tee "$OUT/gpu_apps_after.txt"
timeout ${TESTS_S:-600} python3 -m pytest tests/lab/test_faults.py -q -p no:cacheprovider ${TESTS_K:+-k "$TESTS_K"} 2>&1 | tail -15 \
    | tee "$OUT/fault_tests.txt"
ls -la "$OUT"
