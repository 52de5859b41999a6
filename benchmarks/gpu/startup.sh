#!/usr/bin/env bash
# Issue 26 on GPUs: Lab() start-up phase by phase and the first fault right after it, with
# the spares started with the ranks (the lab) and after they joined (the lab before), starts
# interleaved. One engine per visible GPU. Prints a breakdown per start and medians.
#   bash benchmarks/gpu/startup.sh            # STARTS=3 (per mode) by default
set -uo pipefail
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
nproc; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"
timeout ${STARTUP_S:-540} python3 benchmarks/startup.py --starts ${STARTS:-3} \
    --modes ${MODES:-with after} --out "$OUT/startup.json" 2>&1 | tee "$OUT/startup-full.txt" \
    | grep -v -E "^(USDT|\[rank|run [0-9a-f]{8}: )" | tee "$OUT/startup.txt"
