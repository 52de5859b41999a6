"""Does the lab measure what a plain script measures? One Workload, run in the lab and in a
plain script (torch.multiprocessing workers, no lab code anywhere in them), in interleaved
rounds, timed the same way: per step, inputs made before the clock, CUDA events around
the step on a GPU (perf_counter on CPU), a synchronise after it.

    python benchmarks/fidelity.py                  # every case; CPU: 2 gloo ranks, small sizes
    python benchmarks/fidelity.py --rounds 5 --cases fsdp2-host,ddp-small

Cases (Llama-shaped blocks from plain torch modules: RMSNorm, attention through SDPA,
SwiGLU MLP): ``gpu-bound`` (FSDP2 per block, wide blocks, long sequences), ``fsdp2-host``
(FSDP2 per block, many narrow blocks: the host launches more than the GPU computes),
``ddp-small`` (DDP over many narrow layers: many small gradient buckets). Per case and
round, in an order that reverses every round (ABC, CBA, ...): the plain script, the lab
with the engine's old behaviour beside its steps (engine/quiet.py BEFORE) and the lab as
it is now (DEFAULTS). Printed per case: each side's median step (the slowest rank's, over
all measured steps of all rounds), lab/plain ratio, and spread = (p90 - p10) / median of
those steps.
"""
from __future__ import annotations

import argparse
import os
import socket
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


# -- the workload: plain torch ---------------------------------------------------------
class RMSNorm(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.w = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return self.w * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)


class Block(nn.Module):
    """One Llama decoder layer's shape: pre-norm attention and SwiGLU MLP."""

    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.n1, self.n2 = RMSNorm(d), RMSNorm(d)
        self.qkv, self.o = nn.Linear(d, 3 * d, bias=False), nn.Linear(d, d, bias=False)
        hidden = int(8 * d / 3) // 64 * 64 or 64
        self.gate, self.up = nn.Linear(d, hidden, bias=False), nn.Linear(d, hidden, bias=False)
        self.down = nn.Linear(hidden, d, bias=False)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, s, 3, self.heads, d // self.heads).unbind(2)
        a = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                           v.transpose(1, 2), is_causal=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, s, d))
        h = self.n2(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class Net(nn.Module):
    def __init__(self, d, heads, layers, vocab=1024):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.layers = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.norm, self.head = RMSNorm(d), nn.Linear(d, vocab, bias=False)

    def forward(self, tokens):
        x = self.emb(tokens)
        for b in self.layers:
            x = b(x)
        return self.head(self.norm(x))


# (d, heads, layers, batch, seq, parallel) on a GPU / on CPU
CASES = {
    "gpu-bound": dict(cuda=(2048, 16, 8, 4, 2048, "fsdp2"), cpu=(256, 4, 2, 2, 256, "fsdp2")),
    "fsdp2-host": dict(cuda=(256, 4, 48, 1, 64, "fsdp2"), cpu=(64, 2, 16, 1, 16, "fsdp2")),
    "ddp-small": dict(cuda=(128, 2, 96, 1, 32, "ddp"), cpu=(32, 2, 24, 1, 8, "ddp")),
}
VOCAB = 1024


def shape(case, device_type):
    return CASES[case]["cuda" if device_type == "cuda" else "cpu"]


def make_model(d, heads, layers):
    return Net(d, heads, layers, VOCAB)


def make_batch(step, device, batch, seq):
    g = torch.Generator().manual_seed(step)
    t = torch.randint(0, VOCAB, (batch, seq + 1), generator=g)
    return t[:, :-1].to(device), t[:, 1:].to(device)


def loss_fn(out, target):
    return F.cross_entropy(out.flatten(0, 1).float(), target.flatten())


def workload(case, device_type):
    from nbtools import Workload
    d, heads, layers, batch, seq, _ = shape(case, device_type)
    return Workload(model=lambda: make_model(d, heads, layers),
                    batch=lambda step, device: make_batch(step, device, batch, seq),
                    loss=loss_fn, blocks=lambda m: m.layers, name=case)


# -- the plain script: a worker per rank, no nbtools import ------------------------------
def _plain_worker(rank, world, port, threads, jobs, results):
    import torch.distributed as dist
    cuda = torch.cuda.is_available()
    if not cuda:
        torch.set_num_threads(threads)
    device = torch.device("cuda", 0) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=world)
    built = {}
    while True:
        job = jobs[rank].get()
        if job is None:
            break
        case, warmup, steps, seed = job
        if case not in built:
            built[case] = _plain_build(case, device, seed)
        model, opt, (batch, seq) = built[case]
        times = []
        for i in range(warmup + steps):
            inputs, target = make_batch(i, device, batch, seq)     # before the clock
            if cuda:
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                e0.record()
            else:
                p0 = time.perf_counter_ns()
            opt.zero_grad(set_to_none=True)
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=cuda):
                out = model(inputs)
            loss = loss_fn(out, target)
            loss.backward()
            opt.step()
            if cuda:
                e1.record()
                e1.synchronize()
                dur = e0.elapsed_time(e1)
            else:
                dur = (time.perf_counter_ns() - p0) / 1e6
            if i >= warmup:
                times.append(dur)
        results.put((rank, times))
    dist.destroy_process_group()


def _plain_build(case, device, seed):
    d, heads, layers, batch, seq, parallel = shape(case, device.type)
    torch.manual_seed(seed)
    with torch.device(device):
        model = make_model(d, heads, layers)
    model = model.to(device)
    if parallel == "fsdp2":
        from torch.distributed.fsdp import fully_shard
        for b in model.layers:
            fully_shard(b)
        fully_shard(model)
    else:
        from torch.nn.parallel import DistributedDataParallel as DDP
        model = DDP(model, device_ids=[0] if device.type == "cuda" else None)
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=1e-3,
                          momentum=0.9)
    return model, opt, (batch, seq)


class Plain:
    def __init__(self, world, threads):
        import torch.multiprocessing as mp
        ctx = mp.get_context("spawn")
        self.jobs = [ctx.Queue() for _ in range(world)]
        self.results = ctx.Queue()
        # as the lab does for CPU ranks (pool.py; GPU engines keep torch's default): before
        # torch starts in the children
        if not torch.cuda.is_available():
            os.environ["OMP_NUM_THREADS"] = str(threads)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.procs = [ctx.Process(target=_plain_worker, args=(r, world, port, threads,
                                                               self.jobs, self.results))
                      for r in range(world)]
        for p in self.procs:
            p.start()

    def run(self, case, warmup, steps, seed=0) -> list:
        """Per measured step, the slowest rank's time (ms)."""
        for q in self.jobs:
            q.put((case, warmup, steps, seed))
        per_rank = dict(self.results.get(timeout=600) for _ in self.jobs)
        return [max(t) for t in zip(*per_rank.values())]

    def close(self):
        for q in self.jobs:
            q.put(None)
        for p in self.procs:
            p.join(60)


# -- the lab ---------------------------------------------------------------------------
def lab_run(lab, case, warmup, steps, profiled, switches) -> list:
    from nbtools import StepConfig
    from nbtools.engine import quiet
    engines = lab.client[list(lab.rank_to_engine.values())]
    engines.apply_sync(quiet.configure, **switches)
    cuda = lab.device_type == "cuda"
    cfg = StepConfig(scenario="custom", parallel=shape(case, lab.device_type)[5],
                     autocast="bf16" if cuda else "off", warmup=warmup, steps=steps,
                     profiled=profiled, capture="full" if profiled else "off")
    run = lab.run(workload(case, lab.device_type), cfg)
    st = run.steps[run.steps["phase"] == "measured"]
    per_step = st.assign(ms=st["dur_ns"] / 1e6).groupby("step")["ms"].max()
    state = [c for c in ("host_load", "sm_clock_mhz", "sm_clock_min_mhz", "sm_clock_max_mhz",
                         "gpu_temp_c", "gpu_power_w", "throttle", "gpu_other_procs")
             if c in run.summary]
    return per_step.tolist(), run.flags, run.summary[["rank"] + state]


def _device_name():   # on the engine: the client itself keeps off the GPU
    import torch
    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"


def stats(xs):
    xs = sorted(xs)
    q = statistics.quantiles(xs, n=10, method="inclusive")
    med = statistics.median(xs)
    return med, 100 * (q[-1] - q[0]) / med


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--profiled", type=int, default=2, help="profiled steps per lab run "
                    "(after its measured ones, as in normal use; 0: capture off)")
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--budget-s", type=float, default=0,
                    help="start no new round after this many seconds (0: no limit), so a "
                    "run under a wall-clock limit still prints its table")
    ap.add_argument("--variants", default="plain,before,after",
                    help="plain, before, after, noprof (after with capture off: no "
                    "profiled steps in any run)")
    a = ap.parse_args()
    from nbtools import Lab
    from nbtools.analysis.flags import identify
    from nbtools.engine import quiet
    cases = a.cases.split(",")
    variants = a.variants.split(",")
    t0 = time.time()
    with Lab(echo=False, history=None) as lab:
        world = lab.world_size
        threads = max(1, (os.cpu_count() or 1) // world)
        plain = Plain(world, threads) if "plain" in variants else None
        gpu = lab.client[lab.rank_to_engine[0]].apply_sync(_device_name)
        print(f"device {lab.device_type} ({gpu}), "
              f"{world} rank(s), torch {torch.__version__}, rounds {a.rounds}, warm-up "
              f"{a.warmup}, measured {a.steps}, profiled {a.profiled} (lab)", flush=True)
        times = {(c, v): [] for c in cases for v in variants}
        rounds = {(c, v): [] for c in cases for v in variants}
        flags, machine = {}, {}
        try:
            for rnd in range(a.rounds):
                if a.budget_s and rnd and time.time() - t0 > a.budget_s:
                    print(f"budget of {a.budget_s:.0f} s spent: {rnd} of {a.rounds} rounds",
                          flush=True)
                    break
                order = variants if rnd % 2 == 0 else variants[::-1]
                for c in cases:
                    for v in order:
                        if v == "plain":
                            got = plain.run(c, a.warmup, a.steps)
                        else:
                            got, fl, state = lab_run(
                                lab, c, a.warmup, a.steps, 0 if v == "noprof" else a.profiled,
                                quiet.BEFORE if v == "before" else quiet.DEFAULTS)
                            flags[(c, v)], machine[(c, v)] = fl, state
                        times[(c, v)] += got
                        rounds[(c, v)].append(statistics.median(got))
                print(f"round {rnd + 1} done ({time.time() - t0:.0f} s)", flush=True)
        finally:
            if plain is not None:
                plain.close()
    print(f"\n{'case':<11} {'variant':<7} {'median ms':>10} {'spread %':>9} {'ratio':>6}  "
          "round medians (ms)")
    for c in cases:
        base = stats(times[(c, "plain")]) if "plain" in variants else None
        for v in variants:
            med, spread = stats(times[(c, v)])
            ratio = f"{med / base[0]:.3f}" if base else "-"
            print(f"{c:<11} {v:<7} {med:>10.3f} {spread:>9.1f} {ratio:>6}  "
                  + " ".join(f"{x:.3f}" for x in rounds[(c, v)]))
            for f in flags.get((c, v), []):
                if identify(f) in ("host-busy", "clock-low", "gpu-shared"):
                    print(f"{'':<20}! {f}")
    if "plain" in variants:
        # The quotable number: each round's lab/plain (its two runs minutes apart at most,
        # so the machine's drift cancels), with a 95 % interval over rounds.
        from nbtools.analysis.verdict import rounds_verdict
        print("\nlab (B) against plain (A), per-round ratios, 95 % bootstrap interval:")
        for c in cases:
            for v in variants:
                if v != "plain":
                    vd = rounds_verdict(rounds[(c, "plain")], rounds[(c, v)])
                    print(f"  {c:<11} {v:<7} {vd.ratio:.3f} ({vd.low:.3f}-{vd.high:.3f}): "
                          f"{vd.text}")
    for (c, v), state in machine.items():
        if v == "after":
            print(f"\nmachine during the last 'after' run of {c}:\n{state.to_string(index=False)}")
    print(f"total {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
