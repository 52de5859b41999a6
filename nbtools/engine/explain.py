"""Compile debugging outside the recorder: torch._dynamo.explain in a separate process, and
a per-rank TORCH_TRACE folder (tlparse input).

explain
-------

explain() calls torch._dynamo.reset() before and after tracing, which would throw away the
engine's compiled callables (and its cudagraph trees) mid-session. So we pickle the
callable and its inputs, run explain in a fresh interpreter, and bring back plain data.
That means it RE-TRACES A COPY: the child unpickles its own copy of the model and inputs,
runs the function once (explain executes it), and none of the child's state comes back.
Tensors on CUDA are unpickled onto the same device index in the child, so they cost that
GPU's memory for the duration; pass CPU copies when that matters.

Callables travel with cloudpickle where it is installed (lambdas, notebook functions);
without it, plain pickle needs them importable (module-level functions, module classes).
"""
from __future__ import annotations

import os
import pickle
import subprocess
import sys
import tempfile

__all__ = ["explain"]

_CHILD = "import sys; from nbtools.engine.explain import _child_main; _child_main(sys.argv[1], sys.argv[2])"


def _pickler():
    try:
        import cloudpickle
        return cloudpickle
    except ImportError:
        return pickle


def explain(model_or_fn, *args, timeout: float = 600, **kwargs) -> dict:
    """Run ``torch._dynamo.explain(model_or_fn)(*args, **kwargs)`` in a new process.

    Returns {"graph_count", "graph_break_count", "op_count", "ops_per_graph",
    "break_reasons": [{"reason", "frame" (file:line), "function"}], "torch"}.
    Raises RuntimeError with the child's traceback if it fails."""
    pk = _pickler()
    try:
        payload = pk.dumps((model_or_fn, args, kwargs))
    except Exception as e:
        hint = "" if pk is not pickle else (
            " (cloudpickle is not installed, so the callable must be importable: a "
            "module-level function or an nn.Module whose class lives in a module)")
        raise TypeError(f"explain: cannot pickle the callable or its inputs: {e}{hint}") from e
    with tempfile.TemporaryDirectory(prefix="nbtools-explain-") as tmp:
        src, dst = os.path.join(tmp, "in.pkl"), os.path.join(tmp, "out.pkl")
        with open(src, "wb") as f:
            f.write(payload)
        env = dict(os.environ)
        # the child must import nbtools and whatever module the callable lives in
        env["PYTHONPATH"] = os.pathsep.join([p for p in sys.path if p] +
                                            [env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        proc = subprocess.run([sys.executable, "-c", _CHILD, src, dst], env=env,
                              capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0 or not os.path.exists(dst):
            raise RuntimeError(f"explain failed in the child process (exit {proc.returncode}):\n"
                               f"{proc.stderr[-4000:]}")
        with open(dst, "rb") as f:
            return pickle.load(f)


def _child_main(src: str, dst: str) -> None:
    import torch
    import torch._dynamo

    with open(src, "rb") as f:
        fn, args, kwargs = pickle.load(f)   # cloudpickle output loads with plain pickle
    out = torch._dynamo.explain(fn)(*args, **kwargs)
    reasons = []
    for br in out.break_reasons:
        stack = list(getattr(br, "user_stack", None) or [])
        top = stack[-1] if stack else None
        reasons.append({"reason": str(br.reason).strip(),
                        "frame": f"{top.filename}:{top.lineno}" if top else "",
                        "function": top.name if top else ""})
    result = {
        "graph_count": int(out.graph_count),
        "graph_break_count": int(out.graph_break_count),
        "op_count": int(out.op_count),
        "ops_per_graph": [[str(op) for op in ops] for ops in (out.ops_per_graph or [])],
        "break_reasons": reasons,
        "torch": str(torch.__version__),
    }
    with open(dst, "wb") as f:
        pickle.dump(result, f)
