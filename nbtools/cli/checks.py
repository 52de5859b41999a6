"""What the command line checks before any work, and the one-line error it stops with."""
from __future__ import annotations


class UserError(Exception):
    """Bad input the user can fix from its one-line message."""


def one_line(e: BaseException) -> str:
    """An error as one line for the terminal: ``file: reason`` for an OSError, else its
    text with whitespace collapsed (its type's name when it has none)."""
    if isinstance(e, OSError) and e.filename is not None and e.strerror:
        return f"{e.filename}: {e.strerror}"
    return " ".join(str(e).split()) or type(e).__name__


def need_rounds(n: int) -> None:
    """`run --rounds N`: a whole number of rounds, at least one (the option's old spelling
    --repeats still works, but the message names the one --help shows)."""
    if n < 1:
        raise UserError(f"--rounds {n}: give a whole number >= 1 (each round runs every "
                        "config twice, A B B A; --rounds 1 runs each config once)")


def need_device(cfgs, engines: str, n) -> None:
    """A config's rules for the ranks' device, before any engine starts wherever the
    device is known up front: local engines run one per visible GPU, else on CPU
    (``cudagraph='manual'`` on CPU ranks was refused only after the lab had started).
    Other launchers' engines say their device when they join; the lab checks there,
    before the first run (Lab.check)."""
    if engines != "local":
        return
    from nbtools.lab.placement import count
    device = "cuda" if count(engines, n)[1] else "cpu"
    for cfg in cfgs:
        cfg.check_device(device)


def need_folder(path, what: str, must_exist: bool) -> None:
    """UserError unless ``path`` can be a folder ``what``: it exists when ``must_exist``, and
    is not a file or a broken link (said as such rather than "no such")."""
    from pathlib import Path
    from nbtools.common.outputs import not_a_file
    p = Path(path).expanduser()
    if must_exist and not p.exists():
        why = not_a_file(p)     # a dangling or looping link is not "no such" folder
        raise UserError(f"{path}: no such {what}" if why == "no such file" else
                        f"{path}: is {why}, not a {what}")
    if p.exists() and not p.is_dir():
        why = not_a_file(p) or "a file"
        raise UserError(f"{path}: is {why}, not a {what}")


def need_writable_parent(path) -> None:
    """Checked before any work: a report path in a missing folder, on a device (/dev/full)
    or without write permission would otherwise fail only after the whole sweep or notebook
    ran."""
    need_outputs([("", path)], force=True)


def need_outputs(outputs, inputs=(), force: bool = False) -> None:
    """Each (flag, path) of ``outputs`` may be written, before any work: never over one of
    ``inputs`` (the traces or notebook being read) or over another output; never over a
    notebook, a saved run's file or a profiler trace without --force."""
    from pathlib import Path
    from nbtools.common.outputs import output_refusal
    seen = {}
    for flag, path in outputs:
        if not path:
            continue
        why = output_refusal(path, "--force", inputs=inputs, force=force)
        if why:
            raise UserError(f"{flag + ': ' if flag else ''}{why}")
        key = Path(path).expanduser().resolve()
        if key in seen:
            raise UserError(f"{flag}: {path} is also {seen[key]}'s file; give each output "
                            "its own name")
        seen[key] = flag


def write_failed(path, e: OSError) -> "UserError":
    """A write that failed after the checks (a disk that filled up): one line, no
    traceback."""
    return UserError(f"{path}: could not be written ({e.strerror or e}); what is there "
                     "may be incomplete: free space, or give another place")
