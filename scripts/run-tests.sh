#!/usr/bin/env bash
# Run the whole test suite with the project's environment. "No tests collected" fails.
# The tests run in parallel (pytest-xdist), one worker per CPU this job may use (its affinity
# and a container's CPU quota; TEST_WORKERS=N to choose, TEST_WORKERS=1 in this process, as
# --pdb and -s need). Each worker, and the commands and data preparations it starts, uses one
# thread or process (tests/conftest.py). Modules whose fixtures train or build something once
# for all their tests stay on one worker (pytest.mark.xdist_group, --dist loadgroup).
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
command -v "$PY" > /dev/null || { echo "run-tests: no Python at $PY (make test sets up .venv first)" >&2; exit 2; }
if [ -n "${TEST_WORKERS:-}" ]; then
    workers=$TEST_WORKERS
    [[ $workers =~ ^[1-9][0-9]*$ ]] || { echo "run-tests: TEST_WORKERS must be a whole number above 0, not '$workers'" >&2; exit 2; }
else
    workers=$(FAIRSEQ_CTX_NO_MODELS=1 "$PY" -c 'from fairseq_ctx.data.streaming import default_workers; print(default_workers())') \
        || { echo "run-tests: $PY could not count the CPUs this job may use (is fairseq_ctx installed in it? make setup)" >&2; exit 2; }
fi
parallel=(-p no:xdist)
if [ "$workers" -gt 1 ]; then
    "$PY" -c 'import xdist' 2> /dev/null \
        || { echo "run-tests: pytest-xdist is not installed in $PY (make setup installs it; or TEST_WORKERS=1)" >&2; exit 2; }
    parallel=(-n "$workers" --dist loadgroup)
fi
"$PY" -m pytest tests -q -p no:cacheprovider --durations=25 "${parallel[@]}" "$@"
rc=$?
if [ "$rc" -eq 5 ]; then
    echo "run-tests: pytest collected no tests: failing" >&2
    exit 1
fi
exit "$rc"
