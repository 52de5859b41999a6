"""The tutorial notebooks' client-side helpers: the studies that run each claim's step (its
classes run on the ranks: engine/claim_steps.py), model sweeps, prose and the recorded
profiles. The notebooks reach them through ``nbtools.tutorial``."""
