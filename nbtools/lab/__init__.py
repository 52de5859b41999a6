"""Runs in the notebook (the client): Lab drives the engines, sweeps, progress while waiting."""
