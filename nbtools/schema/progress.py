"""Where a run is, as an engine tells its client (engine/progress.py publishes it, the lab's
and the panel's progress views read it): the data message's key, the phases in the order a
run goes through them, and the step loop's phase names as a person reads them."""
from __future__ import annotations

KEY = "nbtools_progress"
# In the order a run goes through them; "warm-up/compile" is where torch.compile compiles.
PHASES = ("start", "warm-up/compile", "measured", "profiled", "parse", "done")
# capture.run_steps' phase names -> what a person reads
STEP_PHASE = {"warmup": "warm-up/compile", "measured": "measured", "profiled": "profiled"}
