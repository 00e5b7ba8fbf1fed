#!/usr/bin/env bash
# Run the whole test suite with the project's environment. "No tests collected" fails.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
"$PY" -m pytest tests -q -p no:cacheprovider --durations=25 "$@"
rc=$?
if [ "$rc" -eq 5 ]; then
    echo "run-tests: pytest collected no tests: failing" >&2
    exit 1
fi
exit "$rc"
