"""Check the design's assumptions where they run: 2 GPUs, torchrun, the host's torch.

    torchrun --nproc-per-node 2 benchmarks/gpu/check_assumptions.py $OUT

Prints one JSON line per check per rank and writes Kineto traces of the TP scenario
(eager and reduce-overhead) to $OUT for the trace fixtures.
"""
import json
import os
import sys
import threading
import time
from datetime import timedelta

import torch
import torch.distributed as dist

OUT = sys.argv[1] if len(sys.argv) > 1 else "."
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
local = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local)
dev = torch.device("cuda", local)
results = {}


def report(name, **kw):
    results[name] = kw
    print(json.dumps({"rank": rank, "check": name, **kw}, default=str), flush=True)


def check(name):
    def deco(fn):
        t = time.perf_counter()
        try:
            fn()
        except Exception as e:  # keep going: each check reports on its own
            report(name, ok=False, error=f"{type(e).__name__}: {str(e)[:400]}")
        print(f"[rank {rank}] {name}: {time.perf_counter() - t:.1f}s", flush=True)
        return fn
    return deco


store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]) + 1, world,
                      is_master=rank == 0, timeout=timedelta(seconds=60))
dist.init_process_group("nccl", store=dist.PrefixStore("g1", store), rank=rank, world_size=world,
                        timeout=timedelta(seconds=60), device_id=dev)


@check("versions_and_apis")
def _():
    import torch._dynamo.utils as du
    fields = set(du.CompilationMetrics.__dataclass_fields__)
    apis = {}
    for dotted in ("torch._dynamo.callback.callback_handler", "torch.compiler.set_stance",
                   "torch.compiler.save_cache_artifacts", "torch.distributed.fsdp.fully_shard",
                   "torch._dynamo.compiled_autograd._enable", "torch._dynamo.utils.guard_failures",
                   "torch.profiler._utils._init_for_cuda_graphs",
                   "torch.distributed.distributed_c10d._abort_process_group"):
        mod, _, attr = dotted.rpartition(".")
        try:
            apis[dotted] = hasattr(__import__(mod, fromlist=[attr]), attr)
        except Exception as e:
            apis[dotted] = f"import error {e}"
    from torch._logging._internal import log_registry
    arts = sorted(a for a in log_registry.artifact_names
                  if a in ("recompiles", "recompiles_verbose", "graph_breaks", "cudagraphs",
                           "perf_hints", "cudagraph_static_inputs"))
    report("versions_and_apis", ok=True, torch=torch.__version__, cuda=torch.version.cuda,
           nccl=torch.cuda.nccl.version(), gpu=torch.cuda.get_device_name(dev), apis=apis,
           artifacts=arts, metrics_fields_missing=sorted(
               {"recompile_reason", "cudagraph_skip_reason", "inductor_fx_local_cache_hit_count",
                "start_time_us", "duration_us", "is_runtime", "graph_op_count", "guard_count"} - fields))


def kineto_counts(prof):
    evs = prof.profiler.kineto_results.events()
    launches = {e.correlation_id() for e in evs if e.name() in ("cudaGraphLaunch", "hipGraphLaunch")}
    kernels = [e for e in evs if e.device_type() == torch.autograd.DeviceType.CUDA
               and not e.is_user_annotation()]
    graph = [k for k in kernels if k.correlation_id() in launches]
    nccl = [k for k in kernels if k.name().lower().startswith("nccl")]
    streams = sorted({k.device_resource_id() for k in kernels})
    return dict(events=len(evs), kernels=len(kernels), graph_kernels=len(graph),
                nccl_kernels=len(nccl), streams=streams, graph_launches=len(launches),
                first_kernel_start_ns=min((k.start_ns() for k in kernels), default=0))


@check("tp_eager_vs_reduce_overhead")
def _():
    from torch.profiler._utils import _init_for_cuda_graphs
    _init_for_cuda_graphs()
    from nbtools.engine.scenarios import _tp_mlp
    for mode in ("off", "reduce-overhead"):
        torch.compiler.reset()
        wl = _tp_mlp("large", 1, dev, rank, world, dist.group.WORLD, 0)
        fn = wl.model if mode == "off" else torch.compile(wl.model, mode=mode)
        x = wl.make_batch(0)[0][0]
        t = time.perf_counter()
        with torch.no_grad():
            for _ in range(5):
                fn(x)
        torch.cuda.synchronize()
        warm = time.perf_counter() - t
        times = []
        with torch.no_grad():
            for _ in range(30):
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record(); y = fn(x); b.record(); b.synchronize()
                times.append(a.elapsed_time(b))
        times.sort()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                torch.profiler.ProfilerActivity.CUDA]) as prof:
            with torch.no_grad():
                for i in range(3):
                    with torch.profiler.record_function(f"nbtools/step {i}"):
                        fn(x)
                torch.cuda.synchronize()
        prof.export_chrome_trace(os.path.join(OUT, f"tp_{mode}_rank{rank}.json"))
        report(f"tp_{mode}", ok=True, warm_s=round(warm, 2), median_ms=times[len(times) // 2],
               p10_ms=times[3], p90_ms=times[27], **kineto_counts(prof))


@check("manual_cudagraph_tp")
def _():
    from nbtools.engine.scenarios import _tp_mlp
    torch.compiler.reset()
    wl = _tp_mlp("large", 1, dev, rank, world, dist.group.WORLD, 0)
    x = wl.make_batch(0)[0][0]
    with torch.no_grad():
        ref = wl.model(x).clone()
        s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                wl.model(x)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            y = wl.model(x)
        g.replay(); torch.cuda.synchronize()
    times = []
    for _ in range(30):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); g.replay(); b.record(); b.synchronize(); times.append(a.elapsed_time(b))
    times.sort()
    report("manual_cudagraph_tp", ok=True, max_abs_diff=(y - ref).abs().max().item(),
           median_ms=times[15])


@check("reduce_overhead_batch_change")
def _():
    import torch._dynamo.utils as du
    from torch._dynamo.utils import counters
    torch.compiler.reset(); du.clear_compilation_metrics(); counters.clear()
    from nbtools.engine.scenarios import _tp_mlp
    wl = _tp_mlp("large", 1, dev, rank, world, dist.group.WORLD, 0)
    fn = torch.compile(wl.model, mode="reduce-overhead")
    mem = []
    with torch.no_grad():
        for b in (1, 2, 4, 2, 8, 1):
            x = torch.randn(b, 4096, device=dev)
            for _ in range(3):
                fn(x)
            torch.cuda.synchronize()
            mem.append((b, torch.cuda.memory_allocated() // 2**20))
    ms = [m for m in du.get_compilation_metrics() if m.co_name]
    report("reduce_overhead_batch_change", ok=True, compiles=len(ms),
           reasons=[m.recompile_reason for m in ms], skip=[m.cudagraph_skip_reason for m in ms],
           inductor_counters=dict(counters["inductor"]), mem_mb=mem)


@check("failure_release_and_reinit")
def _():
    key = "failed/check"
    x = torch.ones(1 << 20, device=dev)
    dist.all_reduce(x); torch.cuda.synchronize()
    if rank == 1:
        time.sleep(1.0)
        store.set(key, "rank 1: planted failure")
        dist.distributed_c10d._abort_process_group()
        report("failure_release", ok=True, role="failing rank aborted")
    else:
        freed = {}

        def watch():
            while not store.check([key]):
                time.sleep(0.1)
            freed["seen"] = time.perf_counter()
            dist.distributed_c10d._abort_process_group()
        threading.Thread(target=watch, daemon=True).start()
        t = time.perf_counter()
        err = None
        try:
            dist.all_reduce(x)
            torch.cuda.synchronize()
        except Exception as e:
            err = f"{type(e).__name__}: {str(e)[:200]}"
        report("failure_release", ok=True, waited_s=round(time.perf_counter() - t, 2),
               seen_after_s=round(freed.get("seen", float("nan")) - t, 2), error=err)
    # a fresh group on the same store: does the lab recover without restarting engines?
    t = time.perf_counter()
    dist.init_process_group("nccl", store=dist.PrefixStore("g2", store), rank=rank,
                            world_size=world, timeout=timedelta(seconds=60), device_id=dev)
    y = torch.full((4,), float(rank + 1), device=dev)
    dist.all_reduce(y); torch.cuda.synchronize()
    report("reinit", ok=True, value=y[0].item(), expected=sum(range(1, world + 1)),
           s=round(time.perf_counter() - t, 2))


t = time.perf_counter()
ok = dist.destroy_process_group() if dist.is_initialized() else None
report("teardown", ok=True, s=round(time.perf_counter() - t, 2))
with open(os.path.join(OUT, f"assumptions_rank{rank}.json"), "w") as f:
    json.dump(results, f, indent=1, default=str)
