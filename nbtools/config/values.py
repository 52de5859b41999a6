"""config: one StepConfig field's value checked on its own (type, choices, bounds), with an
error that names the field, what was given and what to give."""
from __future__ import annotations

import operator
import reprlib

from nbtools.config.scenarios import DefaultScenario


class ConfigError(ValueError):
    """A StepConfig that cannot run; the message names the fields and the fix."""


_WHY_BOUND = {
    "steps": " (steps=0 would measure nothing)",
    # scenarios.py seeds step i with seed * 1_000_003 + i, which must stay within the 64 bits
    # torch.manual_seed takes; 2**32 - 1 is also numpy.random.seed's limit.
    "seed": " (each step is seeded with seed * 1_000_003 + step, which torch.manual_seed "
            "must accept)",
    "profiled": " (every profiled step's events travel to the notebook and the timeline; "
                "0 turns the timeline off)",
}


def show_value(value) -> str:
    """A bounded repr for messages: a user may pass a million-element array or an object
    whose repr fails."""
    try:
        return reprlib.repr(value)
    except Exception:   # noqa: BLE001 - a broken __repr__ must not hide the real error
        return f"<{type(value).__name__}>"


def as_str(name: str, value, allowed, optional: bool):
    """Field ``name`` as one of ``allowed`` (None when optional), else a ConfigError naming
    the choices."""
    if value is None and optional:
        return None
    if not isinstance(value, str):
        none = " or None" if optional else ""
        what = "a name (str)" if allowed is None else f"one of {', '.join(map(repr, allowed))}"
        raise ConfigError(f"{name}={show_value(value)} is a {type(value).__name__}; give {what}{none}")
    if allowed is not None and value not in allowed:
        raise ConfigError(f"{name}={value!r} is not one of {', '.join(map(repr, allowed))}")
    if type(value) is DefaultScenario:
        return value    # not chosen: kept so that replace() and pickling still know it
    return str(value)   # numpy.str_ -> str, so the config pickles and compares as plain data


def as_bool(name: str, value) -> bool:
    """Field ``name`` as a real boolean (numpy's included), else a ConfigError."""
    # Only a real boolean: "no", 0/1 or [1] would otherwise count by truthiness ("no" is True).
    if isinstance(value, bool):
        return value
    if getattr(getattr(value, "dtype", None), "kind", None) == "b" \
            and getattr(value, "shape", None) == ():
        return bool(value)   # numpy.bool_ (e.g. read from a DataFrame of a sweep)
    raise ConfigError(f"{name}={show_value(value)} is a {type(value).__name__}; give True or False")


def as_int(name: str, value, low: int, high: int, optional: bool):
    """A whole number in [low, high]. numpy integers (np.int64(8) out of a DataFrame or an
    arange) are what a user means by an int and are accepted as int; floats (8.0), strings
    and booleans are not: the config would silently differ from what was typed."""
    if value is None and optional:
        return None
    dtype = getattr(value, "dtype", None)
    v = None
    if not isinstance(value, bool) and (dtype is None or (
            getattr(dtype, "kind", "") in ("i", "u") and getattr(value, "shape", None) == ())):
        try:
            v = operator.index(value)
        except Exception:  # noqa: BLE001 - a user type's __index__ may raise anything
            pass
    none = " or None" if optional else ""
    if v is None:
        raise ConfigError(f"{name}={show_value(value)} is a {type(value).__name__}; give a whole "
                          f"number from {low} to {high:,}{none}")
    if not low <= v <= high:
        why = _WHY_BOUND.get(name, "")
        raise ConfigError(f"{name}={v} is out of range: give a whole number from {low} to "
                          f"{high:,}{none}{why}")
    return int(v)
