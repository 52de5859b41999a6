"""python -m nbtools run | demo | view | notebooks | lab | kernel | export
(no Jupyter needed for run, demo, view, notebooks and kernel)."""
from __future__ import annotations

import argparse
import dataclasses
import sys
import time

from nbtools import __version__
from nbtools.config.grid import grid
from nbtools.config.step_config import ConfigError, StepConfig
from nbtools.config.field_docs import DEFAULT_WORD, OPTIONAL, allowed_values, help_text

from nbtools.cli.checks import (UserError, lab_places, need_folder, need_notebook, need_outputs,
                                need_space, one_line, one_line_warnings, say)
from nbtools.cli.checks import need_device, need_rounds
from nbtools.cli.demo import demo_ab, demo_configs, demo_verdict
from nbtools.cli.table import TABLE_LEGEND, format_table  # noqa: F401  (tests and benchmarks read them here)

_FIELDS = {f.name: f for f in dataclasses.fields(StepConfig)}


def _parse_value(name: str, text: str):
    allowed = allowed_values().get(name, ())
    if name in OPTIONAL and text not in allowed and (
            text.lower() in (DEFAULT_WORD, "default-for-scenario")
            or (text.lower() == "none" and "none" not in allowed)):
        return None      # the scenario's default; --parallel none is the `none` strategy
    kind = _FIELDS[name].type
    if "bool" in str(kind):
        if text.lower() in ("1", "true", "yes", "on"):
            return True
        if text.lower() in ("0", "false", "no", "off"):
            return False
        raise ConfigError(f"--{name.replace('_', '-')} {text!r}: expected true/false")
    if "int" in str(kind):
        try:
            return int(text)
        except ValueError:
            raise ConfigError(f"--{name.replace('_', '-')} {text!r}: expected an integer") from None
    return text


def sweep(values: dict) -> list[StepConfig]:
    """Cross product of comma-separated values per field -> validated configs; the first
    combination the config rejects is a ConfigError (a command line sweep runs whole)."""
    parsed = {n: [_parse_value(n, v) for v in text.split(",")] for n, text in values.items()}
    cfgs = [cfg for _, cfg in grid(StepConfig(), parsed)]
    bad = next((c for c in cfgs if isinstance(c, ConfigError)), None)
    if bad is not None:
        raise ConfigError(cli_words(str(bad))) from None
    for c in cfgs:     # the CLI runs scenarios: the default one's rules too, before any engine
        c.check_scenario()
    return cfgs


def cli_words(message: str) -> str:
    """A StepConfig message in the words of the command line: a field whose None means the
    scenario's own value is given as `default` there (`--batch default`), not None."""
    for name in OPTIONAL:
        if f"{name}=" in message:
            message = message.replace(" or None", f" or {DEFAULT_WORD} (the scenario's own)")
    return message


def check_extras(cfgs) -> None:
    """A scenario whose model needs an extra fails here, before the lab starts, naming it."""
    from nbtools.common.extras import require
    if any(c.scenario == "resnet50-ddp" for c in cfgs):
        require("torchvision", why="scenario resnet50-ddp (torchvision's ResNet-50)")


class _Help(argparse.HelpFormatter):
    """Wraps without splitting hyphenated values (tp-mlp-infer, reduce-overhead)."""

    def _split_lines(self, text, width):
        import textwrap
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)


def _add_field_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group(
        "config fields (StepConfig); give several values comma-separated to sweep their "
        "cross product, e.g. --compile off,default")
    for name in _FIELDS:
        g.add_argument(f"--{name.replace('_', '-')}", dest=name, default=None, metavar="V[,V...]",
                       help=help_text(name).replace("%", "%%"))


def _run_all(lab, cfgs):
    """Each config in order, every one checked for the lab's device before the first runs
    (a ConfigError: nothing ran); a failed run is kept and the next one runs."""
    from nbtools.lab.keep_going import run_or_keep
    checked = {cfg: lab.check(cfg) for cfg in cfgs}     # --repeats lists each config again
    runs = []
    for cfg in cfgs:
        t = time.perf_counter()
        say(f"-> {cfg.label()}")
        runs.append(run_or_keep(lab, checked[cfg], lambda e: say(f"   failed: {e}")))
        say(f"   {time.perf_counter() - t:.1f} s")
        table = format_table(runs[-1:]).splitlines()
        # the header, then the rows under the label "->" already printed
        say("\n".join("   " + line for line in table[:2] + table[3:]))
    return runs


def main(argv=None) -> int:
    """The ``nbtools`` / ``python -m nbtools`` command: run, demo, view, notebooks, lab,
    kernel, export (``--help`` lists them). Returns the exit status: 0 ok, 2 a usage or config
    error; a problem the user can fix is one line on stderr, not a traceback."""
    argv = sys.argv[1:] if argv is None else list(argv)
    cmd = f"nbtools {argv[0] if argv else ''}"
    try:
        with one_line_warnings():
            return _main(argv)
    except ConfigError as e:
        say(f"config error: {e}", err=True)
        return 2
    except BrokenPipeError:
        # `nbtools view ... | head`: the reader left. Python's recipe: stdout to devnull,
        # so the interpreter's flush at exit does not raise again
        import os
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except _USER_ERRORS as e:
        # a path, a file or an extra the user can fix: one line, not a traceback
        say(f"{cmd}: {one_line(e)}", err=True)
        return 2
    except OSError as e:
        # a disk that filled up, a folder that went away: the file and why, in one line
        # (nbtools' writes leave what was there before whole: common/atomic.py)
        say(f"{cmd}: {one_line(e)}", err=True)
        return 1
    except KeyboardInterrupt as e:
        # what was kept (Lab.run's message names the run and where it was saved)
        say(f"{cmd}: interrupted (Ctrl-C)" + (f": {one_line(e)}" if str(e) else ""), err=True)
        return 130


def _main(argv) -> int:
    if argv[:1] == ["lab"]:
        # every option after `lab` belongs to jupyter lab (argparse would claim --no-browser)
        from nbtools.cli.tutorials import lab_main
        return lab_main(argv[1:])
    ap = build_parser()
    args, unknown = ap.parse_known_args(argv)
    if unknown:   # the command's own usage, not the top level's (`view --bogus`)
        ap.commands.get(args.cmd, ap).error(f"unrecognized arguments: {' '.join(unknown)}")
    return _dispatch(args)


def build_parser() -> argparse.ArgumentParser:
    """Every subcommand's options (`lab` is a stub: its options go to jupyter lab)."""
    ap = argparse.ArgumentParser(prog="nbtools", description=__doc__)
    ap.add_argument("--version", action="version",
                    version=f"torch-nbtools {__version__} (python {sys.executable})")
    sub = ap.add_subparsers(dest="cmd", required=True)
    ap.commands = sub.choices   # name -> its parser, for its own usage line
    for name in ("run", "demo"):
        p = sub.add_parser(name, formatter_class=_Help,
                           help="sweep configs on a lab" if name == "run" else
                           "the embedded default sweep on whatever hardware is here")
        p.add_argument("--n", type=int, default=None, help="ranks (default: one per GPU, else 2 CPU ranks)")
        p.add_argument("--engines", default="local", metavar="NAME",
                       help="ipyparallel launcher: local, mpi, slurm, ssh, ... (default local)")
        p.add_argument("--history", default="nbtools-runs", metavar="DIR",
                       help="folder the runs are saved to (default ./nbtools-runs, where "
                            "`nbtools view` looks)")
        p.add_argument("--timeout", type=float, default=600.0, metavar="S",
                       help="seconds per run before the lab gives up (default 600)")
        p.add_argument("--html", default=None, metavar="FILE.html",
                       help="write an offline HTML report of the sweep")
        p.add_argument("--quiet", action="store_true",
                       help="the lab prints nothing of its own (engine output, library log "
                            "lines, progress); the runs and the table still print")
        p.add_argument("--force", action="store_true",
                       help="let --html replace a file nbtools did not write (a README, a "
                       "notebook, a saved run's file, a trace: refused otherwise; its own "
                       "reports are replaced without it)")
        p.add_argument("--compile-cache", default=None, metavar="DIR",
                       help="keep the ranks' inductor caches in DIR across labs (default: "
                            "$NBTOOLS_COMPILE_CACHE where set, else a cold cache per lab)")
        p.add_argument("--compile-cache-per", default="host", choices=["host", "rank"],
                       help="host (default): the ranks on a host share one inductor cache, so a "
                            "kernel is built once; rank: each rank its own (cold compiles per rank)")
        if name == "run":
            p.add_argument("--rounds", "--repeats", dest="repeats", type=int, default=1, metavar="N",
                           help="run the sweep in N rounds (default 1), each forward then in "
                                "reverse (A B B A: every config twice a round), and print how far "
                                "identical runs are apart; with two configs (an A/B such as --compile off,default) "
                                "also the verdict: B over A with its 95 %% interval")
            _add_field_args(p)
    v = sub.add_parser("view", help="print the runs saved in a history folder, or the "
                       "profiler traces of your own job (a Kineto .json/.json.gz per rank)",
                       description="FOLDER: a history folder (default nbtools-runs), a "
                       "folder of Kineto traces (one file per rank, as torch.profiler's "
                       "tensorboard_trace_handler or export_chrome_trace write them), or "
                       "one trace file; two traces (A B) are compared: B against A on the "
                       "profiled step and its parts, with a verdict from each side's steps. "
                       "--html writes an offline report: for traces, every rank's timeline "
                       "on one clock.")
    v.add_argument("folder", nargs="*", metavar="FOLDER",
                   help="a history folder (default nbtools-runs), a folder of traces, or one "
                   "trace file; two traces (A, then B: before and after a change) are "
                   "compared")
    v.add_argument("--html", default=None, help="also write the runs (or traces) as one "
                   "offline HTML file")
    v.add_argument("--rank", type=int, default=None, metavar="N",
                   help="one trace file that says no rank (a single process's profile): "
                   "show it as rank N (default 0)")
    v.add_argument("--perfetto", default=None, metavar="FILE.json[.gz]",
                   help="traces only: write every rank into one Chrome-trace file (a process "
                   "per rank, flow arrows between their collectives) for ui.perfetto.dev, "
                   "which opens one file at a time")
    v.add_argument("--force", action="store_true",
                   help="let --html/--perfetto replace a file nbtools did not write that is "
                   "not being read (refused otherwise; its own outputs are replaced "
                   "without it)")
    v.add_argument("--explain", action="store_true",
                   help="print what each column of the table means, under it")
    nb = sub.add_parser("notebooks", help="copy the tutorial notebooks (and the docs they link "
                        "to) into a folder of yours")
    nb.add_argument("folder", nargs="?", default="nbtools-notebooks",
                    help="where to copy them (default ./nbtools-notebooks)")
    nb.add_argument("--force", action="store_true",
                    help="overwrite copies you have edited (kept otherwise)")
    sub.add_parser("lab", add_help=False,
                   help="open JupyterLab on the tutorials (`nbtools lab --help`; other options "
                        "go to jupyter lab)")
    k = sub.add_parser("kernel", help="install the torch-nbtools Jupyter kernel for this interpreter")
    k.add_argument("action", choices=["install"], help="install: write the kernel spec that "
                   "runs this interpreter")
    k.add_argument("--user", action="store_true", help="into the user's Jupyter folder")
    k.add_argument("--sys-prefix", action="store_true", help="into this environment (default)")
    ex = sub.add_parser("export", help="execute a notebook and convert it to offline HTML")
    ex.add_argument("notebook", metavar="NOTEBOOK",
                    help="the .ipynb to run and convert, e.g. notebooks/00-quickstart.ipynb")
    ex.add_argument("--output", "-o", default=None, metavar="FILE.html",
                    help="where to write the HTML (default: the notebook's name with .html, "
                         "beside it)")
    ex.add_argument("--no-execute", action="store_true",
                    help="convert the notebook as saved, outputs included, without running it")
    ex.add_argument("-p", "--param", action="append", default=[], metavar="NAME=VALUE",
                    help="override a name of the notebook's parameters cell (a Python literal: "
                         "-p SMALL=True -p 'BATCHES=[1, 8]')")
    ex.add_argument("--save-ipynb", default=None, metavar="PATH",
                    help="also write the executed notebook (outputs included) here")
    ex.add_argument("--cell-timeout", type=int, default=3600, metavar="S",
                    help="seconds one cell may run (default 3600)")
    ex.add_argument("--force", action="store_true",
                    help="let --output/--save-ipynb replace a file nbtools did not write "
                    "(refused otherwise; never the notebook being exported)")
    ex.add_argument("--deadline", type=float, default=None, metavar="S",
                    help="seconds the whole notebook may run; past it the running cell is "
                         "interrupted and the HTML holds what ran (default: none)")
    return ap


def _dispatch(args) -> int:
    if args.cmd in ("run", "demo"):
        return _cmd_run(args)
    if args.cmd == "view":
        from nbtools.cli.view import view
        return view(args)
    if args.cmd == "notebooks":
        from nbtools.cli.tutorials import copy_tutorials, describe_copy
        need_folder(args.folder, "notebooks folder", must_exist=False)
        say(describe_copy(args.folder, copy_tutorials(args.folder, force=args.force)))
        return 0
    if args.cmd == "kernel":
        from nbtools.cli.kernelspec import install
        say(f"installed kernel spec in {install(user=args.user)} (runs {sys.executable})")
        from nbtools.ui.labext import ensure_installed
        ensure_installed()         # an editable install: the JupyterLab extension too
        return 0
    if args.cmd == "export":
        from nbtools.common.extras import require
        require("nbclient", "nbconvert", "nbformat", why="`nbtools export`")
        from nbtools.report.notebook import NotebookStopped, export_notebook
        nb = need_notebook(args.notebook)
        from pathlib import Path
        html_out = args.output or Path(args.notebook).with_suffix(".html")
        need_outputs([("--output", html_out), ("--save-ipynb", args.save_ipynb)],
                     inputs=[args.notebook], force=args.force)
        params = _parse_params(args.param)
        if params:
            from nbtools.report.notebook import ParametersError, check_parameters
            try:      # checked before a kernel starts
                check_parameters(nb, params)
            except ParametersError as e:
                raise UserError(f"-p: {e}") from None
        if not args.no_execute:
            from nbtools.cli.kernelspec import ensure_kernel
            ensure_kernel(lambda line: say(line, err=True))
        try:
            out = export_notebook(args.notebook, html_out, execute_first=not args.no_execute,
                                  parameters=params,
                                  timeout=args.cell_timeout, deadline_s=args.deadline,
                                  save_ipynb=args.save_ipynb, force=True)  # checked above
        except NotebookStopped as e:
            say(str(e), f"wrote what ran to {e.output}", err=True)
            return 1
        say(f"wrote {out}")
        return 0
    return 0


def _user_errors() -> tuple:
    from nbtools.common.extras import MissingExtra
    return (UserError, FileNotFoundError, NotADirectoryError, IsADirectoryError,
            PermissionError, FileExistsError, MissingExtra)


def _parse_params(items) -> dict:
    import ast
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip().isidentifier():
            raise ConfigError(f"--param {item!r}: write NAME=VALUE, e.g. -p SMALL=True")
        try:
            out[name.strip()] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            raise ConfigError(f"--param {item!r}: {value!r} is not a Python literal; quote "
                              f"strings: -p {name.strip()}='\"{value}\"'") from None
    return out


def _cmd_run(args) -> int:
    from nbtools.results.comparison import Comparison
    from nbtools.lab.lab import Lab
    from nbtools.lab.sweeps import round_order
    need_folder(args.history, "history folder", must_exist=False)
    need_outputs([("--html", args.html)], force=args.force,   # never over a notebook or
                 histories=[args.history])                     # into a saved run
    need_space(lab_places(args))   # a full disk: one line, before engines fail on it
    if args.cmd == "run":
        values = {k: getattr(args, k) for k in _FIELDS if getattr(args, k) is not None}
        cfgs = sweep(values)                       # validate everything before starting engines
        need_rounds(args.repeats)
        # each round forward then back (A B B A): a linear drift lands on every config alike
        if args.repeats > 1:
            cfgs = [c for _ in range(args.repeats) for c in round_order(cfgs)]
        check_extras(cfgs)
        need_device(cfgs, args.engines, args.n)   # the ranks' device, where known before the lab
    t = time.perf_counter()
    try:
        lab = Lab(n=args.n, engines=args.engines, history=args.history, timeout=args.timeout,
                  echo=not args.quiet, compile_cache=args.compile_cache,
                  compile_cache_per=args.compile_cache_per)
    except RuntimeError as e:   # the lab's own sentence (engines that died while starting)
        raise UserError(f"the lab did not start: {one_line(e)}") from None
    with lab:
        say(f"lab: {lab.world_size} ranks on {lab.device_type} "
            f"({lab.infos[0]['device_name']}), up in {time.perf_counter() - t:.1f} s")
        if args.cmd == "demo":
            cfgs = demo_configs(lab.device_type)
        runs = _run_all(lab, cfgs)
        ab = demo_ab(lab) if args.cmd == "demo" else None
    say("")
    if len(runs) > 1:      # one run's table was just printed under it
        say(format_table(runs))
    say(TABLE_LEGEND)
    if getattr(args, "repeats", 1) > 1:
        from nbtools.lab.sweeps import spread
        say("\nstep_ms of the slowest rank over identical runs:")
        say(spread(runs).round(3).to_string(index=False))
        if len({r.config for r in runs}) == 2:   # an A/B: the verdict every surface shows
            say("\nA/B verdict (step_ms, B over A, 95 % interval over rounds): "
                + Comparison.from_runs(runs).verdict.text)
    if args.html:
        from nbtools.cli.view import write_html
        write_html(args.html, runs, comparisons=[ab[0]] if ab else ())
    unsaved = [r.run_id for r in runs if r.folder is None]
    if unsaved:    # said as each happened (the warning names the folder and why)
        say(f"nbtools {args.cmd}: run(s) {', '.join(unsaved)} could not be saved to "
            f"{args.history}: see the warning above", err=True)
    if ab:         # the demo's last lines: its verdict, and why the runs above settle nothing
        say("\n" + demo_verdict(*ab))
    return 0 if all(r.ok for r in runs) and not unsaved else 1


_USER_ERRORS = _user_errors()

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
