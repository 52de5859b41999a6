"""run_or_keep: the one "a run failed: keep it, say it, go on" of the sweeps, the CLI and
the claim studies (each had its own copy; one of them never restarted, the others
restarted engines that the lab's next run heals anyway)."""
import pytest

from nbtools import ConfigError
from nbtools.results.errors import RunFailed, RunTimeout
from nbtools.lab.keep_going import run_or_keep


class _Lab:
    """What run_or_keep uses of a Lab: run (and nothing else: no restart)."""

    def __init__(self, outcome):
        self.outcome, self.sent = outcome, []

    def run(self, checked):
        self.sent.append(checked)
        if isinstance(self.outcome, Exception):
            raise self.outcome
        return self.outcome


def test_a_failed_or_timed_out_run_is_kept_and_said():
    for error in (RunFailed("run x failed: rank 1: boom", "failed run"),
                  RunTimeout("run y: rank(s) [0] did not finish", "stuck run")):
        said = []
        lab = _Lab(error)
        assert run_or_keep(lab, "checked", said.append) == error.run
        assert said == [error] and lab.sent == ["checked"]
    assert run_or_keep(_Lab(RunFailed("quiet", "kept")), "checked") == "kept"


def test_a_good_run_comes_back_and_a_config_error_still_raises():
    assert run_or_keep(_Lab("ok run"), "checked", pytest.fail) == "ok run"
    with pytest.raises(ConfigError):
        run_or_keep(_Lab(ConfigError("nothing ran")), "checked")
