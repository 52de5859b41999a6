"""Inductor's CPU vector-ISA check, once per engine, against a cache that outlives the lab.

Before its first C++ kernel, inductor checks which vector ISAs (AVX2, AVX-512, ...) both the
compiler and the CPU support: it compiles a probe library per candidate ISA into the
inductor cache and loads each in a child process (torch/_inductor/cpu_vec_isa.py,
``VecISA.check_build``, torch 2.13). Into a lab's new, empty cache folder that is a handful
of C++ builds per lab before the model's first kernel: 6 builds, 83 s of a 129 s first
compile of a 4-layer MLP in one process on the shared 2-core box (load about 20). The answer
depends only on the machine, its compiler and torch, so an engine asks once with the cache
pointed at inductor's own default folder (where inductor keeps its precompiled headers too,
whatever TORCHINDUCTOR_CACHE_DIR says): the probes are built there once per machine, the
answer stays in this process (inductor's functools caches), and the lab's folder stays
cold for the model's own kernels, which is what a cold compile measures.
"""
from __future__ import annotations

import os
import threading

_lock = threading.Lock()
_checked = False


def check_once() -> None:
    """Run inductor's ISA check in this process (no-op after the first call)."""
    global _checked
    with _lock:
        if _checked:
            return
        from torch._inductor import cpu_vec_isa
        from torch._inductor.runtime.cache_dir_utils import default_cache_dir
        lab_folder = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = default_cache_dir()
        try:
            cpu_vec_isa.valid_vec_isa_list()   # builds and loads each candidate's probe
            cpu_vec_isa.pick_vec_isa()
        finally:
            if lab_folder is None:
                os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
            else:
                os.environ["TORCHINDUCTOR_CACHE_DIR"] = lab_folder
        _checked = True
