"""Does a user's own step that captures a CUDA graph itself still show the graph's kernels
in the lab's profiles, now that the engine tears CUPTI down after each profiler session
(engine/quiet.py ``cupti_teardown``)? One GPU, one rank.

    python benchmarks/gpu/own_graph_profile.py

The step captures a graph of 8 Linear+ReLU layers on its first call (kept in ctx.state)
and replays it on every step; two runs in one lab, so the second profiles after a
teardown. Printed per lab and run: GPU kernels per profiled step, and how many of them
came from a graph replay. Lab A: the defaults (teardown on). Lab B: the person's own
``TEARDOWN_CUPTI=0`` (the engine never tears down and attaches CUPTI before any capture).
A profile that sees the replay shows its kernels (flagged `graph`) in every profiled step,
the same count in both labs.
"""
from __future__ import annotations

import os
import sys

LAYERS = 8


def graph_step(ctx):
    import torch
    if "graph" not in ctx.state:
        torch.manual_seed(0)
        layers = [torch.nn.Linear(1024, 1024, device=ctx.device) for _ in range(LAYERS)]
        x = torch.randn(64, 1024, device=ctx.device)

        def fwd(t):
            for lin in layers:
                t = torch.relu(lin(t))
            return t
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s), torch.no_grad():
            for _ in range(3):
                fwd(x)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g), torch.no_grad():
            y = fwd(x)
        ctx.state.update(graph=g, out=y, layers=layers, x=x)
    ctx.state["graph"].replay()


def one_lab(label: str) -> None:
    from nbtools import Lab, StepConfig
    cfg = StepConfig(scenario="custom", warmup=2, steps=3, profiled=3, capture="full")
    with Lab(1, echo=False, history=None) as lab:
        for k in (1, 2):
            run = lab.run(graph_step, cfg)
            ev = run.events
            gpu = ev[ev["lane"].str.startswith("cuda") & (ev["category"] == "compute")
                     & (ev["step"] >= 0)]
            per = gpu.groupby("step").agg(kernels=("name", "size"), from_graph=("graph", "sum"))
            steps = ", ".join(f"step {s}: {r.kernels} ({r.from_graph} graph)"
                              for s, r in per.iterrows()) or "no GPU kernels"
            print(f"{label} run {k}: TEARDOWN_CUPTI={os.environ.get('TEARDOWN_CUPTI', '-')} "
                  f"(client); kernels per profiled step: {steps}; flags: {run.flags}",
                  flush=True)


if __name__ == "__main__":
    which = sys.argv[1] if len(sys.argv) > 1 else "both"
    if which in ("A", "both"):
        one_lab("A (defaults)")
    if which in ("B", "both"):
        os.environ["TEARDOWN_CUPTI"] = "0"
        one_lab("B (TEARDOWN_CUPTI=0)")
