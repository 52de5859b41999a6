#!/usr/bin/env bash
# Issue 19 on 2 x H200: are the flags true? Run from the repo root; writes under $OUT.
#   bash benchmarks/gpu/flags.sh
# 1. the capture sweep: reduce-overhead runs after the first reuse its compiled state (only
#    capture changes) and must say compile_state=reused, with no "ran eagerly" flag;
# 2. tp-mlp-infer at batch 256: the straggler is named (rank, lateness, host-side or
#    compute), and wait_ms shows which rank waits, instead of "ranks differ in step time".
set -uo pipefail
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(0), 'x', torch.cuda.device_count())" | tee "$OUT/versions.txt"
H=${TMPDIR:-/tmp}/nbtools-flags-$$
# COMPILE/BATCH/EXTRA: for a dry run on CPU (COMPILE=off,default EXTRA="--backend eager")
timeout ${SWEEP_S:-420} python3 -m nbtools run --scenario tp-mlp-infer --compile ${COMPILE:-off,reduce-overhead} \
    --capture off,light,full --steps 30 ${EXTRA:-} --history "$H/sweep" --quiet 2>&1 \
    | grep -v -E "^(USDT|\[rank)" | tee "$OUT/sweep.txt"
timeout ${BATCH_S:-150} python3 -m nbtools run --scenario tp-mlp-infer --batch ${BATCH:-256} ${EXTRA:-} \
    --history "$H/batch256" --quiet 2>&1 | grep -v -E "^(USDT|\[rank)" | tee "$OUT/batch256.txt"
# what the flags were built from, per run and rank: the engine's compile outcome and the
# straggler columns (the CLI table does not show them)
python3 - "$H" <<'PY' 2>&1 | tee "$OUT/flags.txt"
import sys
from pathlib import Path
from nbtools.results.history import History
cols = ["rank", "step_ms", "compile_state", "graphs", "graph_coverage_pct", "wait_ms", "last_pct"]
for name in ("sweep", "batch256"):
    for run in History.load(Path(sys.argv[1]) / name):
        print(f"== {run.config.label() if run.config else run.run_id}")
        s = run.summary
        print(s[[c for c in cols if c in s.columns]].to_string(index=False))
        for r, rep in sorted(run.ranks.items()):
            print(f"   rank {r} compile_outcome: {(rep or {}).get('compile_outcome')}")
        for f in run.flags:
            print(f"   ! {f}")
PY
tar czf "$OUT/runs.tgz" -C "$H" . && rm -rf "$H"
ls -la "$OUT"
