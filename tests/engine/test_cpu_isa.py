"""Inductor's CPU ISA check runs once per engine against inductor's default cache folder,
not the lab's: the lab's folder stays empty until the model's own kernels land there."""
import os
import subprocess
import sys
import textwrap

import pytest
from support.paths import ROOT

pytestmark = pytest.mark.slow    # imports inductor and loads its probes in a fresh interpreter

_SCRIPT = textwrap.dedent("""
    import os, sys
    lab = sys.argv[1]
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = lab
    from nbtools.engine import cpu_isa
    cpu_isa.check_once()
    cpu_isa.check_once()          # the second call does nothing
    from torch._inductor import cpu_vec_isa
    print(os.environ["TORCHINDUCTOR_CACHE_DIR"] == lab, cpu_vec_isa.pick_vec_isa().bit_width())
    print(sorted(str(p) for p, _, files in os.walk(lab) for f in files))
""")


def test_the_isa_check_builds_its_probes_outside_the_labs_cache(tmp_path):
    lab = tmp_path / "lab"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT)] + sys.path))
    out = subprocess.run([sys.executable, "-c", _SCRIPT, str(lab)], capture_output=True,
                         text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    same, bits = out.stdout.split("\n")[0].split()
    assert same == "True"                 # the lab's folder is set again afterwards
    assert int(bits) > 0 or os.uname().machine not in ("x86_64", "AMD64")
    assert out.stdout.split("\n")[1] == "[]", out.stdout   # nothing was built into it
