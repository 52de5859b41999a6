"""Every flag a run can carry (``run.flags``), in one place: what it says, what it means,
what to do. summary.flags builds the strings from here; docs/flags.md shows each with an
example as printed by a real run. Pure: no torch."""
from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Flag:
    """One kind of flag a run can carry: its ``id``, the ``template`` of its text, what it
    ``means`` and what ``todo`` about it (docs/flags.md lists them all)."""
    id: str
    template: str
    means: str
    todo: str
    older: tuple = ()     # templates this flag was printed with before: saved runs hold them

    def text(self, **fields) -> str:
        """This flag's text with ``fields`` filled into its template."""
        return self.template.format(**fields)

    def matches(self, text: str) -> bool:
        """True when ``text`` is this flag's template filled in: how a saved run's flag is
        recognised again."""
        return any(_pattern(t).fullmatch(text) for t in (self.template, *self.older))


def _pattern(template: str):
    parts = re.split(r"\{[^}]*\}", template)
    return re.compile(".+?".join(re.escape(p) for p in parts), re.S)


REGISTRY = (
    Flag("divergent-ranks", "divergent ranks: {what}",
         "The ranks did not compile the same way (counts or the sequence of compile events "
         "differ): one rank is on another code path, sees other shapes, or recompiled alone. "
         "Collectives inside compiled code then mismatch or wait.",
         "Read compile_events of the ranks named; make the step's inputs and control flow "
         "the same on every rank."),
    Flag("ran-eagerly", "0 graphs compiled: {how} ran eagerly (compile was on, yet no graph "
         "was compiled and no compiled code ran)",
         "The engine saw no graph compiled in this run and no entry into compiled code "
         "holding a graph (not even one compiled by an earlier run). Not raised when the "
         "run reused compiled state: compile_outcome says 'reused' then.",
         "Look for graph breaks in compile_events (every frame broke), a step that never "
         "calls ctx.compile, or torch.compile outside DDP; set fullgraph=True to see the "
         "first break as an error."),
    Flag("ddp-graph-breaks", "torch.compile(DDP(model)): Dynamo graph-breaks inside DDP's "
         "forward ({breaks} breaks); only {graphs} graph(s) came from frames DDP calls, "
         "outside DDPOptimizer's per-bucket split. See compile_events.",
         "Compiling around DDP breaks in DDP's own forward (pytorch #140416); what did "
         "compile is the model's frames, not split at the gradient buckets.",
         "Use ddp_wrap='compile-inside' (DDP(torch.compile(model))), the supported order."),
    Flag("graph-breaks", "graph breaks: this run's compile broke the code {n} time(s), first "
         "at {frame}: {reason}",
         "Dynamo could not trace through something; the code runs as several graphs with "
         "Python in between (fewer fusions, more launches). Counted for the run whose "
         "compile hit them: a later run reusing that compiled state does not repeat it.",
         "Fix or move the line named (print, .item(), data-dependent control flow), or "
         "accept the split; fullgraph=True makes the first break an error."),
    Flag("recompiles", "recompiled {n} time(s) in this run{limit}: {reason}",
         "A guard of compiled code failed (a new shape, dtype, global state such as "
         "autocast) and Dynamo compiled again, inside this run's steps. At the recompile "
         "limit (8 per frame) the frame runs eagerly from then on.",
         "Read the guard failure given; mark dimensions dynamic (dynamic='dynamic' or "
         "'mark'), pad shapes, or keep the flipped setting fixed."),
    Flag("compiled-in-timed", "compiled inside {n} of {m} measured step(s) on rank(s) {ranks} "
         "({detail}): step_ms times {what}",
         "A compile (Dynamo and the backend) ran inside steps the run times, so step_ms, its "
         "percentiles and an A/B of this config include compile time, not only the step's. "
         "Counted from the compile events that fall in the measured steps.",
         "A first compile: raise warmup until the compiles end before the measured steps. A "
         "recompile: the recompiles flag names the guard that failed; mark the dimension "
         "dynamic, pad the inputs, or keep the setting fixed."),
    Flag("unused", "unused: {what}",
         "A setting of the config has no effect on this device (it was accepted, not "
         "applied).",
         "Drop the setting here, or run on the device it is for."),
    Flag("straggler", "straggler: {sentence}",
         "In the captured collectives of two or more profiled steps the others wait for one "
         "rank: weighted by how long, "
         "it causes most of the waiting, either arriving last at least 75 % of the time (a "
         "share luck gives less than 1 % of the time) with another rank waiting at least "
         "20 % of a step, or being the main cause in every profiled step (3 times the "
         "others' worst step) with another rank waiting at least 10 % of a step; and in "
         "most profiled steps it was late by more than sqrt(2) times the steps' own noise "
         "(1.4826 x the median absolute deviation of a rank's step times; the late rank's over every timed "
         "step; sqrt(2): two ranks' arrivals each jitter by it), else no straggler is resolved "
         "(identical runs on busy cores put a different rank last each time). The others "
         "wait in the collective for it, so their step times include its lateness. "
         "host-side: before the collectives it was late to, it computed no longer than "
         "the others, its host launched late (Python, data, launch path, a sleep); slower "
         "compute: its own compute before them took longer.",
         "Look at the named rank, not the waiting one: its CPU lane in the timeline "
         "(host-side), or its kernels before the collective (compute: imbalance, a slower "
         "device, other load on it). summary columns wait_ms and last_pct give each rank."),
    Flag("step-spread", "ranks differ in step time: {lo} .. {hi} ms; {why}",
         "Step times differ by more than 25 % (and 0.5 ms, the slow rank's p10 above the "
         "fast rank's p90) between ranks, and no captured collective "
         "says which rank is late: either none was captured (capture='off' or 'light') or "
         "the ranks ran none (each runs at its own pace).",
         "Run with capture='full' to have the straggler named (when the ranks communicate)."),
    Flag("torch-trace-empty", "torch_trace: rank(s) {ranks} wrote no TORCH_TRACE log "
         "(nothing was compiled in this run: compile is off, or the same config's compiled "
         "state was reused)",
         "torch_trace=True asked for each rank's TORCH_TRACE log, and these ranks wrote "
         "none: torch writes it only while it compiles.",
         "Turn compile on, or change a setting that makes the engine compile again "
         "(cache='fresh' with another config); run.torch_trace lists the logs there are."),
    Flag("clock-low", "rank {rank}: SM clock {mhz} of {max} MHz during steps {steps}: {why}",
         "While the named steps were timed, NVML read this rank's GPU at an SM clock below "
         "90 % of its maximum, for the reasons NVML gave (power cap, thermal slowdown, an "
         "applications-clocks setting, ...). Its step times are then the slower clock's, "
         "and an A/B pair with one side throttled compares the clocks, not the configs.",
         "Read sm_clock_mhz, gpu_power_w and gpu_temp_c in the summary; rerun when the GPU "
         "has cooled or nothing else draws power; compare in interleaved rounds so drift "
         "lands on both sides."),
    Flag("clock-drop", "rank {rank}: SM clock fell {pct} % below its highest while the "
         "measured steps ran (steps {steps}): {why}",
         "Within the measured steps (those step_ms is made of) NVML read this rank's SM clock "
         "at least 5 % below the highest clock it read in them, though never below 90 % of "
         "the maximum (that is clock-low). The steps named ran on the lower clock, so the "
         "run's step times mix two clocks: a drift or a second level in the step times can be "
         "the clock's, not the config's.",
         "Look at the SM clock lane under the timeline (run.plot()) beside the steps; read "
         "gpu_power_w and gpu_temp_c; compare in interleaved rounds (lab.ab) so a clock "
         "that moves lands on both sides."),
    Flag("throttled", "rank {rank}: the GPU reported {why} while the measured steps ran "
         "(steps {steps})",
         "NVML's clock event reasons named a throttle (power cap, thermal or hardware "
         "slowdown, power brake) in a sample taken while the measured steps ran, though the "
         "SM clock stayed within 5 % of its highest and above 90 % of the maximum: the GPU "
         "was at its limit, and a heavier step or a warmer GPU would run slower.",
         "Read gpu_power_w against the power limit and gpu_temp_c; the clock and power lanes "
         "of run.plot() show when; an A/B whose sides both ran at the cap compares fairly, "
         "one where only one side did does not."),
    Flag("gpu-shared", "another process used GPU {gpu}: {n} process(es) besides rank "
         "{rank}'s engine",
         "NVML listed other compute processes on this rank's GPU before or after its timed "
         "steps: they can take SMs, memory bandwidth and memory from the step.",
         "Find them with nvidia-smi and stop them, or give the lab GPUs of its own."),
    Flag("host-busy", "host busy: load {load} per core on {host} while rank(s) {ranks} "
         "timed steps; processes other than the ranks kept {others} of its {cores} cores busy",
         "Over the timed steps the host had more runnable tasks than cores (/proc/loadavg's "
         "runnable tasks at each sample, not uptime's load average) and processes other "
         "than the lab's ranks kept at least half a core busy (the host's busy cores from "
         "/proc/stat less the ranks' own CPU time): a step's threads waited for a core "
         "that something else held, so host-bound steps read slower and noisier than on a "
         "quiet machine. The ranks' own threads are not counted as the load that disturbs "
         "them. Said once per lab (the first run that shows it; host_load and "
         "host_other_cores are in every run's summary), or when the lab starts where its "
         "ranks have more threads than the cores they share.",
         "Rerun on a quieter host, fewer ranks per host, or fewer threads per rank; treat "
         "differences smaller than the steps' spread as noise.",
         older=("host busy: load {load} per core on {host} while rank(s) {ranks} timed steps",)),
    Flag("not-finite", "rank(s) {ranks}: the step returned {value} at its last measured "
         "step (not a finite number)",
         "The loss (or the step's result) became NaN or infinite: the run diverged, so its "
         "times measure a broken computation (NaN kernels can be faster or slower).",
         "Lower the learning rate, check the inputs and the loss; try autocast='off' to see "
         "whether low precision overflowed."),
    Flag("profile-lost", "rank(s) {ranks}: the profiler failed while it stopped ({error}): no "
         "timeline from them; their step times are kept",
         "torch.profiler raised as it stopped and gathered the profiled steps' events (Kineto's "
         "std::bad_alloc, seen once on a CPU rank in CI): those ranks' events, tooltips and "
         "profiler memory are missing; the steps, compile records and signals are whole.",
         "Run again. If it repeats, profile fewer steps (profiled=1), leave stack=False, or "
         "use capture='light' for times only, and check the host's free memory."),
    Flag("check-differs", "rank {rank}: compiled {what} differs from eager by {rel} (max abs "
         "{abs})",
         "check=True ran the first step compiled and eagerly on the same inputs and weights; "
         "the results differ by more than 5 % (or are not finite).",
         "Compare with backend='aot_eager' (then inductor is the cause); look for "
         "randomness, in-place updates or code that behaves differently under compile."),
)
REGISTRY += (
    Flag("odd-value", "odd value: {where} = {value} ({why}): {fate}",
         "A saved run (run.json, summary.parquet) held a value no run writes: text in a "
         "numeric column, NaN or inf, a negative or absurd time or load, a start time no "
         "date can show, a world size no run has. The value was replaced as it loaded "
         "(NaN in the summary, so every verdict leaves it out) and the rest of the run is "
         "shown as saved.",
         "Look at the run's folder: the file was edited, damaged, or written by another "
         "tool. Rerun the config if its numbers matter; the other runs are not affected."),
)
FLAGS = {f.id: f for f in REGISTRY}


def make(flag_id: str, **fields) -> str:
    """The text of flag ``flag_id`` with ``fields`` filled in (KeyError: no such flag)."""
    return FLAGS[flag_id].text(**fields)


def identify(text: str) -> str | None:
    """The id of the flag a printed string is, or None."""
    return next((f.id for f in REGISTRY if f.matches(text)), None)


def markdown_table() -> str:
    """The registry as the table docs/flags.md starts with."""
    rows = ["| id | printed as | what it means | what to do |", "|---|---|---|---|"]
    for f in REGISTRY:
        rows.append(f"| `{f.id}` | `{f.template}` | {f.means} | {f.todo} |")
    return "\n".join(rows)


if __name__ == "__main__":   # regenerates the table in docs/flags.md
    print(markdown_table())
