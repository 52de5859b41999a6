"""Engines keep their bytecode in a cache of ours when torch's install has none (some GPU
images: every engine compiled torch's sources again, 6 s of a first run on 1 x H200)."""
import os
import subprocess
import sys

from nbtools.lab import bytecode


def _package(tmp_path, name="nbt_fakepkg"):
    src = tmp_path / "src"
    (src / name).mkdir(parents=True)
    (src / name / "__init__.py").write_text("X = 1\n")
    return src, name


def test_a_package_without_bytecode_gets_the_cache_and_python_writes_it(tmp_path, monkeypatch):
    src, name = _package(tmp_path)
    monkeypatch.syspath_prepend(str(src))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("PYTHONPYCACHEPREFIX", raising=False)
    monkeypatch.delenv("NBTOOLS_PYCACHE", raising=False)
    assert not bytecode.has_bytecode(name)
    env = bytecode.engine_env(name)
    assert env["PYTHONPYCACHEPREFIX"] == str(bytecode.cache_folder())
    # the person's PYTHONDONTWRITEBYTECODE=1 would keep the cache empty: the engines clear it
    run_env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": str(src), **env}
    subprocess.run([sys.executable, "-c", f"import {name}"], env=run_env, check=True)
    written = [p for p in bytecode.cache_folder().rglob("*.pyc") if name in str(p)]
    assert written, "the engine's import wrote no bytecode into the cache"
    assert not (src / name / "__pycache__").exists()     # nothing in the person's tree


def test_nothing_changes_where_the_bytecode_is_there_or_the_person_chose(tmp_path, monkeypatch):
    import compileall
    src, name = _package(tmp_path)
    monkeypatch.syspath_prepend(str(src))
    monkeypatch.delenv("PYTHONPYCACHEPREFIX", raising=False)
    monkeypatch.delenv("NBTOOLS_PYCACHE", raising=False)
    assert bytecode.engine_env(name)
    monkeypatch.setenv("NBTOOLS_PYCACHE", "0")
    assert bytecode.engine_env(name) == {}
    monkeypatch.delenv("NBTOOLS_PYCACHE")
    monkeypatch.setenv("PYTHONPYCACHEPREFIX", str(tmp_path / "theirs"))
    assert bytecode.engine_env(name) == {}
    monkeypatch.delenv("PYTHONPYCACHEPREFIX")
    assert compileall.compile_dir(str(src / name), quiet=1)
    assert bytecode.has_bytecode(name) and bytecode.engine_env(name) == {}
