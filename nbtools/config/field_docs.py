"""StepConfig's field docs and allowed values, read from config.py itself, so the CLI's
help says what the class says (one source: the docstring under each field, and the values
and bounds ``__post_init__`` checks against)."""
from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import re

from nbtools.config import step_config as config
from nbtools.config.scenarios import SCENARIOS

# Fields whose value None means "the scenario's default"; on the command line that is
# spelled `default` (parallel has a real `none` strategy, so none cannot mean it).
DEFAULT_WORD = "default"
OPTIONAL = tuple(f.name for f in dataclasses.fields(config.StepConfig)
                 if "Optional" in str(f.type))


@functools.lru_cache(maxsize=None)
def _tree() -> ast.Module:
    return ast.parse(inspect.getsource(config))


def _class(tree: ast.Module) -> ast.ClassDef:
    return next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "StepConfig")


@functools.lru_cache(maxsize=None)
def field_docs() -> dict[str, str]:
    """field -> its docstring (whitespace folded), in declaration order."""
    body, out = _class(_tree()).body, {}
    for node, nxt in zip(body, body[1:] + [None]):
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                and isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant)
                and isinstance(nxt.value.value, str)):
            out[node.target.id] = " ".join(nxt.value.value.split()).replace("``", "`")
    return out


def allowed_values() -> dict[str, tuple]:
    """field -> the values it accepts: the tuples __post_init__ checks against."""
    out = {k: tuple(v) for k, v in config.FIELD_CHOICES.items() if v is not None}
    out["scenario"] = tuple(SCENARIOS)   # "custom" needs a step function: notebooks only
    return out


def values_text(name: str) -> str:
    """The values a StepConfig field accepts, in words (choices, true/false, an integer
    range), and what None means where the scenario decides."""
    f = {f.name: f for f in dataclasses.fields(config.StepConfig)}[name]
    kind = str(f.type)
    if name in allowed_values():
        vals = list(map(str, allowed_values()[name]))
    elif "bool" in kind:
        vals = ["true", "false"]
    elif name in config.INT_RANGES:
        low, high = config.INT_RANGES[name]
        vals = [f"an integer {low}..{high}"]
    elif "int" in kind:
        vals = ["an integer"]
    else:
        vals = ["text"]
    if name in OPTIONAL:   # their default is None: the scenario decides
        return f"Values: {', '.join(vals)}, or {DEFAULT_WORD} (the scenario's own; the default)."
    default = str(f.default).lower() if isinstance(f.default, bool) else f.default
    return f"Values: {', '.join(vals)}; default {default}."


def help_text(name: str) -> str:
    """What `--NAME`'s help says: the field's doc, then its values and default. A field whose
    None means the scenario's own value is written `default` on the command line, so its
    doc says `default` there too (`none` stays: parallel's unsharded strategy)."""
    doc = field_docs().get(name, "")
    if name in OPTIONAL:
        doc = re.sub(r"\bNone\b", DEFAULT_WORD, doc)
    return f"{doc} {values_text(name)}".strip()
