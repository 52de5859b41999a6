"""A failed run's words (results/errors.py, ``Run.first_error``): the root cause first, the
ranks that only stopped because of it after; the same on a run loaded from disk, with no lab."""
from __future__ import annotations

from nbtools import Run
from nbtools.results.errors import PEER_SIGNS


def test_first_error_names_the_rank_that_failed_on_its_own_not_the_peers_it_stopped():
    run = Run(config=None, status="failed",
              errors={0: f"RuntimeError: {PEER_SIGNS[0]}\n  more",
                      1: "ValueError: bad batch shape (4, 3)\nTraceback ...",
                      2: f"DistBackendError: {PEER_SIGNS[1]}"})
    assert run.first_error() == "rank 1: ValueError: bad batch shape (4, 3) (rank(s) [0, 2] stopped with it). "


def test_first_error_of_ranks_that_all_stopped_for_a_peer_names_the_lowest():
    run = Run(config=None, status="failed", errors={3: PEER_SIGNS[2], 1: PEER_SIGNS[3]})
    assert run.first_error().startswith(f"rank 1: {PEER_SIGNS[3]} (rank(s) [3] stopped with it)")


def test_first_error_of_a_run_that_did_not_fail_is_empty(tmp_path):
    run = Run(config=None)
    assert run.first_error() == ""
    failed = Run(config=None, status="failed", errors={0: "OSError: disk full"})
    assert Run.load(failed.save(tmp_path / "r")).first_error() == "rank 0: OSError: disk full. "
