"""Runs on a rank (an ipyparallel engine): builds the workload, applies every toggle, runs and profiles the steps."""
