#!/usr/bin/env bash
# Create (or refresh) the project's virtual environment and install everything:
# torch (never pulled implicitly), fairseq-fixed built against it, the NMT tools,
# and this package in editable mode.
#
# Environment knobs:
#   VENV=.venv                 where the environment lives
#   PYTHON=python3             interpreter used to create it
#   CONSTRAINTS=requirements/constraints-cpu.txt
#                              pins exported as PIP_CONSTRAINT (reaches build envs too)
#   TORCH_SPEC="torch==2.13.0" what to install for torch. For a CUDA build use e.g.
#                              TORCH_SPEC="torch==2.5.1" TORCH_INDEX_URL=<your CUDA index>
#                              CONSTRAINTS=requirements/constraints-gpu.txt
#   TORCH_INDEX_URL=           extra index for torch only (CUDA wheels)
#   WHEELHOUSE=                a directory of wheels/sdists: install offline from it only
#                              (build it with `make wheelhouse` on a connected machine)
#   SKIP_TORCH=1               keep the torch already present in the venv (e.g. created
#                              with --system-site-packages on a cluster image)
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${VENV:-.venv}
PYTHON=${PYTHON:-python3}
CONSTRAINTS=${CONSTRAINTS:-requirements/constraints-cpu.txt}
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}
STAMP="$VENV/.fairseq-ctx-installed"

want_hash=$(cat "$CONSTRAINTS" requirements/tools.txt setup.py scripts/setup-env.sh | sha256sum | cut -c1-16)
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want_hash" ]; then
    exit 0
fi

start=$(date +%s)
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip)
export PIP_CONSTRAINT="$PWD/$CONSTRAINTS"
export PIP_DISABLE_PIP_VERSION_CHECK=1
offline=()
if [ -n "${WHEELHOUSE:-}" ]; then
    [ -d "$WHEELHOUSE" ] || { echo "setup-env: WHEELHOUSE=$WHEELHOUSE is not a directory" >&2; exit 2; }
    offline=(--no-index --find-links "$WHEELHOUSE")
fi

if [ -z "${SKIP_TORCH:-}" ]; then
    torch_index=()
    [ -n "${TORCH_INDEX_URL:-}" ] && torch_index=(--extra-index-url "$TORCH_INDEX_URL")
    "${PIP[@]}" install -q "${offline[@]}" "${torch_index[@]}" "$TORCH_SPEC"
fi
# Build prerequisites of fairseq's extensions, then the tools.
"${PIP[@]}" install -q "${offline[@]}" -r requirements/tools.txt
# fairseq: built against the torch above (no isolation), without its torchaudio
# requirement (torchaudio does not load against current torch; only speech code uses it).
"${PIP[@]}" install -q "${offline[@]}" --no-build-isolation --no-deps fairseq-fixed
"${PIP[@]}" install -q "${offline[@]}" --no-build-isolation --no-deps -e .
"$VENV/bin/python" -c "import fairseq, torch, fairseq_ctx; print('fairseq', fairseq.__version__, 'torch', torch.__version__)"
echo "$want_hash" > "$STAMP"
echo "setup-env: ready in $(( $(date +%s) - start ))s ($VENV)"
