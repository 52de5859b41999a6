"""Notebook 06's timeline documents on 2 ranks, estimated from a 1-GPU run history: each
run with its rank 0 copied as rank 1 (shifted 3 us), drawn as the notebook draws them (two
compare figures and the panel's timeline), serialized as Bokeh documents.

    python benchmarks/nb06_two_rank_estimate.py HISTORY_FOLDER

(issue 25: the export on 2 x H200 needs that kind; this says what to expect from a 1 x H200
history, e.g. the runs `benchmarks/gpu/models.sh` saves.)"""
import json, sys
import numpy as np, pandas as pd
from bokeh.embed import json_item
from nbtools.results.history import History
from nbtools.ui.timeline import compare_figure, Timeline

h = list(History.load(sys.argv[1]))
def pick(parallel, compile="off"):
    c = [r for r in h if r.config.parallel == parallel and r.config.compile == compile and r.ok]
    return c[-1]
def two_ranks(run):
    import copy
    r = copy.copy(run)
    for name in ("events", "steps", "compile_events"):
        t = getattr(run, name)
        if t is None or not len(t) or "rank" not in t:
            continue
        t1 = t[t["rank"] == 0].copy(); t1["rank"] = 1
        if "ts_ns" in t1: t1["ts_ns"] = t1["ts_ns"] + 3000
        setattr(r, name, pd.concat([t, t1], ignore_index=True))
    if getattr(run, "summary", None) is not None and len(run.summary):
        s1 = run.summary[run.summary["rank"] == 0].copy(); s1["rank"] = 1
        r.summary = pd.concat([run.summary, s1], ignore_index=True)
    return r
def size(fig):
    return len(json.dumps(json_item(fig)).encode())
pairs = [(pick("ddp"), pick("fsdp2")), (pick("fsdp2"), pick("fsdp2", "default"))]
for label, f in (("1 rank", lambda r: r), ("2 ranks (copied)", two_ranks)):
    sizes = [size(compare_figure(f(a), f(b))) for a, b in pairs]
    tl = Timeline(f(pairs[0][1]))
    sizes.append(size(tl.layout))
    print(label, [f"{s/1e6:.2f} MB" for s in sizes], f"total {sum(sizes)/1e6:.2f} MB")
