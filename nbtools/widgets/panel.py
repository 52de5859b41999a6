"""The lab's widgets: controls -> StepConfig -> Lab.run -> the live timeline, history,
A/B comparison and export. The only module that imports ipywidgets.

A run is a blocking call in the kernel: the click handler runs it and returns. Widget
updates made meanwhile (the elapsed-time ticker runs in a thread) still reach the page,
since ipykernel sends iopub messages from any thread while the shell is busy. Compare's
rounds run in a thread instead, so the kernel still takes the Stop click
(panel_compare.py; what that thread writes goes into the panel: thread_output.py).
"""
from __future__ import annotations

import html
from typing import Callable, Optional

from nbtools.common.extras import require

require("ipywidgets", "jupyter_bokeh", why="lab.panel()")   # a script install lacks [lab]
import ipywidgets as W  # noqa: E402
from traitlets import Unicode  # noqa: E402

from nbtools.ui.bokehjs import LiveBokehModel, ensure_loaded
from nbtools.ui.display import document_bundle
from nbtools.ui.saved_picture import PICTURE, Repicture, panel_b64png
from nbtools.ui.preset import not_run_yet, opening_run, preset_config
from nbtools.analysis.metrics import combine
from nbtools.common.units import fmt_number
from nbtools.results.errors import RunFailed
from nbtools.config.step_config import (FIELD_CHOICES, PARALLEL, SEQ_SCHEDULES, ConfigError,
                                        StepConfig)
from nbtools.ui.html import describe_error, flags_html, summary_html
from nbtools.config.scenarios import SCENARIOS
from nbtools.ui.timeline import Timeline
from nbtools.widgets import panel_checks
from nbtools.widgets.panel_advice import Advisor
from nbtools.widgets.panel_compare import Comparer
from nbtools.widgets.panel_export import Exporter
from nbtools.widgets.panel_parts import Ticker, button, control, html_widget
from nbtools.widgets.panel_signals import SignalStrip
from nbtools.widgets.panel_work import Work
from nbtools.widgets.panel_checks import (DEFAULT, NONE_AS, NUMBER_OR_DEFAULT,  # noqa: F401
                                          config_from_values, values_from_config)

# The dropdowns are StepConfig's own choices (one definition); the scenario lists what is
# registered, and an optional field offers the word every default is shown as.
CHOICES = {**{k: v for k, v in FIELD_CHOICES.items() if v is not None},
           "scenario": tuple(SCENARIOS), "parallel": (DEFAULT,) + PARALLEL,
           "seq_schedule": (DEFAULT,) + SEQ_SCHEDULES}
# Every StepConfig field has a control (tests check this), grouped as a user thinks of them.
GROUPS = (
    ("workload", ("scenario", "parallel", "reshard_after_forward", "optimizer_impl", "batch",
                  "seq_len", "seq_schedule", "size", "seed")),
    ("compile", ("compile", "backend", "fullgraph", "dynamic", "cache", "ddp_wrap",
                 "optimize_ddp", "fsdp_compile")),
    ("precision & graphs", ("autocast", "autocast_scope", "matmul_precision",
                            "memory_format", "cudagraph")),
    ("steps & capture", ("warmup", "steps", "profiled", "capture", "check", "torch_trace",
                            "memory", "stack")),
)
RUNNING = "running… (compiling happens in warm-up)"
_ERROR_STYLE = ("border:1px solid #d62728;background:#fdecea;color:#a40000;padding:4px 8px;"
                "margin:4px 0;white-space:pre-wrap;font-family:monospace;font-size:12px")


class _PanelBox(W.VBox):
    """The panel's outer box: each display first loads BokehJS into the page (the timeline's
    view needs it when it is created), without leaving it in the notebook file."""

    _nbtools_picture = Unicode("").tag(sync=True)   # the saved notebook's picture (PICTURE)

    def _repr_mimebundle_(self, **kwargs):
        ensure_loaded()
        for view in (self.panel.timeline_view, self.panel.compare_view):
            if view is not None:
                view.refresh()
        # without a kernel: the last run's timeline and summary as a picture
        return document_bundle(super()._repr_mimebundle_(**kwargs),
                               self.panel.repicture.current(), "panel")


class Panel:
    """Widgets for ``lab``: ``Panel(lab, cfg).widget`` is what a notebook displays.

    ``step_fn``: a user's own step; then every run is ``lab.run(step_fn, cfg)`` (scenario
    fixed to custom). ``export_path`` is the Export button's initial target; ``width`` (px)
    fixes the figures' width, which by default follows the notebook's.
    """

    def __init__(self, lab, cfg: Optional[StepConfig] = None, *,
                 step_fn: Optional[Callable] = None, export_path="nbtools-findings.html",
                 width: Optional[int] = None):
        self.lab, self.step_fn, self.width = lab, step_fn, width
        preset = cfg is not None or step_fn is not None     # else: the newest run, any config
        choices = dict(CHOICES)
        if step_fn is not None:
            choices["scenario"] = ("custom",)
        elif cfg is not None and cfg.scenario == "custom":
            raise ConfigError("scenario='custom' needs your step: Panel(lab, cfg, step_fn=f)")
        cfg = preset_config(cfg, step_fn)
        self._quiet = False        # True while the panel sets controls itself (no auto-run)
        self.work = Work(self)     # what runs now (Run, Compare, Try, Explore): one at a time
        self.shown = None          # the Run in the timeline
        self.controls = {name: control(name, value, choices)
                         for name, value in values_from_config(cfg).items()}
        self.controls["scenario"].disabled = step_fn is not None
        for w in self.controls.values():
            w.observe(self._changed, "value")

        self.run_button = button("Run", self.run, "nbtools-run", button_style="primary",
                                  icon="play")
        self.auto = W.Checkbox(value=False, description="auto re-run on change", indent=False)
        self.status = html_widget("ready", "nbtools-status")
        self.refused = html_widget("", "nbtools-refused-reason")   # why Run is off, in words
        self.signals = SignalStrip()      # each rank's machine signals while a run runs
        self.signals.watch(lab)
        self.error = html_widget("", "nbtools-error")
        self.restart_button = button("Restart engines", self.restart, button_style="warning",
                                      layout=W.Layout(display="none"))
        self.flags = html_widget()
        self.summary = html_widget("<i>no run yet: press Run</i>", "nbtools-summary")
        self.log = W.Output(layout=W.Layout(max_height="240px", overflow="auto"))
        # Built once; each run replaces its sources' data, which the BokehModel sends as
        # a PATCH-DOC (no re-render, zoom and tools stay).
        self.timeline = Timeline(width=width)
        self.timeline_view = LiveBokehModel(self.timeline.layout)
        self.timeline_view.add_class("nbtools-timeline")

        self.history_list = W.Select(options=[], rows=6, description="history",
                                     layout=W.Layout(width="720px"))
        self.history_list.add_class("nbtools-history")
        self.history_list.observe(self._picked, "value")
        self.load_button = button("Load its config", self.load_config, icon="upload")
        # A, B, rounds and the button in one row of a 1280-px notebook, the label whole
        self.compare_a = W.Dropdown(options=[], description="A", layout=W.Layout(width="320px"))
        self.compare_b = W.Dropdown(options=[], description="B", layout=W.Layout(width="320px"))
        self.compare_button = button("Compare A / B", lambda: self.compare(wait=False),
                                      "nbtools-compare",
                                      icon="columns", layout=W.Layout(width="auto", flex="0 0 auto"))
        # 1: the two runs as they are; more: their configs again in ABBA rounds (lab.ab)
        self.compare_rounds = W.BoundedIntText(value=1, min=1, max=50, description="rounds",
                                               layout=W.Layout(width="130px"))
        self.comparison = None     # the last Comparison (its rounds go into the export)
        self.comparer = Comparer(self)
        self.exploration = None    # the last Exploration (its table and code go into the export)
        self.advisor = Advisor(self)     # Suggest / Try / Explore
        self.compare_rounds.add_class("nbtools-rounds")
        self.compare_html = html_widget("", "nbtools-comparison")
        self.compare_box, self.compare_view = W.VBox([]), None
        self.exporter = ex = Exporter(self, export_path)
        self.export_path, self.export_notes, self.export_replace = ex.path, ex.notes, ex.replace
        self.export_button, self.perfetto_button = ex.button, ex.perfetto_button
        self.export_status = ex.status                                  # Export's own line
        self.export_runs, self.mine = panel_checks.export_list(), []   # runs of this panel

        groups = [W.VBox([W.HTML(f"<b>{title}</b>")] + [self.controls[n] for n in names])
                  for title, names in GROUPS]
        log_box = W.Accordion([self.log], titles=("engine output (by rank)",))
        log_box.selected_index = None
        self.widget = _PanelBox([
            W.HBox(groups, layout=W.Layout(flex_flow="row wrap")),
            W.HBox([self.run_button, self.auto, self.status]), self.refused, self.signals.widget,
            W.HBox([self.error, self.restart_button]), self.flags, self.summary,
            self.timeline_view, log_box,
            W.HTML("<b>history</b>"), W.HBox([self.history_list, self.load_button]),
            W.HBox([self.compare_a, self.compare_b, self.compare_rounds, self.compare_button]),
            W.HBox([self.comparer.stop_button, self.comparer.progress]),
            self.comparer.failures, self.compare_html, self.compare_box,
            W.HTML("<b>advice</b>"), self.advisor.box,
            W.HTML("<b>export</b>"), self.export_runs,
            W.HBox([self.export_path, self.export_replace, self.export_button,
                    self.perfetto_button]),
            self.export_status, self.export_notes])
        self.widget.panel = self    # lab.panel() returns the widget; the Panel stays reachable
        # what a saved notebook shows: redrawn after each run the timeline shows, and each
        # comparison or exploration the panel shows below it
        self.repicture = Repicture(self._picture, lambda v: setattr(self.widget, PICTURE, v))
        self.compared = None        # the (A, B) pair the comparison on screen shows
        self.guard = panel_checks.Guard(self, choices, self._refused)
        self._refresh_history()
        first = opening_run(lab.history, cfg, step_fn, preset)
        self.empty = not_run_yet(cfg) if preset else "no run yet: press Run"
        if first is not None:
            self.show(first)
            if preset:
                self.status.value = (f"showing run #{first.run_id}, the newest run of this "
                                     "config in the history")
        else:
            self.summary.value = f"<i>{html.escape(self.empty)}</i>"

    @property
    def _busy(self) -> bool:
        return self.work.what is not None

    def _picture(self) -> str:
        """The panel's picture: the run it shows above its timeline, then the comparison
        and the advice's result it shows (a saved notebook shows them all)."""
        return panel_b64png(self.timeline.layout, self.shown, self.comparer.sections()
                            + self.advisor.sections(), empty=self.empty)

    # -- controls ------------------------------------------------------------------------
    def values(self) -> dict:
        """Every control's value by field name."""
        return {name: w.value for name, w in self.controls.items()}

    def config(self) -> StepConfig:
        """The StepConfig the controls describe now (ConfigError when they cannot run)."""
        return config_from_values(self.values())

    def _refused(self, values: dict) -> str:
        """'' when lab.run would take these values, else its ConfigError's text."""
        try:
            self.lab.check(self.step_fn, config_from_values(values))
        except ConfigError as e:
            return str(e)
        return ""

    def set_config(self, cfg: StepConfig) -> None:
        """Put a config into the controls without triggering an auto re-run."""
        self._quiet = True
        try:
            for name, v in values_from_config(cfg).items():
                if name != "scenario" or self.step_fn is None:
                    self.controls[name].value = v
        finally:
            self._quiet = False

    def _changed(self, change) -> None:
        if self.auto.value and not self._quiet and not self._busy:
            self.run()

    # -- running -------------------------------------------------------------------------
    def run(self):
        """What the Run button does. Returns the Run, or None when nothing (valid) ran;
        every error lands in the error box, and the panel stays usable."""
        if self.work.busy(self.status, "Run"):
            return None
        self._set_error("")
        try:
            cfg = self.config()
        except ConfigError as e:
            self.status.value = "not run: the config is invalid"
            self._set_error(f"<b>ConfigError</b>: {html.escape(str(e))}")
            return None
        self.work.begin("Run")
        # the engine output of this run alone; set, not Output.clear_output(): outside a
        # kernel (a script clicking Run) IPython's clear_output writes "\x1b[2K\r" to stdout
        self.log.outputs = ()
        run, err, said = None, None, None
        try:
            with Ticker(self.status, RUNNING) as tick, self.log:
                shows = self.lab.progress
                self.lab.progress = tick.set_detail     # phases and steps into the status
                # Caught inside: Output's context would swallow an exception in IPython.
                try:
                    run = self.lab.run(self.step_fn, cfg) if self.step_fn else self.lab.run(cfg)
                except Exception as e:  # noqa: BLE001 - every failure is shown in the panel
                    err = e
                finally:
                    self.lab.progress = shows
            if run is not None:
                self.show(run)
                said = f"run #{run.run_id} done in {tick.elapsed:.1f} s"
            else:
                said = ("not run: ConfigError" if isinstance(err, ConfigError)
                        else f"failed after {tick.elapsed:.1f} s")
                self._set_error(describe_error(err))
        finally:
            self.work.end()
            done = run or getattr(err, "run", None)
            if done is not None:
                self.mine.append(done.run_id)
            self.restart_button.layout.display = ("" if self.lab.needs_restart or self.lab.closed
                                                  else "none")
            self._refresh_history(select=run or getattr(err, "run", None))
            # last: a person (or a page test) who reads "done" finds Run enabled again
            if said is not None:
                self.status.value = said
        return run

    def restart(self) -> None:
        """Restart the lab's engines from the panel, saying how long it took or why it failed."""
        self.status.value = "<b>⏳ restarting engines…</b>"
        try:
            self.lab.restart()
        except Exception as e:  # noqa: BLE001
            self._set_error(f"restart failed: {type(e).__name__}: {html.escape(str(e))}")
            return
        self.restart_button.layout.display = "none"
        self._set_error("")
        self.status.value = f"engines restarted in {self.lab.startup_s:.1f} s"

    def show(self, run) -> None:
        """Put ``run`` into the timeline (data replaced in place), summary and flags."""
        self.timeline.update(run)
        # a wide table scrolls inside the panel rather than being cut at its edge, and the
        # header wraps at the panel's width: width 0 keeps the table's width out of the
        # widget's flex sizing (it grew to the table, 1879 px in a 1226-px cell, and the
        # header was cut at "...parameters on thi"), min-width 100 % fills the panel
        self.summary.value = (f"<div style='overflow-x:auto;width:0;min-width:100%'>"
                              f"{summary_html(run)}</div>")
        self.flags.value = flags_html(run.flags)
        self.shown = run
        self.repicture.poke()

    def _set_error(self, text: str) -> None:
        self.error.value = f"<div style='{_ERROR_STYLE}'>{text}</div>" if text else ""

    # -- history, comparison, export -------------------------------------------------------
    def _refresh_history(self, select=None) -> None:
        runs = list(self.lab.history)
        opts = [(f"{i}: {r.label}" + (f" · {fmt_number(combine(r.summary, 'step_ms'))} ms"
                                      if "step_ms" in r.summary else ""), r.run_id)
                for i, r in enumerate(runs)]
        ok = [r.run_id for r in runs if r.ok]
        self._quiet = True          # re-listing must not re-display or re-run anything
        try:
            a, b, picked = self.compare_a.value, self.compare_b.value, self.history_list.value
            self.history_list.options = opts     # (resets the selection: restored below)
            self.compare_a.options, self.compare_b.options = opts, opts
            panel_checks.refresh_export_list(self, opts)
            picked = select.run_id if select is not None else picked
            self.history_list.value = picked if picked in {v for _, v in opts} else None
            if select is not None and select.ok and len(ok) >= 2:
                a, b = ok[-2], ok[-1]    # the newest run against the one before it
            ids = {v for _, v in opts}
            self.compare_a.value = a if a in ids else (ok[-2] if len(ok) >= 2 else None)
            self.compare_b.value = b if b in ids else (ok[-1] if ok else None)
        finally:
            self._quiet = False
        self.guard._pair_moved()      # where the re-listing moved A or B for good

    def _picked(self, change) -> None:
        """Picking a run in the history shows it in the timeline."""
        if self._quiet or self._busy or change["new"] is None:
            return
        run = self.lab.history[change["new"]]
        if run.ok:
            self.show(run)
            self.status.value = f"showing run #{run.run_id} from the history"
        else:
            self._set_error(describe_error(RunFailed(f"run {run.run_id} failed", run)))

    def load_config(self) -> None:
        """Put the picked history run's config back into the controls."""
        rid = self.history_list.value
        run = self.lab.history[rid] if rid else None
        if run is not None and run.config is not None:
            self.set_config(run.config)

    def compare(self, wait: bool = True):
        """Compare the runs picked as A and B: verdict, table, category deltas, aligned
        timelines; with rounds > 1 their configs again in rounds (panel_compare). Returns
        the Comparison (None when it failed: the reason is in the panel); the button
        (``wait=False``) runs the rounds in the background and returns at once."""
        return self.comparer.compare(wait)

    def export(self):
        """export_html of the runs picked in the export list (plus the current A/B pair,
        when both are among them) to the path given (panel_export)."""
        return self.exporter.export()

    def save_perfetto(self):
        """The run in the timeline as one Chrome-trace JSON beside the export path
        (panel_export)."""
        return self.exporter.save_perfetto()
