"""What one toggle costs on a warm lab, and what relaunching the same step would cost.

    python benchmarks/bench_roundtrip.py [--n 2] [--toggles 6] [--relaunches 3]
                                         [--scenario tp-mlp-infer] [--backend inductor]
                                         [--write docs/benchmarks.md]

A toggle is what the panel does: config from the widgets -> lab.run -> timeline.update,
with the timeline in a Bokeh Document whose changes are serialized as the PATCH-DOC
messages jupyter_bokeh's BokehModel sends. Two configs (A: eager, B: torch.compile) are
alternated with cache="continue", after each has run once, so nothing recompiles; the
first switch to B (it compiles) is reported on its own as the cold toggle.

Each toggle is split into the step's own time (every warm-up, measured and profiled step
of the slowest rank, from run.steps) and what the lab adds: engine-side work around the
steps (run.ranks[r]["engine_s"] minus the steps and the trace parse), the trace parse
(run.ranks[r]["parse_s"]), dispatch, waiting/transfer beyond the engines' own time,
assembling the Run, the summary (analysis), saving to the history, and the plot update.
The client-side pieces are timed by wrapping the Lab's methods on this instance.

The relaunch baseline runs the same config as a fresh torchrun job (this file with
--worker: nbtools' engine-side setup + run, as the lab's engines do) and times the whole
command. On GPUs, run it where the lab gets one engine per GPU; nothing else changes.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SMALL = dict(warmup=1, steps=3, profiled=1)
NOTES = """\
- `step` is every warm-up, measured and profiled step of the slowest rank; in the cold
  toggle it holds torch.compile's work, which happens inside the first warm-up step.
- `engine: around the steps` is the engine's own time outside the steps and the parse
  (building or re-wrapping the model, starting and stopping the profiler, compile
  records). In the cold toggle it is mostly the engine's first `torch.compile(...)` call
  (importing Dynamo and Inductor in that process), which happens once per engine.
- `wait + transfer` is the client's wait for the results beyond the slowest engine's own
  time; `history save` writes the run as Parquet (the lab's default history folder).
- `PATCH-DOC serialize` is what jupyter_bokeh's BokehModel does with each change of the
  timeline's sources; the size is what goes to the browser.
- The relaunch times come from `torchrun` running the same config through the same
  engine-side code (start, process group, build, steps, profile, parse, teardown). Its
  Inductor cache folder persists between the launches, so only the first launch of B
  compiles cold.
"""


# -- the torchrun worker (imports torch only after CUDA_VISIBLE_DEVICES is set) -----------
def worker(args) -> None:
    local = int(os.environ["LOCAL_RANK"])
    gpus = [g for g in args.gpus.split(",") if g]
    # one GPU per rank, seen as cuda:0, exactly as the lab's engines see theirs
    os.environ["CUDA_VISIBLE_DEVICES"] = gpus[local] if gpus else ""
    sys.path.insert(0, str(ROOT))
    from nbtools.engine import process_group, runner as engine
    from nbtools.lab import placement
    from nbtools.config.step_config import StepConfig
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    threads = 0 if gpus else placement.threads_per_rank(os.cpu_count(), world)
    process_group.setup(rank, world, "127.0.0.1", args.port, threads,
                 str(Path(args.cache) / f"rank{rank}"), 120.0)
    rep = engine.run(StepConfig.from_dict(json.loads(args.cfg)), "relaunch")
    process_group.shutdown(10.0)
    print(json.dumps(dict(rank=rank, status=rep["status"], error=rep.get("error", "")[:300],
                          engine_s=rep["engine_s"])), flush=True)
    if rep["status"] != "ok":
        sys.exit(1)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def relaunch_s(cfg, n: int, gpus: list, cache: str) -> float:
    """Wall-clock of one fresh torchrun job running ``cfg`` on n ranks."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=1", f"--nproc-per-node={n}",
           "--master-addr=127.0.0.1", f"--master-port={_free_port()}", __file__, "--worker",
           f"--port={_free_port()}", f"--cfg={json.dumps(cfg.to_dict())}",
           f"--gpus={','.join(gpus)}", f"--cache={cache}"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT),
                                                                    os.environ.get("PYTHONPATH")])))
    t = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    wall = time.perf_counter() - t
    if out.returncode != 0:
        raise RuntimeError(f"torchrun failed ({out.returncode}):\n{out.stdout[-2000:]}\n"
                           f"{out.stderr[-3000:]}")
    return wall


# -- timing the lab's pieces ------------------------------------------------------------
class Clock:
    """Wraps callables so each call adds its seconds to ``self.t[name]``."""

    def __init__(self):
        self.t: dict = {}

    def wrap(self, obj, attr, name):
        fn = getattr(obj, attr)

        def timed(*a, **kw):
            t = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                self.t[name] = self.t.get(name, 0.0) + time.perf_counter() - t
        setattr(obj, attr, timed)


class PatchSink:
    """Serializes each document change as jupyter_bokeh's BokehModel does (PATCH-DOC)."""

    def __init__(self, layout):
        from bokeh.document import Document
        from bokeh.protocol import Protocol
        self.protocol, self.bytes, self.s = Protocol(), 0, 0.0
        self.doc = Document()
        self.doc.add_root(layout)
        self.doc.on_change(self._changed)

    def _changed(self, event):
        t = time.perf_counter()
        msg = self.protocol.create("PATCH-DOC", [event])
        self.bytes += len(msg.header_json) + len(msg.metadata_json) + len(msg.content_json) \
            + sum(len(b.to_bytes()) for b in msg.buffers)
        self.s += time.perf_counter() - t


def toggle(lab, tl, sink, clock, values) -> dict:
    """One round trip, as the panel does it; returns its pieces in seconds."""
    from nbtools.config.step_config import StepConfig
    clock.t.clear()
    sink.bytes, sink.s = 0, 0.0
    t0 = time.perf_counter()
    cfg = StepConfig.from_dict(values)              # what config_from_values ends in
    t1 = time.perf_counter()
    run = lab.run(cfg)
    t2 = time.perf_counter()
    tl.update(run)
    t3 = time.perf_counter()
    steps = run.steps.groupby("rank")["dur_ns"].sum() / 1e9
    slow = int(steps.idxmax())                      # the slowest rank's step time
    eng = {r: rep["engine_s"] for r, rep in run.ranks.items()}
    parse = {r: rep.get("parse_s") or 0.0 for r, rep in run.ranks.items()}
    busiest = max(eng, key=eng.get)
    other = clock.t["assemble"] - clock.t["summary"]
    return {"step": float(steps[slow]),
            "engine: around the steps": eng[busiest] - float(steps[busiest]) - parse[busiest],
            "engine: trace parse": parse[busiest],
            "dispatch": clock.t["wait_start"] - t1,
            "wait + transfer": clock.t["wait"] - eng[busiest],
            "assemble Run": other,
            "summary (analysis)": clock.t["summary"],
            "history save": clock.t.get("history", 0.0),
            "config from values": t1 - t0,
            "timeline.update": (t3 - t2) - sink.s,
            "PATCH-DOC serialize": sink.s,
            "total": t3 - t0, "patch_kb": sink.bytes / 1e3, "compile_s":
            float(run.summary["compile_s"].max()), "events": len(run.events)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=None, help="ranks (default: one per GPU, else 2)")
    ap.add_argument("--scenario", default="tp-mlp-infer")
    ap.add_argument("--backend", default="inductor", help="config B's torch.compile backend")
    ap.add_argument("--toggles", type=int, default=6)
    ap.add_argument("--relaunches", type=int, default=3)
    ap.add_argument("--write", default=None, help="append/replace the section in this file")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--cfg", default="", help=argparse.SUPPRESS)
    ap.add_argument("--gpus", default="", help=argparse.SUPPRESS)
    ap.add_argument("--cache", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args)

    sys.path.insert(0, str(ROOT))
    import nbtools.analysis.summary
    import nbtools.lab.gather
    import nbtools.lab.lab
    from nbtools import Lab, StepConfig
    from nbtools.ui.timeline import Timeline

    lines = []

    def say(text=""):
        print(text, flush=True)
        lines.append(text)

    a = StepConfig(scenario=args.scenario, cache="continue", **SMALL)
    b = a.replace(compile="default", backend=args.backend)
    clock = Clock()
    tmp = Path(tempfile.mkdtemp(prefix="nbtools-bench-"))
    t = time.perf_counter()
    lab = Lab(n=args.n, history=tmp / "history", echo=False)
    start_s = time.perf_counter() - t
    try:
        clock.wrap(nbtools.lab.gather, "wait", "wait")
        orig_wait = nbtools.lab.gather.wait

        def wait_marked(*a_, **kw):     # when the last apply_async has gone out
            clock.t["wait_start"] = time.perf_counter()
            return orig_wait(*a_, **kw)
        nbtools.lab.gather.wait = wait_marked
        clock.wrap(nbtools.lab.lab, "assemble", "assemble")
        clock.wrap(nbtools.analysis.summary, "build", "summary")
        clock.wrap(nbtools.analysis.summary, "flags", "summary")
        clock.wrap(lab.history, "add", "history")
        tl = Timeline(width=1100)
        sink = PatchSink(tl.layout)

        va, vb = a.to_dict(), b.to_dict()
        toggle(lab, tl, sink, clock, va)                  # builds the model: not a toggle
        cold = toggle(lab, tl, sink, clock, vb)           # B compiles here
        warm = [toggle(lab, tl, sink, clock, vb if i % 2 else va) for i in range(args.toggles)]
        gpus = [lab.infos[r]["cuda_visible"] for r in range(lab.world_size)] \
            if lab.device_type == "cuda" else []
        n, device = lab.world_size, lab.device_type
        name = lab.infos[0]["device_name"]
    finally:
        lab.close()

    keys = [k for k in warm[0] if k not in ("total", "patch_kb", "compile_s", "events")]
    med = {k: statistics.median(w[k] for w in warm) for k in warm[0]}
    say(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, Python "
        f"{platform.python_version()}; {n} ranks on {device} ({name}); lab started in "
        f"{start_s:.1f} s")
    ev = {k: statistics.median(w["events"] for w in warm[i::2]) for i, k in enumerate("AB")}
    say(f"A: {a.label()} ({ev['A']:.0f} events per run)")
    say(f"B: {b.label()} ({ev['B']:.0f} events per run)")
    say(f"warm: median of {len(warm)} toggles alternating A/B (nothing recompiles: "
        f"max compile_s {max(w['compile_s'] for w in warm):.3f}); cold: the first switch to B")
    say("")
    say(f"{'piece':<28}{'warm (s)':>10}{'cold (s)':>10}")
    for k in keys:
        say(f"{k:<28}{med[k]:>10.4f}{cold[k]:>10.4f}")
    say(f"{'total round trip':<28}{med['total']:>10.4f}{cold['total']:>10.4f}")
    say(f"{'lab adds (total - step)':<28}{med['total'] - med['step']:>10.4f}"
        f"{cold['total'] - cold['step']:>10.4f}")
    say(f"{'PATCH-DOC size (kB)':<28}{med['patch_kb']:>10.1f}{cold['patch_kb']:>10.1f}")
    say("")
    # after the lab's table, so a run cut short by its time budget still has that
    cache = tempfile.mkdtemp(prefix="nbtools-relaunch-cache-")
    relaunch = {}
    for label, cfg in (("A", a), ("B", b)):
        relaunch[label] = ts = [relaunch_s(cfg, n, gpus, cache) for _ in range(args.relaunches)]
        say(f"fresh torchrun job, config {label}: median {statistics.median(ts):.2f} s "
            f"(runs: {', '.join(f'{x:.2f}' for x in ts)})")
    adds = med["total"] - med["step"]
    say(f"goal: the lab adds <= 0.5 s per warm toggle -> {adds:.3f} s: "
        f"{'met' if adds <= 0.5 else 'NOT met'}")

    if args.write:
        argv, shown = sys.argv[1:], []
        for i, x in enumerate(argv):        # the command as run, without --write PATH
            if not (x.startswith("--write") or (i and argv[i - 1] == "--write")):
                shown.append(x)
        cmd = " ".join(["python benchmarks/bench_roundtrip.py"] + shown)
        section = ("## Toggle round trip\n\n`" + cmd + "` (output of one run):\n\n```\n"
                   + "\n".join(lines) + "\n```\n\n" + NOTES)
        path = Path(args.write)
        text = path.read_text() if path.exists() else "# Benchmarks\n"
        head, sep, rest = text.partition("## Toggle round trip")
        if sep:      # replace our own section only; every other section stays
            # stop at the next section or at a "### On <hardware>" record kept by hand
            ends = [i for i in (rest.find("\n## "), rest.find("\n### On ")) if i >= 0]
            nxt = min(ends) if ends else -1
            text = head + section + (rest[nxt + 1:] if nxt >= 0 else "")
        else:
            text = text.rstrip("\n") + "\n\n" + section
        path.write_text(text)
        print(f"wrote the section to {path}")


if __name__ == "__main__":
    main()
