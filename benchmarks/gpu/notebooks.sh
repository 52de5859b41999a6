#!/usr/bin/env bash
# Run the claim notebooks at their GPU sizes and export each one as offline HTML (issue 7),
# plus the leftover GPU measurements of issues 2, 4 and 5. One device call runs a few parts:
#
#   OUT=gpu-out bash benchmarks/gpu/notebooks.sh gputest nb01:200 nb03:200
#
# nbNN:SECONDS[:NAME=VALUE;NAME=VALUE] exports notebooks/NN-*.ipynb to $OUT/NN.html with that deadline (past it the
# running cell is interrupted and the HTML keeps what ran); every run lands in
# $OUT/runs/NN, tarred at the end. Other parts: gputest (pytest -m gpu), roundtrip:SECONDS
# (bench_roundtrip.py on every GPU), autotune:SECONDS (the ddp-train max-autotune-no-cudagraphs
# row of the issue 2 sweep), noise:SECONDS (identical runs repeated in one lab), recount:SECONDS
# (compile seconds with the backward compiles: ddp-train sweep rows and notebook 03's varlen runs).
set -uo pipefail
OUT=${OUT:-gpu-out}
mkdir -p "$OUT/runs" && OUT=$(cd "$OUT" && pwd)
# pip --target puts nbconvert's templates under /tmp/site/share/jupyter
[ -d /tmp/site/share/jupyter ] && export JUPYTER_PATH=/tmp/site/share/jupyter${JUPYTER_PATH:+:$JUPYTER_PATH}
python3 -m nbtools kernel install --user >/dev/null
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version(), torch.cuda.get_device_name(0), 'x', torch.cuda.device_count())" | tee "$OUT/versions.txt"
log() { grep --line-buffered -v -E "^(USDT|\[rank [0-9]+\] USDT)"; }
cleanup() {   # a lab cut off at its deadline takes its engines with it within 10 s: check
    sleep 10; nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader | tee -a "$OUT/log.txt"
}
for part in "$@"; do
    IFS=: read -r name secs extra <<<"$part"; secs=${secs:-300}
    params=(); IFS=';' read -ra kv <<<"${extra:-}"; for p in "${kv[@]}"; do params+=(-p "$p"); done
    t0=$(date +%s)
    echo "=== $name (budget ${secs} s)" | tee -a "$OUT/log.txt"
    case $name in
        gputest)
            timeout "$secs" python3 -m pytest -m gpu tests/ -q -p no:cacheprovider 2>&1 \
                | tail -40 | tee -a "$OUT/log.txt" ;;
        nb0*)
            nn=${name#nb}; nb=$(ls notebooks/${nn}-*.ipynb)
            timeout $((secs + 60)) python3 -m nbtools export "$nb" -o "$OUT/$nn.html" \
                --deadline "$secs" -p "HISTORY='$OUT/runs/$nn'" -p "HTML='$OUT/$nn-report.html'" \
                --save-ipynb "$OUT/runs/$nn.ipynb" "${params[@]}" \
                2>&1 | log | tail -5 | tee -a "$OUT/log.txt"
            cleanup ;;
        roundtrip)
            timeout "$secs" python3 benchmarks/bench_roundtrip.py --relaunches 2 2>&1 | log \
                | tee -a "$OUT/log.txt" | tail -40
            cleanup ;;
        autotune)
            # It has not finished in 525 s twice: snapshots of CPU, GPU and the per-rank
            # inductor caches every 45 s. (Session 4 also dumped the engines' stacks with a
            # pkill -ABRT by name; the lab's processes are no longer signalled by name.)
            ( while sleep 45; do
                  { date +%T; nvidia-smi --query-gpu=index,utilization.gpu,memory.used --format=csv,noheader
                    for d in /tmp/nbtools-autotune-cache/rank* /tmp/nbtools-lab-*/inductor-cache/rank*; do echo "$d $(find "$d" -type f | wc -l) files"; done
                    top -b -n1 -w 200 | sed -n 7,22p; } >>"$OUT/autotune-progress.txt" 2>&1
              done ) & watch=$!
            # The cache survives between back-to-back calls while the machine stays warm: a
            # second call continues where the first stopped compiling.
            PYTHONFAULTHANDLER=1 timeout "$secs" python3 -m nbtools run --scenario ddp-train \
                --compile max-autotune-no-cudagraphs --history "$OUT/runs/autotune" --quiet \
                --compile-cache /tmp/nbtools-autotune-cache 2>&1 \
                | log | tail -8 | tee -a "$OUT/log.txt"
            kill $watch 2>/dev/null
            cleanup ;;
        recount)
            # compile_s with the lazy backward compiles counted (rows recorded before
            # 2026-11-30 have the forward only): the ddp-train rows of the issue 2 sweep,
            # then notebook 03's varlen runs, each printed as it finishes
            half=$((secs / 2))
            timeout "$half" python3 -m nbtools run --scenario ddp-train \
                --compile off,default,reduce-overhead --history "$OUT/runs/recount" --quiet \
                2>&1 | log | tee -a "$OUT/log.txt"
            cleanup
            timeout $((secs - $(date +%s) + t0)) python3 -m nbtools run --scenario varlen-train \
                --compile default --dynamic static,auto,mark --seq-schedule varying \
                --warmup 1 --steps 40 --profiled 2 --history "$OUT/runs/recount-varlen" --quiet \
                2>&1 | log | tee -a "$OUT/log.txt"
            cleanup ;;
        noise)
            timeout "$secs" python3 benchmarks/gpu/repeat_noise.py "$OUT" 3 2>&1 | log \
                | tee -a "$OUT/log.txt" | tail -40
            cleanup ;;
        *) echo "unknown part $name" ;;
    esac
    echo "=== $name took $(( $(date +%s) - t0 )) s" | tee -a "$OUT/log.txt"
    tar czf "$OUT/runs.tgz" -C "$OUT" runs   # after every part: a call cut off keeps the rest
done
rm -rf "$OUT/runs"
ls -la "$OUT"
