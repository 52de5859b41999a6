#!/usr/bin/env bash
# The full suite from a fresh clone of HEAD, as CI runs it (CI=true, .ci/run's pytest -q),
# with each test's wall and CPU recorded (suite_profile.py) and, with --coverage, nbtools'
# line coverage in every process (coverage.toml). docs/benchmarks.md, "The full suite".
#
#   benchmarks/suite/run.sh [--coverage] OUTDIR [pytest args, e.g. -n 2]
#
# OUTDIR gets clone/, pytest.log, time.txt (GNU time -v), profile.jsonl and, with
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
if [ $cov = 1 ]; then
    .venv/bin/python -m pip install -q coverage
    export COVERAGE_FILE="$out/.coverage"
    run=(.venv/bin/python -m coverage run --rcfile=benchmarks/suite/coverage.toml -m pytest -p coverage_grace)
else
    run=(.venv/bin/python -m pytest)
fi
set +e
/usr/bin/time -v -o "$out/time.txt" "${run[@]}" -p suite_profile -q "$@" > "$out/pytest.log" 2>&1
rc=$?
set -e
if [ $cov = 1 ]; then
    .venv/bin/python -m coverage combine -q --rcfile=benchmarks/suite/coverage.toml || true
    .venv/bin/python -m coverage report --rcfile=benchmarks/suite/coverage.toml > "$out/coverage.txt" || true
    .venv/bin/python -m coverage json -q --rcfile=benchmarks/suite/coverage.toml -o "$out/coverage.json" || true
fi
tail -1 "$out/pytest.log"
exit $rc
