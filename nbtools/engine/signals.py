"""Engine side: the machine's signals sampled through a run, in a thread beside the step:
on every rank its process's CPU and memory and the host's CPU and load; on a GPU also
NVML's utilisation, SM clock, power, temperature, memory, clock event reasons, PCIe and
NVLink traffic (engine/machine.py reads them). Timestamps are ``time.time_ns()``, the clock
of the steps table and the profiled events, so the client draws each sample under the
kernels it ran beside.

The run starts the sampler first and stops it last (engine/runner.py): compiles, warm-up,
measured and profiled steps are all covered. Every ``PUBLISH_S`` the thread sends the last
``LIVE_S`` seconds (at most 10 points a second) to the client as an ipyparallel data
message (engine/progress.py's channel, key schema/signals.py ``KEY``): the panel's live strip draws them
while the run runs, and a rank whose messages stop is a rank that stalled. What comes back
with the result is compact: the timestamps and one float array per signal.

Cost: a sample is a few reads of /proc and, on a GPU, about eight NVML calls through
ctypes, which drop the GIL while the driver answers; the step's thread waits only for the
Python lines around them. ``quiet.SETTINGS["sample_machine"]`` turns the sampler off
(benchmarks/signals_cost.py measures a lab with and without it in interleaved rounds).
"""
from __future__ import annotations

import math
import threading
import time
from array import array

from nbtools.engine import machine, progress
from nbtools.schema.signals import KEY

INTERVAL_S = {"cuda": 0.02, "cpu": 0.05}     # 50 samples a second on a GPU, 20 on CPU
PUBLISH_S = 0.5          # the latest samples to the client this often
LIVE_S = 3.0             # each message repeats the last 3 s: one lost message loses nothing
LIVE_HZ = 10.0           # points per second in a message (means over the samples between)
MAX_SAMPLES = 1 << 20    # per signal: past it every other sample is dropped (hours of run)
MIN_INTERVAL_S = 0.005   # faster, the thread alone would take a core from the step

_gpu_reader = None       # one per engine: the device's signals are found out once
_current = None


def current():
    """The sampler of the run in progress on this engine, or None."""
    return _current


def begin(device_type: str, rank: int, run_id: str = "", interval_s: float | None = None,
          publish: bool = True):
    """Start sampling for a run where the engine's switch allows it (quiet.SETTINGS
    ``sample_machine``); returns the Sampler or None."""
    global _current
    from nbtools.engine import quiet
    if not quiet.SETTINGS["sample_machine"]:
        _current = None
        return None
    _current = Sampler(device_type, rank, run_id, interval_s, publish).start()
    return _current


def _gpu():
    global _gpu_reader
    if _gpu_reader is None:
        g = machine.gpu()
        try:
            _gpu_reader = machine.GpuReader(g) if g is not None else False
        except Exception as e:   # noqa: BLE001 - the sampler never fails a run
            machine.gave_up(e)
            _gpu_reader = False
    return _gpu_reader or None


class Sampler:
    """``start()`` when a run starts, ``timed_start``/``timed_stop`` around its timed steps
    (the processes on the GPU are listed there, outside the steps), ``finish()`` at its end:
    (the machine's description, the samples' wire form)."""

    def __init__(self, device_type: str, rank: int = 0, run_id: str = "",
                 interval_s: float | None = None, publish: bool = True):
        self.device_type, self.rank, self.run_id = device_type, rank, run_id
        self.interval = _interval(interval_s, device_type)
        self.publish = publish
        self.host = machine.HostReader()
        self.gpu = _gpu() if device_type == "cuda" else None
        if self.gpu is not None:
            self.gpu.errors = {}
        self.names = self.host.names + (self.gpu.names if self.gpu is not None else ())
        self.ts = array("q")
        self.values = [array("d") for _ in self.names]
        self._lock = threading.Lock()      # the publisher reads while the loop appends
        self._stop = threading.Event()
        self._thread = None
        self.procs = []
        self.decimated = 0
        # a full buffer keeps every other sample and from then on stores only every
        # ``stride``-th read: the whole run at one uniform spacing (halving the buffer alone
        # thinned the oldest samples again at every fill, the newest never)
        self.stride, self._reads = 1, 0
        self.cpu_s = float("nan")
        self._t0 = time.monotonic()

    def start(self) -> "Sampler":
        """A first sample now, then one every ``interval`` in a daemon thread."""
        self._sample()
        self._thread = threading.Thread(target=self._loop, name="nbtools-signals", daemon=True)
        self._thread.start()
        return self

    def _loop(self):
        t_next = t_pub = time.monotonic()
        while True:
            # late (the GIL or a core was busy): sample now, the next at least half an
            # interval later, never a burst of catching up
            t_next = max(t_next + self.interval, time.monotonic() + self.interval / 2)
            if self._stop.wait(max(0.0, t_next - time.monotonic())):
                self.cpu_s = time.thread_time()      # this thread's own CPU: what it cost
                return
            self._sample()
            if self.publish and time.monotonic() - t_pub >= PUBLISH_S:
                t_pub = time.monotonic()
                self._publish()

    def _sample(self, last: bool = False):
        self._reads += 1
        if (self._reads - 1) % self.stride and not last:
            return
        row = self.host.read(last)
        if self.gpu is not None:
            row += self.gpu.read()
        ts = time.time_ns()
        with self._lock:
            self.ts.append(ts)
            for buf, v in zip(self.values, row):
                buf.append(v)
            if len(self.ts) >= MAX_SAMPLES and not last:
                self.ts = self.ts[::2]
                self.values = [b[::2] for b in self.values]
                self.decimated += 1
                self.stride *= 2

    def recent(self, seconds: float = LIVE_S, hz: float = LIVE_HZ) -> dict:
        """The last ``seconds`` of samples at most ``hz`` points a second (each point the
        mean of the samples it stands for, stamped with the newest of them): what a live
        message carries."""
        import numpy as np
        with self._lock:
            n = len(self.ts)
            every = self.interval * self.stride
            k = max(1, min(n, int(round(seconds / every)) + 1))
            ts = np.frombuffer(self.ts, np.int64)[n - k:].copy()
            vals = [np.frombuffer(b, np.float64)[n - k:].copy() for b in self.values]
        step = max(1, min(len(ts), int(round(1.0 / (hz * every)))))
        m = (len(ts) // step) * step
        out = {}
        for name, v in zip(self.names, vals):
            g = v[len(v) - m:].reshape(-1, step)
            ok = np.isfinite(g)
            cnt = ok.sum(axis=1)
            tot = np.where(ok, g, 0.0).sum(axis=1)
            # no warnings from this thread: the run records the warnings of its process
            out[name] = np.where(cnt > 0, tot / np.maximum(cnt, 1), np.nan).tolist()
        t = ts[len(ts) - m:].reshape(-1, step)[:, -1].tolist() if m else []
        return dict(rank=self.rank, run_id=self.run_id, ts_ns=t, values=out,
                    sent_ns=time.time_ns(), interval_s=every)

    def _publish(self) -> None:
        try:
            progress.send(KEY, self.recent())
        except Exception:   # noqa: BLE001 - the live strip is a courtesy: never fail a run
            pass

    def timed_start(self) -> None:
        """Before the timed steps: the processes on the GPU now."""
        if self.gpu is not None:
            self.procs += self.gpu.g.processes()

    def timed_stop(self) -> None:
        """After the timed steps: the processes on the GPU again."""
        self.timed_start()

    def stop(self) -> None:
        """Stop the thread and take a last sample."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2.0)
        self._sample(last=True)
        if self.publish:
            self._publish()

    def finish(self) -> tuple:
        """Stop, then (machine, wire): the machine's description (cores, pid, and on a GPU
        its index, clock and power limits, memory, the processes that shared it, the
        signals it did not report and why) and the samples (``ts_ns`` and one array per
        signal, analysis/samples.py's from_wire)."""
        global _current
        self.stop()
        self.host.close()
        if _current is self:
            _current = None
        import numpy as np
        wire = dict(ts_ns=np.frombuffer(self.ts, np.int64).copy(),
                    values={n: np.frombuffer(b, np.float64).copy()
                            for n, b in zip(self.names, self.values)})
        m = dict(cores=self.host.cores, pid=_pid(), interval_s=self.interval * self.stride,
                 samples=len(self.ts), decimated=self.decimated,
                 # the sampling thread's CPU seconds over the seconds it ran
                 sampler_cpu_s=self.cpu_s, sampler_s=time.monotonic() - self._t0,
                 nvml=machine.nvml_error() if self.device_type == "cuda" else "")
        if self.gpu is not None:
            g = self.gpu.g
            procs = dict(self.procs)
            nv = g.nv
            m.update(gpu_index=g.index, sm_max_mhz=g.max_sm, power_limit_w=g.power_limit_w,
                     gpu_mem_total_mb=g.mem_total_mb,
                     # the DRAM's peak bandwidth is 2 x this clock x the bus's bytes
                     mem_max_mhz=g._try(lambda: nv.nvmlDeviceGetMaxClockInfo(
                         g.handle, nv.NVML_CLOCK_MEM)),
                     mem_bus_bits=g._try(lambda: nv.nvmlDeviceGetMemoryBusWidth(g.handle)),
                     gpu_procs=[[pid, mb] for pid, mb in sorted(procs.items())],
                     missing=dict(self.gpu.missing), read_errors=dict(self.gpu.errors))
        return m, wire


def _interval(interval_s, device_type: str) -> float:
    """The sampling interval asked for, checked: inf stopped the thread with a traceback,
    nan or a negative one sampled as fast as it could (~30,000 a second)."""
    if interval_s is None:
        return INTERVAL_S.get(device_type, 0.05)
    if isinstance(interval_s, bool) or not isinstance(interval_s, (int, float)) or \
            not math.isfinite(interval_s) or interval_s < MIN_INTERVAL_S:
        raise ValueError(f"interval_s={interval_s!r}: give the seconds between samples as a "
                         f"finite number >= {MIN_INTERVAL_S} (None: "
                         f"{INTERVAL_S.get(device_type, 0.05)} s on {device_type})")
    return float(interval_s)


def _pid() -> int:
    import os
    return os.getpid()


def sample_cost(device_type: str, n: int = 400) -> dict:
    """What one sample and one live message cost the sampling thread on this engine (the
    median call: a busy host's preemptions are not the cost), and that as a share of one
    core at the sampler's rate (benchmarks/signals_cost.py, benchmarks/gpu/signals.py).
    A run's own figure is its machine report's ``sampler_cpu_s`` over ``sampler_s``."""
    import statistics

    def median_s(fn, k):
        out = []
        for _ in range(k):
            t = time.perf_counter()
            fn()
            out.append(time.perf_counter() - t)
        return statistics.median(out)
    s = Sampler(device_type, publish=False)
    try:
        per, pub = median_s(s._sample, n), median_s(s.recent, 40)
    finally:
        s.host.close()
    hz = 1 / s.interval
    return dict(us_per_sample=per * 1e6, hz=hz, us_per_message=pub * 1e6,
                core_pct=100 * (per * hz + pub / PUBLISH_S), signals=len(s.names))

