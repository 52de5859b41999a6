#!/usr/bin/env bash
# The lab's GPU runs (2 H200s, one engine per GPU). Run from the repo root on the GPU host
# after installing the carried wheels (benchmarks/gpu/README.md); writes under $OUT.
#   bash benchmarks/gpu/lab_runs.sh
set -uo pipefail
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version(), torch.cuda.get_device_name(0), 'x', torch.cuda.device_count())" | tee "$OUT/versions.txt"
# 1. issue 2 + 3: the compile-mode sweep for both scenarios (one lab, 8 configs)
timeout ${SWEEP_S:-330} python3 -m nbtools run --scenario tp-mlp-infer,ddp-train \
    --compile off,default,reduce-overhead,max-autotune-no-cudagraphs \
    --history "$OUT/runs-sweep" --html "$OUT/sweep.html" --quiet 2>&1 | grep -v -E "^(USDT|\[rank)" | tee "$OUT/sweep.txt"
# 2. issue 4: varlen recompiles, reduce-overhead with a changing batch
timeout ${COMPILE_S:-150} python3 benchmarks/gpu/compile_experiments.py "$OUT/compile" 2>&1 | grep -v -E "^(USDT|\[rank)" | tail -40
# the device tool returns at most 8 files: pack the run histories
tar czf "$OUT/runs.tgz" -C "$OUT" runs-sweep compile/runs 2>/dev/null && rm -rf "$OUT/runs-sweep" "$OUT/compile/runs"
ls -la "$OUT" "$OUT/compile"
