#!/usr/bin/env bash
# The kit a short GPU lease installs offline (docs/results/gpu-ca-study-2000/run.sh): into
# .gpu/ (untracked), run here on a connected machine:
#   .gpu/whl/    wheels of what the lent machine's image lacks, for its Python (3.12,
#                manylinux x86_64), at this project's pinned versions
#   .gpu/sdist/  fairseq-fixed's sdist (only its translation-path extensions are built there,
#                by scripts/gpu/build_fairseq_ext.py, against the image's own torch)
# The lent machines' image (2026-11) has torch, numpy, scipy, matplotlib, cython, regex, lxml,
# pyyaml, tqdm, portalocker, click and joblib; the kit holds the rest of what the study and the
# benchmark import. A full offline install of the project instead: scripts/make-wheelhouse.sh. Knobs: PYTHON_VERSION (3.12), KIT (.gpu), PY (.venv/bin/python:
# a Python with torch, for the sdist's metadata).
set -euo pipefail
cd "$(dirname "$0")/../.."
KIT=${KIT:-.gpu}
PYTHON_VERSION=${PYTHON_VERSION:-3.12}
constraints=requirements/constraints-cpu.txt
pin() {  # NAME -> NAME==VERSION of the constraints (the CPU venv's versions)
    local line
    line=$(grep -i -E "^$1==" "$constraints") || { echo "make-lease-kit: $1 is not pinned in $constraints" >&2; exit 2; }
    echo "$line"
}
# one version of each: run.sh installs .gpu/whl/*.whl, and two versions of a package stop pip
rm -rf "$KIT/whl" "$KIT/sdist"
mkdir -p "$KIT/whl" "$KIT/sdist"
binary=(hydra-core omegaconf bitarray sacrebleu sacremoses subword-nmt mock)
specs=()
for name in "${binary[@]}"; do specs+=("$(pin "$name")"); done
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$PYTHON_VERSION" --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d "$KIT/whl" "${specs[@]}"
# antlr4-python3-runtime (omegaconf's parser) is an sdist only: pure Python, built into a wheel here
python3 -m pip wheel -q --no-deps -w "$KIT/whl" "$(pin antlr4-python3-runtime)"
# the sdist (pip prepares its metadata, and its setup.py imports torch: the project's venv, `make setup`)
PY=${PY:-.venv/bin/python}
"$PY" -c "import torch, setuptools" 2>/dev/null || { echo "make-lease-kit: $PY has no torch: run make setup first (or PY=...)" >&2; exit 2; }
"$PY" -m pip download -q -d "$KIT/sdist" --no-deps --no-binary fairseq-fixed --no-build-isolation "$(pin fairseq-fixed)"
ls -la "$KIT/whl" "$KIT/sdist"
du -sh "$KIT"
