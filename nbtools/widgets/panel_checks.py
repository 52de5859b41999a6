"""Widgets room: the panel's controls before anything runs. One word for every default
(``default``, as on the command line) and the values <-> StepConfig mapping. Every choice the lab would refuse
with the other controls as they are is marked (a ✗ before it in its dropdown, the reasons
on hover) and Run is disabled with the reason on hover, from the same checks lab.run makes
(StepConfig's rules, the device's, the Workload's or step's); a comparison is cleared when
its A/B selectors move away from the pair it shows; Export writes the runs picked in a list
(by default the ones this panel ran, else the newest) while its status counts the seconds."""
from __future__ import annotations

import html
from typing import Callable

import ipywidgets as W

from nbtools.config.field_docs import DEFAULT_WORD
from nbtools.config.step_config import ConfigError, StepConfig

DEFAULT = DEFAULT_WORD       # widget value standing for None (the scenario decides): the CLI's word
# Fields whose None (the scenario's default) a widget shows as this value.
NONE_AS = {"parallel": DEFAULT, "seq_schedule": DEFAULT, "batch": DEFAULT, "seq_len": DEFAULT}
NUMBER_OR_DEFAULT = ("batch", "seq_len")

MARK = "✗ "
RUN_TIP = "run this config on every rank"


# -- widget values <-> StepConfig (pure: no widgets involved) ------------------------------
def config_from_values(values: dict) -> StepConfig:
    """Widget values (``values_from_config``'s form) -> a validated StepConfig.
    Raises ConfigError for a combination that cannot run."""
    return StepConfig.from_dict({k: None if k in NONE_AS and v in (NONE_AS[k], None, "") else
                                 _whole(k, v) if k in NUMBER_OR_DEFAULT else v
                                 for k, v in values.items()})


def _whole(name: str, v):
    try:
        return int(str(v).strip())
    except ValueError:
        raise ConfigError(f"{name}={v!r}: give a whole number, or {DEFAULT!r} for the "
                          "scenario's own") from None


def values_from_config(cfg: StepConfig) -> dict:
    """StepConfig -> one value per control (None becomes DEFAULT; numbers are text)."""
    return {k: NONE_AS[k] if v is None and k in NONE_AS else
            str(v) if k in NUMBER_OR_DEFAULT else v for k, v in cfg.to_dict().items()}


def refusals(values: dict, check: Callable[[dict], str], choices: dict) -> dict:
    """field -> {value: reason} for every dropdown choice and the other side of every
    checkbox that ``check`` (values -> '' or the ConfigError's text) refuses, the other
    controls kept as they are."""
    out: dict = {}
    for name, options in choices.items():
        for option in options:
            if option != values.get(name):
                reason = check(dict(values, **{name: option}))
                if reason:
                    out.setdefault(name, {})[option] = reason
    for name, v in values.items():
        if isinstance(v, bool):
            reason = check(dict(values, **{name: not v}))
            if reason:
                out.setdefault(name, {})[not v] = reason
    return out


class Guard:
    """Keeps the marks and the Run button in step with the controls (on every change)."""

    def __init__(self, panel, choices: dict, check: Callable[[dict], str]):
        self.panel, self.check = panel, check
        self.choices = {k: tuple(v) for k, v in choices.items()}
        self.refused: dict = {}
        self.reason = ""          # why the config in the controls would be refused ('' if not)
        self._updating = False
        for w in panel.controls.values():
            w.observe(self.update, "value")
        for w in (panel.compare_a, panel.compare_b):
            w.observe(self._pair_moved, "value")
        self.update()

    def update(self, change=None) -> None:
        """Mark the choices that cannot run with the other values as they are, and say why."""
        if self._updating:
            return
        self._updating = True
        quiet, self.panel._quiet = self.panel._quiet, True   # relabelling is not a change
        try:
            values = self.panel.values()
            self.refused = refusals(values, self.check, self.choices)
            for name, w in self.panel.controls.items():
                mine = self.refused.get(name, {})
                if not hasattr(w, "description_allow_html"):
                    continue
                if name in self.choices and not w.disabled:
                    opts = tuple((MARK + str(o) if o in mine else str(o), o)
                                 for o in self.choices[name])
                    if tuple(w.options) != opts:
                        v = w.value
                        w.options = opts          # (selects the first option: put v back)
                        w.value = v
                tip = ("the lab would refuse:\n" + "\n".join(
                    f"{o}: {r}" for o, r in mine.items())) if mine else None
                w.tooltip = tip
                if isinstance(w, W.Checkbox):
                    # a checkbox's hover text is its description as written (ipywidgets 8):
                    # plain words only; the reason its other side is refused goes there
                    w.description_allow_html = False
                    w.description = name
                    w.tooltip = None
                    continue
                # a described dropdown's hover is its name's: the reasons go there
                w.description_allow_html = True
                w.description = (f"<span title='{html.escape(tip, quote=True)}' style='"
                                 f"border-bottom:1px dotted #888;cursor:help'>{name}</span>"
                                 if tip else name)
            self.reason = self.check(values)
            self.panel.run_button.disabled = bool(self.reason) or self.panel._busy
            self.panel.run_button.tooltip = (f"the lab would refuse this config: {self.reason}"
                                             if self.reason else RUN_TIP)
            self.panel.refused.value = refused_line(self.reason, {
                n: r for n, r in self.refused.items()
                if isinstance(self.panel.controls.get(n), W.Checkbox)})
            if self.reason:
                self.panel.run_button.add_class("nbtools-refused")
            else:
                self.panel.run_button.remove_class("nbtools-refused")
        finally:
            self.panel._quiet = quiet
            self._updating = False

    # -- the comparison shown belongs to the pair it was made for --------------------------
    def _pair_moved(self, change=None) -> None:
        """A person moved A or B away from the compared pair. The panel's own re-listing
        (options replaced, values put back) moves them for a moment: it is quiet then,
        and checks the pair once it is done (``change`` None)."""
        p = self.panel
        if change is not None and p._quiet:
            return
        if getattr(p, "compared", None) not in (None, (p.compare_a.value, p.compare_b.value)):
            p.comparer.clear()      # its verdict no longer describes the pair on screen
            p.compare_html.value = ("<i>A or B changed: press Compare A / B to compare "
                                    "them</i>")


def refused_line(reason: str, boxes: dict) -> str:
    """What shows under Run: why the lab would refuse the config in the controls (Run is
    off then), and what switching a checkbox would be refused for (a checkbox has no hover
    that could say it). Wrapped, never cut."""
    out = []
    if reason:
        out.append(f"<div style='color:#a40000'>✗ Run is off: {html.escape(reason)}</div>")
    for name, refused in boxes.items():
        for value, why in refused.items():
            if why == reason:          # refused whatever the box says: said once above
                continue
            out.append(f"<div style='color:#666'>{html.escape(name)}={value} would be "
                       f"refused: {html.escape(why)}</div>")
    return ("<div style='white-space:normal;overflow-wrap:anywhere;max-width:1180px;"
            "line-height:1.5'>"
            + "".join(out) + "</div>") if out else ""


def export_list() -> W.SelectMultiple:
    """The list of runs an export holds (several can be chosen)."""
    w = W.SelectMultiple(options=[], rows=5, description="runs",
                         layout=W.Layout(width="720px"))
    w.add_class("nbtools-export-runs")
    w.tooltip = "the runs the report holds (shift/ctrl-click for several)"
    return w


def refresh_export_list(panel, opts: list) -> None:
    """The history's runs as options, picked: the runs this panel ran (the history may hold
    other notebooks' runs too; none yet: the newest run), until the person picks others:
    then those (still there)."""
    w = panel.export_runs
    ids = {v for _, v in opts}
    default = tuple(r for r in panel.mine if r in ids) or tuple(v for _, v in opts[-1:])
    chosen = tuple(r for r in w.value if r in ids)
    keep = set(w.value) != set(getattr(panel, "_export_default", ()))
    w.options = opts
    w.value = chosen if keep and chosen else default
    panel._export_default = tuple(w.value) if not (keep and chosen) else ()
