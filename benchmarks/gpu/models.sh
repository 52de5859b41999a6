#!/usr/bin/env bash
# Notebook 06 (your own model: transformers' LlamaForCausalLM at ~1.2 B parameters and
# torchvision's ResNet-50) at GPU size on the 2 x H200 host, exported as offline HTML, then
# its numbers per strategy and compile mode, one line per run (from the saved runs):
#
#   OUT=gpu-out bash benchmarks/gpu/models.sh [DEADLINE_S] [NAME=VALUE ...]   # default 460 s
#
# NAME=VALUE override the notebook's parameters, to split it over device calls, e.g.
#   bash benchmarks/gpu/models.sh 460 'COMPILED=[]' REDUCE_OVERHEAD=False RESNET=False
#   bash benchmarks/gpu/models.sh 460 'STRATEGIES=[]'
# (each call's runs and HTML land in its own $OUT). Past the deadline the running cell is
# interrupted and the HTML and the table keep what ran.
#
# Needs transformers (the models extra) on the host. A host without a package registry gets
# it as wheels, with the lab's other dependencies: transformers huggingface-hub tokenizers
# safetensors regex hf-xet httpx2 httpcore2 click typer rich shellingham annotated-doc
# pydantic pydantic-core annotated-types typing-inspection filelock fsspec (transformers
# 5.24.0 was tested on CPU with torch 2.13).
set -uo pipefail
OUT=${OUT:-gpu-out}
secs=${1:-460}
shift || true
params=(); for p in "$@"; do params+=(-p "$p"); done
mkdir -p "$OUT/runs" && OUT=$(cd "$OUT" && pwd)
[ -d /tmp/site/share/jupyter ] && export JUPYTER_PATH=/tmp/site/share/jupyter${JUPYTER_PATH:+:$JUPYTER_PATH}
python3 -m nbtools kernel install --user >/dev/null
python3 -c "import torch, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version(), torch.cuda.get_device_name(0), 'x', torch.cuda.device_count(), 'transformers', transformers.__version__)" | tee "$OUT/versions.txt"
python3 -c "import torchvision; print('torchvision', torchvision.__version__)" 2>&1 | tail -1 | tee -a "$OUT/versions.txt"
t0=$(date +%s)
timeout $((secs + 60)) python3 -m nbtools export notebooks/06-your-own-model.ipynb \
    -o "$OUT/06.html" --deadline "$secs" -p "HISTORY='$OUT/runs/06'" \
    --save-ipynb "$OUT/runs/06.ipynb" "${params[@]}" 2>&1 | grep -v USDT | tail -5 | tee -a "$OUT/log.txt"
echo "=== nb06 took $(( $(date +%s) - t0 )) s" | tee -a "$OUT/log.txt"
# a lab cut off at the deadline takes its engines with it (the lab's guard and the
# engines' watchdogs, within 10 s of its kernel's end): nothing of it may hold the GPUs
sleep 10; nvidia-smi --query-compute-apps=pid,used_memory --format=csv | tee "$OUT/gpu_apps_after.txt"
python3 - "$OUT/runs/06" <<'PY' | tee "$OUT/06-numbers.txt"
import sys
import pandas as pd
from nbtools.claims import model_sweep as model_runs
from nbtools.results.history import History
runs = [r for r in History.load(sys.argv[1])]
pd.set_option("display.width", 250, "display.max_columns", 30)
t = model_runs.table(runs, fields=("parallel", "compile", "autocast"))
print(t[["model", "parallel", "compile", "autocast", "status", "step_ms", "items_per_s", "tflops",
         "mfu_pct", "compile_s", "peak_mem_mb", "check_rel"]].to_string(index=False))
PY
tar czf "$OUT/runs.tgz" -C "$OUT" runs && rm -rf "$OUT/runs"
ls -la "$OUT"
