#!/usr/bin/env bash
# Prepare OpenSubtitles2018 Ja-En as in Iida et al. (2019): OPUS Moses-format release,
# 90/5/5 split BY DOCUMENT (movie; a stable hash of the .ids file names), MeCab / Moses
# tokenisation, SentencePiece 32K per language, fairseq-preprocess; and the "2-to-2"
# extended-context variant (previous + current sentence joined by <CONCAT> on both
# sides, built by fairseq_ctx.data.concat_context within documents).
#
# Usage: scripts/data/prepare-opensubtitles.sh [--direction ja-en|en-ja] [--out DIR]
#          [--local-dir DIR] [--offline] [--cache DIR] [--vocab-size 32000]
#          [--variant both|plain|concat] [--checksums FILE]
#
# --local-dir holds en-ja.txt.zip (from OPUS) or its members OpenSubtitles.en-ja.{en,ja,ids}.
# --checksums FILE: a JSON manifest {"archives": {"en-ja.txt.zip": md5}, "counts":
# {"opensubtitles/<split>": n}} (OPUS publishes no md5 sum; a mirror or a rehearsal can).
# Outputs: DIR/bin (sentence-level), DIR/bin-concat (2-to-2). Score the 2-to-2 system
# with fairseq-ctx-evaluate --strip-concat (only the part after <CONCAT> counts).
# Environment: WORKERS=N processes (default: the CPUs this job may use), FAIRSEQ_CTX_PROGRESS=0.
set -euo pipefail
prog=prepare-opensubtitles
here=$(cd "$(dirname "$0")" && pwd)
source "$here/common.sh"

direction=ja-en; out=; local_dir=; offline=; cache=; vocab=32000; variant=both; checksums=
while [ $# -gt 0 ]; do
    case "$1" in
        --direction) needs_value "$@"; direction=$2; shift 2 ;;
        --out) needs_value "$@"; out=$2; shift 2 ;;
        --local-dir) needs_value "$@"; local_dir=$2; shift 2 ;;
        --offline) offline=1; shift ;;
        --cache) needs_value "$@"; cache=$2; shift 2 ;;
        --vocab-size) needs_value "$@"; vocab=$2; shift 2 ;;
        --variant) needs_value "$@"; variant=$2; shift 2 ;;
        --checksums) needs_value "$@"; checksums=$2; shift 2 ;;
        -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
        *) die "unknown option $1 (see --help)" ;;
    esac
done
case "$direction" in ja-en|en-ja) ;; *) die "--direction must be ja-en or en-ja" ;; esac
case "$variant" in both|plain|concat) ;; *) die "--variant must be both, plain or concat" ;; esac
[ -z "$local_dir" ] || [ -d "$local_dir" ] || die "--local-dir $local_dir is not a directory"
[ -z "$checksums" ] || [ -f "$checksums" ] || die "checksum manifest not found: $checksums"
src=${direction%-*}; tgt=${direction#*-}
out=${out:-${FAIRSEQ_CTX_WORK:-work}/opensubtitles-$direction}
# blank-pairs: pairs with a blank side are dropped (corpora.prepare_opensubtitles); a directory
# prepared before that rule holds them and is not the same test set
check_settings "direction=$direction vocab=$vocab blank-pairs=dropped"
splits=(train valid test)

do_raw() {
    local opts=(--outdir "$partial" --direction "$direction")
    [ -n "$local_dir" ] && opts+=(--local-dir "$local_dir")
    [ -n "$offline" ] && opts+=(--offline)
    [ -n "$cache" ] && opts+=(--cache "$cache")
    [ -n "$checksums" ] && opts+=(--checksums "$checksums")
    $PY -m fairseq_ctx.data.corpora opensubtitles "${opts[@]}"
}
do_tok() { tok_splits "$src" "$tgt" "${splits[@]}"; }
do_concat() {
    local s
    for s in "${splits[@]}"; do
        $PY -m fairseq_ctx.data.concat_context make --src "$out/tok/$s.$src" --tgt "$out/tok/$s.$tgt" \
            --doc-ids "$out/raw/$s.docs" --out-src "$partial/$s.$src" --out-tgt "$partial/$s.$tgt"
    done
}
do_spm() {
    local l
    for l in "$src" "$tgt"; do
        $PY -m fairseq_ctx.data.sentencepiece_model train --input "$out/tok/train.$l" \
            --model-prefix "$partial/spm.$l" --vocab-size "$vocab" --symbol "<CONCAT>"
        spm_encode "$partial/spm.$l.model" "$out/tok" "$partial" "$l" "${splits[@]}"
    done
}
# the 2-to-2 corpus encoded with the sentence-level models (trained on tok/ alone), in a step
# of its own: a directory prepared with --variant plain gains bin-concat when re-run with both
do_spm_concat() {
    local l
    for l in "$src" "$tgt"; do spm_encode "$out/spm/spm.$l.model" "$out/concat" "$partial" "$l" "${splits[@]}"; done
}
# spm/concat: where a preparation before spm-concat was a step of its own encoded it
concat_spm=spm-concat
[ -d "$out/spm/concat" ] && concat_spm=spm/concat
do_bin() { binarize spm "$src" "$tgt"; }
do_bin_concat() { binarize "$concat_spm" "$src" "$tgt"; }

run_step raw do_raw
run_step tok do_tok
[ "$variant" != plain ] && run_step concat do_concat
run_step spm do_spm
[ "$variant" != plain ] && [ "$concat_spm" = spm-concat ] && run_step spm-concat do_spm_concat
[ "$variant" != concat ] && run_step bin do_bin
[ "$variant" != plain ] && run_step bin-concat do_bin_concat
case "$variant" in
    both) built="bin: sentence-level, bin-concat: 2-to-2" ;; plain) built="bin: sentence-level" ;; concat) built="bin-concat: 2-to-2" ;;
esac
echo "$prog: ready: $out ($built; raw references: $out/raw/test.$tgt)"
