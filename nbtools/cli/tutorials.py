"""The tutorials outside the repository: `python -m nbtools notebooks [DIR]` copies them
(with the docs they link to) into a folder of the user's, and `python -m nbtools lab` opens
them in JupyterLab, from a clone or from an installed package."""
from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

from nbtools.common import package_data as pd_
from nbtools.common.extras import MissingExtra, require
from nbtools.cli.kernelspec import ensure_kernel
from nbtools.cli.checks import say
from nbtools.common.atomic import write_file

DEFAULT_DIR = "nbtools-notebooks"
# What we last wrote into a folder (name -> sha256): a file still matching it is ours to
# update; one that differs was edited by the user and is kept unless --force.
MANIFEST = ".nbtools-tutorials.json"


def _shipped() -> dict[str, bytes]:
    """relative path -> bytes, as they should appear in the user's folder. In the package the
    notebooks sit beside docs/, in the repository one level below it, so their `../docs/`
    links become `docs/`."""
    files = {}
    for nb in pd_.notebooks():
        files[nb.name] = nb.read_bytes().replace(b"](../docs/", b"](docs/")
    for doc in pd_.docs():
        files[f"docs/{doc.name}"] = _unshipped_links(doc, doc.read_bytes())
    return files


_LOCAL_LINK = re.compile(rb"\[([^\]\n]+)\]\(((?!https?:|#|mailto:)[^)\s#]+)(#[^)\s]*)?\)")


def _unshipped_links(doc: Path, text: bytes) -> bytes:
    """A link to a file the package does not carry (a benchmark script, a test) becomes its
    text and where the file lives, instead of a link that opens nothing."""
    def sub(m):
        if (doc.parent / m.group(2).decode()).exists():
            return m.group(0)
        return (m.group(1) + b" (`docs/" + m.group(2) +
                b"` in the torch-nbtools repository; not in the installed package)")
    return _LOCAL_LINK.sub(sub, text)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def copy_tutorials(dest, force: bool = False) -> list[tuple[str, str]]:
    """Copy the tutorials into ``dest``. Returns (relative path, what happened) per file:
    copied | updated | unchanged | kept (edited) | overwritten (edited, force)."""
    dest = Path(dest).expanduser()
    if dest.exists() and not dest.is_dir():
        raise NotADirectoryError(f"{dest} is a file, not a folder; give a folder for the notebooks")
    dest.mkdir(parents=True, exist_ok=True)
    man_path = dest / MANIFEST
    try:
        manifest = json.loads(man_path.read_text()) if man_path.exists() else {}
    except ValueError:
        manifest = {}
    done = []
    for rel, data in _shipped().items():
        target = dest / rel
        want = _sha(data)
        if not target.exists():
            action = "copied"
        else:
            have = _sha(target.read_bytes())
            if have == want:
                done.append((rel, "unchanged"))
                manifest[rel] = want
                continue
            if manifest.get(rel) == have:
                action = "updated"          # our earlier copy, untouched since
            elif force:
                action = "overwritten (edited, --force)"
            else:
                done.append((rel, "kept: edited since it was copied (--force overwrites it)"))
                continue
        write_file(target, data, parents=True)   # whole or not at all: a full disk keeps the old
        manifest[rel] = want
        done.append((rel, action))
    write_file(man_path, json.dumps(manifest, indent=1, sort_keys=True))
    return done


def describe_copy(dest, done) -> str:
    """What copying the tutorials did, for the terminal: the folder and counts per action,
    then each notebook that was kept or overwritten."""
    n_nb = sum(1 for rel, _ in done if rel.endswith(".ipynb"))
    counts = {}
    for _, action in done:
        key = action.split(":")[0].split(" (")[0]
        counts[key] = counts.get(key, 0) + 1
    lines = [f"{n_nb} tutorial notebooks in {Path(dest).expanduser().resolve()} ("
             + ", ".join(f"{v} {k}" for k, v in counts.items()) + ")"]
    lines += [f"  {rel}: {action}" for rel, action in done if action.startswith(("kept", "over"))]
    return "\n".join(lines)


LAB_HELP = f"""usage: python -m nbtools lab [--notebooks-dir DIR] [JUPYTER LAB OPTIONS...]

Open JupyterLab on the tutorial notebooks, on the torch-nbtools kernel of this interpreter
({sys.executable}).

From a clone (or an editable install) it serves the repository, so the notebooks' links to
docs/ work. From an installed package it first copies the tutorials into DIR (default
./{DEFAULT_DIR}; copies you edited are kept) and serves that folder.

Every other option goes to `jupyter lab` as written, e.g. --no-browser, --port 8899,
--IdentityProvider.token=... (see `jupyter lab --help`). As root (GPU containers often are) it
passes --allow-root, and says so. {{extra}}"""


def lab_main(argv: list[str]) -> int:
    """``nbtools lab``: copy the tutorials (``--notebooks-dir``) and start JupyterLab on
    them with the torch-nbtools kernel; other arguments go to JupyterLab. Returns the exit
    status; without the ``lab`` extra, MissingExtra with the pip command."""
    if any(a in ("-h", "--help") for a in argv):
        try:     # what it needs, checked as the command itself checks it
            require("jupyterlab", "ipywidgets", "jupyter_bokeh", why="`nbtools lab`")
            extra = "Its [lab] extra (JupyterLab, ipywidgets, jupyter_bokeh) is installed."
        except MissingExtra as e:
            extra = f"Needs the [lab] extra, not all here:\n{e}"
        print(LAB_HELP.format(extra=extra))
        return 0
    try:
        argv, dest = _pop_option(argv, "--notebooks-dir")
    except ValueError as e:
        print(f"nbtools lab: {e}, e.g. --notebooks-dir ~/nbtools-notebooks "
              "(`nbtools lab --help`)", file=sys.stderr)
        return 2
    require("jupyterlab", "ipywidgets", "jupyter_bokeh", why="`nbtools lab`")
    root = pd_.source_checkout()
    first = pd_.notebooks()[0].name          # 00-quickstart: the teaching order's start
    if root is not None:
        first = f"notebooks/{first}"
        say(f"serving the clone at {root}")
    else:
        root = Path(dest or DEFAULT_DIR).expanduser().resolve()
        say(describe_copy(root, copy_tutorials(root)))
    ensure_kernel(say)
    from nbtools.ui.labext import ensure_installed
    ensure_installed()             # `pip install -e .` leaves the JupyterLab extension out
    argv = _root_ok(argv)
    # -m jupyterlab, not the `jupyter` launcher: that one looks for a jupyter-lab script on
    # PATH, which may belong to another environment or be missing
    cmd = [sys.executable, "-m", "jupyterlab", f"--ServerApp.root_dir={root}",
           f"--LabApp.default_url=/lab/tree/{first}", *argv]
    say(f"starting JupyterLab ({sys.executable} -m jupyterlab) on {root}")
    if os.name == "posix":      # become jupyter: Ctrl-C and signals reach it directly
        os.execv(sys.executable, cmd)
    return subprocess.call(cmd)


def _pop_option(argv, name):
    out, value, it = [], None, iter(argv)
    for a in it:
        if a == name:
            value = next(it, None)
            if value is None or value.startswith("-"):
                raise ValueError(f"{name} needs a folder after it")
        elif a.startswith(name + "="):
            value = a.split("=", 1)[1]
            if not value:
                raise ValueError(f"{name} needs a folder after it")
        else:
            out.append(a)
    return out, value


def _root_ok(argv: list[str]) -> list[str]:
    """GPU containers often run as root, where Jupyter refuses to start without
    --allow-root: the person asked for a lab, so pass it, and say so."""
    root = hasattr(os, "geteuid") and os.geteuid() == 0
    if not root or any(a == "--allow-root" or a.startswith(("--allow-root=", "--ServerApp.allow_root"))
                       for a in argv):
        return argv
    print("running as root: passing --allow-root to jupyter lab (it refuses root otherwise)")
    return [*argv, "--allow-root"]
