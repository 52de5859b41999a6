"""Bad input to StepConfig (issue 16): any value for any field gives a valid StepConfig of
plain Python values or a ConfigError naming a field, never another exception."""
import json
import pickle

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from nbtools.config import step_config as C
from nbtools.config.step_config import ConfigError, StepConfig
from nbtools.trace.read_json import hashable

# the strategies below list every valid value of every field: their repr is long, not wrong
pytestmark = pytest.mark.filterwarnings("ignore:Generating overly large repr")

FIELDS = C._FIELDS
VALID = {name: list(allowed) for name, allowed in C.FIELD_CHOICES.items() if allowed is not None}
VALID["scenario"] = list(C.SCENARIOS) + ["custom"]
for _name in C._BOOLS:
    VALID[_name] = [True, False]
for _name, (_lo, _hi) in C.INT_RANGES.items():
    VALID[_name] = [_lo, _lo + 1, 8, _hi]
for _name in C._OPTIONAL:
    VALID[_name].append(None)

class _Odd:
    """Looks like a numpy scalar from afar; its __index__ fails."""
    dtype, shape = "int64", ()

    def __repr__(self):
        return "<_Odd>"

    def __index__(self):
        raise ValueError("no index")


class _NoRepr(_Odd):
    """And its repr fails too (kept out of the strategies: hypothesis reprs its examples)."""

    def __repr__(self):
        raise RuntimeError("no repr")


ANY = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=12),
    st.binary(max_size=6), st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    st.sets(st.integers(), max_size=2), st.tuples(st.text(max_size=3)),
    st.integers(-2**70, 2**70).map(lambda i: np.int64(i % 2**63)),
    st.integers(0, 255).map(np.uint8), st.booleans().map(np.bool_), st.floats(width=32).map(np.float32),
    hnp.arrays(hnp.scalar_dtypes(), hnp.array_shapes(min_dims=0, max_dims=2, max_side=3)),
    st.sampled_from([object(), type, Ellipsis, 1j, float("nan"), "DDP", " off", "off\0",
                     _Odd()]),
    st.sampled_from(sorted({repr(v) for vs in VALID.values() for v in vs})),
    st.sampled_from([v for vs in VALID.values() for v in vs]),
)


def _kwargs():
    """Mostly valid values (so cross-field rules are reached), a few from ANY."""
    per_field = {n: st.one_of(st.sampled_from(VALID[n]), ANY) if n in VALID else ANY
                 for n in FIELDS}
    return st.fixed_dictionaries({}, optional=per_field)


def _check_valid(cfg: StepConfig) -> None:
    for name in FIELDS:
        v = getattr(cfg, name)
        # the scenario nobody chose is a str of nbtools' own (it pickles, compares and
        # writes as the plain name)
        assert type(v) in (str, bool, int, type(None)) or (
            name == "scenario" and cfg.scenario_unchosen), (name, v, type(v))
    assert pickle.loads(pickle.dumps(cfg)) == cfg
    hash(cfg)
    try:
        cfg.check_scenario()
    except ConfigError:
        # runs only as a Workload's or a step's config (scenario custom): written out, the
        # name reads as chosen, and its rules refuse it, as they should
        return
    assert StepConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg


def _names_a_field(msg: str) -> bool:
    return any(name in msg for name in FIELDS)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_kwargs())
def test_any_values_give_a_config_or_a_config_error(kw):
    try:
        cfg = StepConfig(**kw)
    except ConfigError as e:
        assert _names_a_field(str(e)), str(e)
    else:
        _check_valid(cfg)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(FIELDS), ANY)
def test_one_bad_field_is_named(name, value):
    """One field changed from the defaults: either accepted (and stored as a plain value)
    or refused with that field's name in the message."""
    try:
        cfg = StepConfig(**{name: value})
    except ConfigError as e:
        assert name in str(e), (name, str(e))
    else:
        _check_valid(cfg)
        assert getattr(cfg, name) == value


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(st.one_of(st.text(max_size=8), st.sampled_from(FIELDS)), ANY, max_size=3))
def test_replace_with_any_names_and_values(changes):
    try:
        cfg = StepConfig().replace(**changes)
    except ConfigError as e:
        assert _names_a_field(str(e)) or "unknown StepConfig field" in str(e), str(e)
    else:
        _check_valid(cfg)


@settings(max_examples=150, deadline=None)
@given(st.one_of(ANY, st.dictionaries(st.one_of(ANY.filter(lambda k: hashable(k)),
                                                st.sampled_from(FIELDS)), ANY, max_size=3)))
def test_from_dict_of_anything(d):
    try:
        cfg = StepConfig.from_dict(d)
    except ConfigError as e:
        assert "from_dict" in str(e) or _names_a_field(str(e)), str(e)
    else:
        _check_valid(cfg)


# The cases the fault-injection pass of issue 16 found, by name.
REFUSED = {
    "fullgraph='no' is not True": (dict(compile="default", fullgraph="no"), "fullgraph='no'"),
    "check='no'": (dict(check="no"), "check='no'"),
    "torch_trace=[1]": (dict(torch_trace=[1]), "torch_trace=[1]"),
    "check=1": (dict(check=1), "check=1"),
    "scenario=[]": (dict(scenario=[]), "scenario=[]"),
    "scenario={}": (dict(scenario={}), "scenario={}"),
    "compile=numpy array": (dict(compile=np.array(["default"])), "compile=array"),
    "batch=numpy array": (dict(batch=np.arange(3)), "batch=array"),
    "batch=8.0": (dict(batch=8.0), "batch=8.0 is a float"),
    "steps='10'": (dict(steps="10"), "steps='10' is a str"),
    "steps=True": (dict(steps=True), "steps=True is a bool"),
    "seed=2**64": (dict(seed=2**64), "seed=18446744073709551616 is out of range"),
    "seed=-1": (dict(seed=-1), "seed=-1 is out of range"),
    "steps=10**9": (dict(steps=10**9), "from 1 to 1,000,000"),
    "warmup=10**6": (dict(warmup=10**6), "from 0 to 100,000"),
    "batch=2**40": (dict(batch=2**40), "from 1 to 1,048,576 or None"),
    "profiled=10**4": (dict(profiled=10**4), "from 0 to 1,000"),
    "seq_len=2**30": (dict(scenario="varlen-train", seq_len=2**30), "seq_len=1073741824"),
    "an object whose repr and __index__ fail": (dict(batch=_NoRepr()), "is a _NoRepr; give a whole number"),
    "a flag that is an object": (dict(check=_NoRepr()), "is a _NoRepr; give True or False"),
}


@pytest.mark.parametrize("name", list(REFUSED))
def test_issue_cases_are_refused_with_the_field_named(name):
    kw, words = REFUSED[name]
    with pytest.raises(ConfigError) as e:
        StepConfig(**kw)
    assert words in str(e.value), str(e.value)


def test_unknown_names_and_junk_dicts():
    with pytest.raises(ConfigError, match=r"StepConfig.replace: unknown StepConfig field\(s\) 'bogus'"):
        StepConfig().replace(bogus=1)
    with pytest.raises(ConfigError, match="did you mean 'steps'"):
        StepConfig(stpes=3)
    with pytest.raises(ConfigError, match="expects a dict .* got a list: \\[1, 2\\]"):
        StepConfig.from_dict([1, 2])
    with pytest.raises(ConfigError, match="got a NoneType"):
        StepConfig.from_dict(None)
    with pytest.raises(ConfigError, match="unknown StepConfig field"):
        StepConfig.from_dict({1: 2})


def test_numpy_scalars_are_taken_as_plain_values():
    """A sweep read from a DataFrame or an np.arange gives numpy scalars: a user means the
    number, so they are accepted and stored as int/bool/str (the config pickles, hashes and
    writes to run.json as plain data)."""
    cfg = StepConfig(scenario=np.str_("ddp-train"), batch=np.int64(8), steps=np.uint16(5),
                     check=np.bool_(True))
    assert (cfg.batch, cfg.steps, cfg.check, cfg.scenario) == (8, 5, True, "ddp-train")
    assert (type(cfg.batch), type(cfg.steps), type(cfg.check), type(cfg.scenario)) == \
        (int, int, bool, str)
    assert cfg == StepConfig(scenario="ddp-train", batch=8, steps=5, check=True)
    assert json.loads(json.dumps(cfg.to_dict()))["batch"] == 8


def test_bounds_are_inclusive():
    cfg = StepConfig(steps=1_000_000, warmup=100_000, profiled=1_000, seed=2**32 - 1,
                     batch=1 << 20)
    assert (cfg.steps, cfg.seed) == (1_000_000, 2**32 - 1)
