#!/usr/bin/env bash
# Run the whole test suite with the project's environment. "No tests collected" fails.
# The tests run in parallel (pytest-xdist), one worker per CPU this job may use
# (TEST_WORKERS=N to choose; 1 runs them in this process). Each worker and the commands
# it starts use one thread (tests/conftest.py), so workers never oversubscribe the cores.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
workers=${TEST_WORKERS:-$("$PY" -c 'import os; print(len(os.sched_getaffinity(0)))')}
[[ $workers =~ ^[1-9][0-9]*$ ]] || { echo "run-tests: TEST_WORKERS must be a whole number above 0, not '$workers'" >&2; exit 2; }
parallel=(-n "$workers" --dist worksteal)
[ "$workers" -eq 1 ] && parallel=(-p no:xdist)
"$PY" -m pytest tests -q -p no:cacheprovider --durations=25 "${parallel[@]}" "$@"
rc=$?
if [ "$rc" -eq 5 ]; then
    echo "run-tests: pytest collected no tests: failing" >&2
    exit 1
fi
exit "$rc"
