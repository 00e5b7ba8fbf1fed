#!/usr/bin/env bash
# Create (or refresh) the project's virtual environment and install everything:
# torch (never pulled implicitly, never replaced unless asked), fairseq-fixed built
# against that torch, the NMT tools, and this package in editable mode.
#
# A torch already present in the venv (CPU or CUDA build, any version; also one seen
# through --system-site-packages) is KEPT: the constraints every pip call uses are
# generated without the pinned torch line plus `torch==<the present version>`
# ($VENV/.fairseq-ctx-constraints.txt). fairseq's C++/Cython extensions are rebuilt
# whenever the torch (version, CUDA/HIP version) or Python they were built against
# changes ($VENV/.fairseq-ctx-fairseq-build.json), and checked to import on every run.
# The decisions live in scripts/setup_env_check.py (tested by tests/test_setup_env.py).
#
# Environment knobs:
#   VENV=.venv                 where the environment lives
#   PYTHON=python3             interpreter used to create it
#   CONSTRAINTS=requirements/constraints-cpu.txt
#                              the pins (requirements/constraints-gpu.txt: the same without
#                              torch). Their torch line only chooses what a venv WITHOUT
#                              torch gets; exported (via the generated file) as
#                              PIP_CONSTRAINT, so they reach build environments too.
#   TORCH_SPEC=                install exactly this torch, replacing a present one that does
#                              not satisfy it, e.g. TORCH_SPEC="torch==2.5.1"
#                              TORCH_INDEX_URL=https://download.pytorch.org/whl/cu124
#   TORCH_INDEX_URL=           extra index for the torch install only (CUDA or CPU wheels:
#                              https://download.pytorch.org/whl/cpu gives the CPU build
#                              where the configured index has only the CUDA one)
#   FORCE_TORCH=1              install the constraints' torch even over a present one
#   SKIP_TORCH=1               never install torch; one must be present (e.g. a venv made
#                              with --system-site-packages on a cluster image)
#   WHEELHOUSE=                a directory of wheels/sdists: install offline from it only
#                              (build it with `make wheelhouse` on a connected machine)
# Without TORCH_SPEC, a venv with no torch gets the CPU build of the constraints' pin
# (torch==2.13.0+cpu) where the index offers one, else the plain pin (torch==2.13.0).
set -euo pipefail
unset CDPATH  # a cd into a relative path must not land elsewhere (and print it)
cd "$(dirname "$0")/.."

VENV=${VENV:-.venv}
PYTHON=${PYTHON:-python3}
CONSTRAINTS=${CONSTRAINTS:-requirements/constraints-cpu.txt}
STAMP="$VENV/.fairseq-ctx-installed"
BUILD_STAMP="$VENV/.fairseq-ctx-fairseq-build.json"
EFFECTIVE="$VENV/.fairseq-ctx-constraints.txt"
case "$EFFECTIVE" in /*) ;; *) EFFECTIVE="$PWD/$EFFECTIVE" ;; esac  # PIP_CONSTRAINT: absolute
CHECK=(scripts/setup_env_check.py)

start=$(date +%s)
[ -f "$CONSTRAINTS" ] || { echo "setup-env: CONSTRAINTS=$CONSTRAINTS is not a file" >&2; exit 2; }
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
VPY="$(cd "$VENV" && pwd)/bin/python"  # absolute: the installed-package check runs from /
PIP=("$VPY" -m pip)
check() { "$VPY" "${CHECK[@]}" "$@"; }
export PIP_DISABLE_PIP_VERSION_CHECK=1
unset PIP_CONSTRAINT  # set below, to the generated file only

# Which torch is here, and what to do about it (keep / skip / install SPEC [FALLBACK]).
read -r torch_action torch_what <<<"$(check plan-torch --constraints "$CONSTRAINTS")"
[ -n "$torch_action" ] || exit 2

want_hash() {
    { cat "$CONSTRAINTS" requirements/tools.txt setup.py pyproject.toml scripts/setup-env.sh "${CHECK[@]}"
      check torch-id; } | sha256sum | cut -c1-16
}
if [ "$torch_action" != install ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$(want_hash)" ] \
        && [ "$(check fairseq-plan --stamp "$BUILD_STAMP")" = ok ]; then
    # nothing to install: still make sure the extensions import (else rebuild fairseq) and
    # that this package is still installed (a pip command can have removed it)
    if ! check verify >/dev/null 2>&1; then
        echo "setup-env: fairseq's extensions do not import: rebuilding fairseq-fixed" >&2
        rm -f "$BUILD_STAMP"
    elif (cd / && "$VPY" -c "import importlib.metadata as m; m.distribution('fairseq-ctx')" 2>/dev/null); then
        exit 0
    else
        echo "setup-env: fairseq-ctx is no longer installed in $VENV: installing it again" >&2
    fi
fi

offline=()
if [ -n "${WHEELHOUSE:-}" ]; then
    [ -d "$WHEELHOUSE" ] || { echo "setup-env: WHEELHOUSE=$WHEELHOUSE is not a directory" >&2; exit 2; }
    offline=(--no-index --find-links "$WHEELHOUSE")
fi

# torch: installed under the constraints WITHOUT any torch line (the spec decides).
check constraints --base "$CONSTRAINTS" --out "$EFFECTIVE" --without-torch >/dev/null
export PIP_CONSTRAINT="$EFFECTIVE"
case "$torch_action" in
keep) echo "setup-env: keeping the torch present in $VENV: $(check torch-id)" ;;
skip) echo "setup-env: SKIP_TORCH: using the torch present: $(check torch-id)" ;;
install)
    torch_index=()
    [ -n "${TORCH_INDEX_URL:-}" ] && torch_index=(--extra-index-url "$TORCH_INDEX_URL")
    read -r -a specs <<<"$torch_what"
    log=$(mktemp)
    for i in "${!specs[@]}"; do
        echo "setup-env: installing ${specs[$i]}"
        if "${PIP[@]}" install -q "${offline[@]}" "${torch_index[@]}" "${specs[$i]}" 2>"$log"; then
            break
        fi
        if [ "$i" -lt $(( ${#specs[@]} - 1 )) ] && grep -q "No matching distribution found" "$log"; then
            echo "setup-env: the index offers no ${specs[$i]}; installing ${specs[$((i + 1))]} instead" \
                 "(on public PyPI that is the CUDA build; for the CPU one set" \
                 "TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu)" >&2
            continue
        fi
        cat "$log" >&2; rm -f "$log"; exit 1
    done
    rm -f "$log"
    ;;
*) echo "setup-env: unexpected plan '$torch_action $torch_what'" >&2; exit 2 ;;
esac

# Everything else: the generated constraints pin the torch now present, exactly.
check constraints --base "$CONSTRAINTS" --out "$EFFECTIVE" >/dev/null
# Build prerequisites of fairseq's extensions, then the tools.
"${PIP[@]}" install -q "${offline[@]}" -r requirements/tools.txt
# fairseq: built against the torch above (no isolation), without its torchaudio
# requirement (torchaudio does not load against current torch; only speech code uses it).
# Rebuilt whenever that torch changed: --force-reinstall (pip would say "already
# satisfied") and --no-cache-dir (pip caches a locally built wheel by the sdist alone,
# not by the torch it was compiled against, and would reinstall the stale build).
fairseq_built=
build_fairseq() {
    echo "setup-env: building fairseq-fixed ($1)"
    rm -f "$BUILD_STAMP"
    "${PIP[@]}" install -q "${offline[@]}" --force-reinstall --no-deps --no-build-isolation \
        --no-cache-dir fairseq-fixed
    fairseq_built=1
}
fairseq_plan=$(check fairseq-plan --stamp "$BUILD_STAMP")
[ "$fairseq_plan" = ok ] || build_fairseq "${fairseq_plan#build }"
# (an older `setup.py develop` install left fairseq_ctx.egg-info here; the PEP 660 install
# does not use it, and from the checkout root it would pass for an installed package)
rm -rf fairseq_ctx.egg-info
"${PIP[@]}" install -q "${offline[@]}" --no-build-isolation --no-deps -e .
# fairseq's compiled extensions must import against this torch: one clear message if not.
if [ -n "$fairseq_built" ]; then
    check verify
elif ! check verify 2>/dev/null; then
    build_fairseq "its extensions do not import"
    check verify
fi
# the record of the torch fairseq was built against, once that build is known to work
[ -z "$fairseq_built" ] || check fairseq-stamp --stamp "$BUILD_STAMP" >/dev/null
"$VPY" -c "import fairseq, torch, fairseq_ctx; print('fairseq', fairseq.__version__, 'torch', torch.__version__, 'cuda', torch.version.cuda)"
want_hash > "$STAMP"
echo "setup-env: ready in $(( $(date +%s) - start ))s ($VENV)"
