#!/usr/bin/env bash
# The full suite from a fresh clone of HEAD, as CI runs it (CI=true, `python3 dev.py test -q`),
# with each test's wall and CPU recorded (suite_profile.py) and, with --coverage, nbtools'
# line coverage in every process (coverage.toml). docs/benchmarks.md, "The full suite".
#
#   benchmarks/suite/run.sh [--coverage] OUTDIR [more arguments for dev.py test]
#
# OUTDIR gets clone/, pytest.log, time.txt (GNU time -v), profile.jsonl, cpu_kinds.json,
# junit.xml, wall.txt (benchmarks/suite/wall.py: seconds per test folder/file) and, with
# --coverage, coverage.txt (the report) and coverage.json (lines per file).
set -euo pipefail
cov=0
if [ "${1:-}" = "--coverage" ]; then cov=1; shift; fi
out=$(realpath -m "$1"); shift
repo=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
mkdir -p "$out"
rm -rf "$out/clone" "$out"/.coverage* "$out/profile.jsonl"
git clone -q "$repo" "$out/clone"
cd "$out/clone"
git log --oneline -1 | tee "$out/commit.txt"
python3 dev.py setup > "$out/setup.log" 2>&1
export CI=true NBPROF_OUT="$out/profile.jsonl" PYTHONPATH="$out/clone/benchmarks/suite"
export PYTEST_ADDOPTS="-p suite_profile --junitxml=$out/junit.xml"
if [ $cov = 1 ]; then
    .venv/bin/python -m pip install -q coverage
    # every python the venv starts (pytest, its workers, engines, kernels) measures itself
    export COVERAGE_PROCESS_START="$out/clone/benchmarks/suite/coverage.toml"
    export COVERAGE_FILE="$out/.coverage" PYTEST_ADDOPTS="$PYTEST_ADDOPTS -p coverage_grace"
fi
set +e
# CPU per kind of process (engines, kernels, browsers, pip...), a floor: cpuwatch.py
python3 benchmarks/suite/cpuwatch.py "$out/cpu_kinds.json" 0.5 &
watch=$!
# the README's test command, as .ci/run calls it
/usr/bin/time -v -o "$out/time.txt" python3 dev.py test -q "$@" > "$out/pytest.log" 2>&1
rc=$?
kill -TERM $watch; wait $watch
set -e
if [ $cov = 1 ]; then
    .venv/bin/python -m coverage combine -q --rcfile=benchmarks/suite/coverage.toml || true
    .venv/bin/python -m coverage report --rcfile=benchmarks/suite/coverage.toml > "$out/coverage.txt" || true
    .venv/bin/python -m coverage json -q --rcfile=benchmarks/suite/coverage.toml -o "$out/coverage.json" || true
fi
# seconds per test folder/file, slowest first (--compare an earlier junit.xml: the change)
python3 benchmarks/suite/wall.py "$out/junit.xml" > "$out/wall.txt" || true
tail -1 "$out/pytest.log"
exit $rc
