"""Why compiled DDP runs one all-reduce more per synchronising micro-step (claim 5):
DDP's buckets as rebuilt after the first iteration, eager vs each optimize_ddp mode.

    python benchmarks/ddp_buckets.py            # 2 CPU ranks (gloo); on GPUs one per GPU

Prints rank 0's last report of DDPAccumStep: bucket parameter indices in the order the
gradients reached DDP's reducer (0 = first layer's weight) and the bucket sizes in bytes.
"""
from nbtools import Lab, StepConfig
from nbtools import tutorial as X

base = StepConfig(scenario="custom", parallel="ddp", warmup=1, steps=2, profiled=0)
with Lab(echo=False, history=None) as lab:
    backend = "inductor" if lab.device_type == "cuda" else "aot_eager"
    for cfg in [base] + [base.replace(compile="default", backend=backend, optimize_ddp=m)
                         for m in ("ddp_optimizer", "python_reducer", "off")]:
        run, rep = X.run_reporting(lab, X.DDPAccumStep(micro=2, no_sync=True), cfg)
        last = rep.query("rank == 0").iloc[-1]
        print(f"{cfg.optimize_ddp if cfg.compiled else 'eager':<14}",
              [last["reducer_buckets"], last["reducer_bucket_bytes"]], flush=True)
