"""Suggestion: one thing a run's tables say to try, with the numbers that say it; and
Suggestions, the ranked list lab.advise returns (a list, shown as a table in a notebook,
and saying so when there is nothing to suggest). Pure: no torch, no bokeh."""
from __future__ import annotations

import html
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Suggestion:
    """One thing to try, from one rule, with the run's own numbers as evidence: a hypothesis
    until an A/B (``lab.ab`` or ``lab.explore``) proves it."""
    rule: str
    """Which rule made it (recompile-shapes, module-int-guard, recompile-limit, ...)."""
    title: str
    """What to do, in a line."""
    change: dict
    """StepConfig fields to change (valid for the run's config); {} when the fix is in the
    person's own code (then ``code`` has it)."""
    evidence: str
    """What in this run shows it, with the measured numbers."""
    why: str
    """The mechanism, in one sentence."""
    code: str
    """The lines for a person's own training script."""
    cost: str
    """What trying it costs (an A/B of N runs, a recompile, an edit)."""
    score: float = 0.0
    """The share of the run's time at stake (0..1) as measured where the tables allow it;
    the list is ranked by it. How each rule measures it is in its docstring."""
    rank: int = 0
    """1 for the first of the list (set by advise)."""
    ranks: tuple = field(default=())
    """The ranks whose tables show it."""
    model_patch: dict = field(default_factory=dict)
    """For a fix in the person's code that the lab can still try on their model: attribute
    paths to set on the built model, e.g. ``{"config.use_cache": False}`` (Hugging Face
    models read it in forward). lab.explore runs it as an A/B; {} when it cannot."""
    metric: str = "step_ms"
    """What its A/B is judged on: step_ms, or items_per_s for a change of the work per step
    (a larger batch makes a longer step that may still do more per second)."""
    changes_numbers: bool = False
    """A precision change (autocast, TF32): the step computes other numbers. lab.explore
    keeps it only when check=True's first-step loss (or output) stays within
    NUMERICS_TOLERANCE of the full-fp32 eager one, and reports the difference."""
    about: str = ""
    """What it is about (a compiled frame, a host cause): suggestions about the same thing
    whose fixes overlap are merged into one (advise)."""

    def __str__(self) -> str:
        change = (", ".join(f"{k}={v!r}" for k, v in self.change.items())
                  if self.change else "(in your code)")
        lines = [f"{self.rank}. {self.title}  [{self.rule}; change: {change}; cost: {self.cost}]",
                 f"   evidence: {self.evidence}", f"   why: {self.why}", "   code:"]
        lines += [f"     {c}" for c in self.code.splitlines()]
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        return Suggestions([self])._repr_html_()


NOTHING = ("No suggestion: nothing in this run's tables (why the GPU waits and where the "
           "host's time goes, recompiles and their guards, graph breaks, compile outcome, "
           "exposed communication) shows a known problem.")


def ab_cost(first: str = "") -> str:
    """What trying a change costs, in the words every rule uses: a screen round of A B B A
    (4 runs), then proof rounds of 4 runs each until resolved, equivalent or out of rounds;
    ``first`` what comes before (an edit, a compile)."""
    return ((first + " " if first else "") + "a screen round (4 runs), then rounds of 4 "
            "runs (A B B A) until the verdict is resolved or within the equivalence bound")


class Suggestions(list):
    """lab.advise's answer: Suggestions, best first. Empty says so (the honest no), and so
    does a run that cannot be read (``unreadable``: why). ``not_proposed``: [(move, why)]
    moves the diagnosis rules out for this run; ``skipped``: [(suggestion, why)] moves the lab
    has already seen fail or lose for this workload."""

    def __init__(self, items=(), *, unreadable: str = "", not_proposed=(), skipped=(),
                 note: str = ""):
        super().__init__(items)
        self.unreadable = unreadable
        self.note = note
        self.not_proposed = list(not_proposed)
        self.skipped = list(skipped)

    def _notes(self) -> list:
        out = [f"not proposed: {m}: {why}" for m, why in self.not_proposed]
        out += [f"skipped: {s.title} ({_change(s)}): {why}" for s, why in self.skipped]
        return out + ([f"note: {self.note}"] if self.note else [])

    def __str__(self) -> str:
        if self.unreadable:
            return f"No advice: {self.unreadable}"
        head = "\n".join(str(s) for s in self) if self else NOTHING
        return "\n".join([head, *self._notes()])

    def __repr__(self) -> str:
        return str(self)

    def _repr_html_(self) -> str:
        notes = "".join(f"<p><i>{html.escape(n)}</i></p>" for n in self._notes())
        if self.unreadable:
            return f"<p>{html.escape('No advice: ' + self.unreadable)}</p>"
        if not self:
            return f"<p>{html.escape(NOTHING)}</p>" + notes
        e = html.escape
        rows = "".join(
            f"<tr><td>{s.rank}</td><td><b>{e(s.title)}</b><br><i>{e(s.why)}</i></td>"
            f"<td><code>{e(', '.join(f'{k}={v!r}' for k, v in s.change.items()) or 'in your code')}"
            f"</code></td><td>{e(s.evidence)}</td><td><pre>{e(s.code)}</pre></td>"
            f"<td>{e(s.cost)}</td></tr>" for s in self)
        head = "".join(f"<th>{h}</th>" for h in ("#", "suggestion", "change", "evidence",
                                                   "code", "cost"))
        return f"<table><tr>{head}</tr>{rows}</table>" + notes


def _change(s) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in s.change.items()) or "in your code"
