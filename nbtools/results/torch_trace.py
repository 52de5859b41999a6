"""TORCH_TRACE for a run (``StepConfig.torch_trace=True``): each rank writes PyTorch's
structured compile log while the run executes, the logs travel back with the rank's result
(ranks may sit on other hosts), and the client keeps them in the run's own history folder:

    RUN/torch_trace/rank0/dedicated_log_torch_trace_rank_0_*.log
    RUN/torch_trace/tlparse/index.html      tlparse's report over all ranks (the [trace] extra)

Client side: ``save``, ``logs``, ``report`` (the engine side is nbtools/engine/torch_trace.py).
"""
from __future__ import annotations

import html
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from nbtools.analysis.flags import make
from nbtools.common.extras import install_command, require

FOLDER = "torch_trace"
REPORT = "tlparse"


def missing_logs_flags(ok_reports: dict, got: dict) -> list[str]:
    """torch_trace=True but a rank wrote nothing: it compiled nothing in this run (its
    compiled state was reused from the previous run, or compile is off)."""
    quiet = sorted(r for r in ok_reports if not got.get(r))
    if not quiet:
        return []
    return [make("torch-trace-empty", ranks=quiet)]


def save(run, folder) -> list[str]:
    """Write the logs a run brought back into folder/torch_trace/rankN/, then tlparse's
    report when tlparse is installed; returns the flags that adds. Called by Run.save into
    the folder it renames into place: the run keeps its logs (and gets the flags) only once
    that folder is committed (``committed``), so a failed save loses nothing."""
    pending = getattr(run, "torch_trace_logs", None) or {}
    root = Path(folder) / FOLDER
    old = getattr(run, "folder", None)
    if not pending:
        # saved before (a temporary folder, another history): the logs move with the run
        if old is not None and (Path(old) / FOLDER).is_dir() and not root.exists() \
                and Path(old).resolve() != Path(folder).resolve():
            shutil.copytree(Path(old) / FOLDER, root)
        return []
    for rank, files in sorted(pending.items()):
        d = root / f"rank{rank}"
        d.mkdir(parents=True, exist_ok=True)
        for name, data in files.items():
            (d / Path(name).name).write_bytes(data)
    if shutil.which("tlparse") or _tlparse_next_to_python():
        try:
            build_report(root)
        except RuntimeError as e:
            return [f"torch_trace: tlparse could not read the logs ({e})"]
    return []


def committed(run, flags: list[str]) -> None:
    """The folder ``save`` wrote is the run's now: its logs live on disk, not in memory."""
    run.torch_trace_logs = {}
    run.flags.extend(f for f in flags if f not in run.flags)


def logs(run) -> list[Path]:
    """The run's TORCH_TRACE log files, rank by rank. A run kept only in memory (a lab
    without a history folder) writes them to a temporary folder first."""
    if getattr(run, "torch_trace_logs", None) and getattr(run, "folder", None) is None:
        folder = Path(tempfile.mkdtemp(prefix=f"nbtools-run-{run.run_id}-"))
        flags = save(run, folder)
        run.folder = folder
        committed(run, flags)
    folder = getattr(run, "folder", None)
    if folder is None:
        return []
    return sorted((Path(folder) / FOLDER).glob("rank*/*.log"),
                  key=lambda p: (int(p.parent.name[4:]), p.name))


def report_index(run) -> Path | None:
    """tlparse's index.html for the run, when it was made."""
    folder = getattr(run, "folder", None)
    p = Path(folder) / FOLDER / REPORT / "index.html" if folder is not None else None
    return p if p is not None and p.exists() else None


def _tlparse_next_to_python() -> str | None:
    import sys
    p = Path(sys.executable).parent / "tlparse"
    return str(p) if p.exists() else None


def build_report(root) -> Path:
    """tlparse over every rank's log (its multi-rank report) into root/tlparse/."""
    exe = shutil.which("tlparse") or _tlparse_next_to_python()
    if exe is None:
        require("tlparse", why="tlparse's report of TORCH_TRACE logs")
    root = Path(root)
    # tlparse's multi-rank mode reads one folder holding every rank's log (rank_N in names)
    with tempfile.TemporaryDirectory(prefix="nbtools-tlparse-") as tmp:
        for p in root.glob("rank*/*.log"):
            shutil.copy(p, tmp)
        out = root / REPORT
        r = subprocess.run([exe, tmp, "--all-ranks-html", "-o", str(out), "--overwrite",
                            "--no-browser"], capture_output=True, text=True, timeout=600)
    if r.returncode != 0 or not (out / "index.html").exists():
        raise RuntimeError(f"tlparse exit {r.returncode}: {(r.stderr or r.stdout).strip()[-300:]}")
    return out / "index.html"


def link_html(run, base=None, jupyter: bool = False) -> str:
    """One line for the report and the panel: a link to tlparse's report, or where the logs
    are when there is none. ``base``: the folder the link is read from (relative href);
    ``jupyter``: the page is served by the Jupyter server that started this kernel."""
    files = logs(run)
    if not files:
        return ""
    index = report_index(run)
    ranks = len({p.parent for p in files})
    if index is None:
        where = html.escape(str(files[0].parent.parent))
        return (f"<p class='torch-trace'>TORCH_TRACE: {len(files)} log(s) from {ranks} rank(s) in "
                f"<code>{where}</code>; {html.escape(install_command('trace'))} for tlparse's report</p>")
    href = (served_href(index) if jupyter else None) or _href(index, base)
    return (f"<p class='torch-trace'>TORCH_TRACE: <a href='{html.escape(href)}' target='_blank' "
            f"title='{html.escape(str(index))}'>tlparse report</a> ({len(files)} log(s) from "
            f"{ranks} rank(s))</p>")


def served_href(path, server_pid: int | None = None) -> str | None:
    """The URL path under which the Jupyter server that started this kernel (its parent
    process) serves ``path`` (/files/...), or None when it does not. A widget's HTML is not
    rewritten by JupyterLab, so a relative link there would resolve against /lab/tree/."""
    try:
        from jupyter_server.serverapp import list_running_servers
    except ImportError:
        return None
    pid = os.getppid() if server_pid is None else server_pid
    p = Path(path).resolve()
    for info in list_running_servers():
        root = info.get("root_dir") or info.get("notebook_dir")
        if info.get("pid") != pid or not root:
            continue
        try:
            rel = p.relative_to(Path(root).resolve())
        except ValueError:
            return None
        from urllib.parse import quote
        return f"{info.get('base_url', '/')}files/{quote(rel.as_posix())}"
    return None


def _href(path: Path, base) -> str:
    if base is not None:
        try:
            return os.path.relpath(path.resolve(), Path(base).resolve())
        except ValueError:      # another drive (Windows)
            pass
    return path.resolve().as_uri()
