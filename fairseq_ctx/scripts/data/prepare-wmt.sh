#!/usr/bin/env bash
# Prepare a WMT corpus of the papers: raw -> Moses / jieba tokenisation -> train cleaning
# -> 32K BPE merges (subword-nmt) -> fairseq-preprocess.
#
# Usage: scripts/data/prepare-wmt.sh --corpus wmt14-en-de|wmt17-zh-en|wmt14-en-fr
#          [--out DIR] [--local-dir DIR] [--offline] [--cache DIR] [--reverse]
#          [--merges 32000] [--bpe joint|separate] [--max-len 250] [--ratio 1.5]
#          [--extra-train PREFIX]... [--without-cwmt] [--checksums FILE]
#
# wmt17-zh-en needs the CWMT parts (registration): --extra-train PREFIX for each
# (PREFIX.zh / PREFIX.en); without any it refuses unless --without-cwmt is given (then the
# corpus is ~35% smaller than the papers' and the settings record cwmt=without).
# --checksums FILE: a JSON manifest {"archives": {filename: md5}, "counts":
# {"<corpus>/<split>": n}} overriding the published md5 sums / known dev-test sizes.
#
# Defaults follow the papers: 32K merges; joint BPE + joined dictionary for En-De / En-Fr
# (the papers' 88.0M base model needs ~42.8K embedding rows per side), separate BPE for
# Zh-En. --max-len 49 is Cao et al.'s "length < 50" filter for Zh-En. Cleaning (train
# only) is Moses clean-corpus-n's rule (1-250 tokens, ratio 1.5) on tokenised words (fairseq's
# prepare-wmt14en2de.sh counts subwords after BPE and tokenises with -a: docs/experiments.md).
# Valid / test are never filtered. Downloads are cached (FAIRSEQ_CTX_CACHE), resumed,
# and checked against published md5 sums; --local-dir takes already-downloaded archives
# or their extracted files (offline clusters). Idempotent: each step is written to
# DIR/<step>.partial and renamed when complete; settings are recorded in DIR/settings.
# Archives in --local-dir are md5-checked like downloads; dev / test sentence counts are
# checked after reading; a failed check writes nothing but DIR/raw.partial.
# Environment: WORKERS=N processes for tokenisation, BPE and fairseq-preprocess (default:
# the CPUs this job may use); PY (python), FAIRSEQ_PREPROCESS, FAIRSEQ_CTX_PROGRESS=0 (quiet).
set -euo pipefail
prog=prepare-wmt
here=$(cd "$(dirname "$0")" && pwd)
source "$here/common.sh"

corpus=; out=; local_dir=; offline=; cache=; reverse=; merges=32000; bpe=; max_len=250; ratio=1.5
extra=(); without_cwmt=; checksums=
while [ $# -gt 0 ]; do
    case "$1" in
        --corpus) needs_value "$@"; corpus=$2; shift 2 ;;
        --out) needs_value "$@"; out=$2; shift 2 ;;
        --local-dir) needs_value "$@"; local_dir=$2; shift 2 ;;
        --offline) offline=1; shift ;;
        --cache) needs_value "$@"; cache=$2; shift 2 ;;
        --reverse) reverse=1; shift ;;
        --merges) needs_value "$@"; merges=$2; shift 2 ;;
        --bpe) needs_value "$@"; bpe=$2; shift 2 ;;
        --max-len) needs_value "$@"; max_len=$2; shift 2 ;;
        --ratio) needs_value "$@"; ratio=$2; shift 2 ;;
        --extra-train) needs_value "$@"; extra+=(--extra-train "$2"); shift 2 ;;
        --without-cwmt) without_cwmt=1; shift ;;
        --checksums) needs_value "$@"; checksums=$2; shift 2 ;;
        -h|--help) sed -n '2,28p' "$0"; exit 0 ;;
        *) die "unknown option $1 (see --help)" ;;
    esac
done
case "$corpus" in
    wmt14-en-de) src=en; tgt=de; bpe=${bpe:-joint} ;;
    wmt14-en-fr) src=en; tgt=fr; bpe=${bpe:-joint} ;;
    wmt17-zh-en) src=zh; tgt=en; bpe=${bpe:-separate} ;;
    *) die "--corpus must be wmt14-en-de, wmt17-zh-en or wmt14-en-fr, not '$corpus'" ;;
esac
case "$bpe" in joint|separate) ;; *) die "--bpe must be joint or separate, not '$bpe'" ;; esac
[ -n "$reverse" ] && { t=$src; src=$tgt; tgt=$t; }
[ -z "$local_dir" ] || [ -d "$local_dir" ] || die "--local-dir $local_dir is not a directory"
[ -z "$checksums" ] || [ -f "$checksums" ] || die "checksum manifest not found: $checksums"
cwmt_setting=
if [ "$corpus" = wmt17-zh-en ]; then
    if [ -n "$without_cwmt" ] && [ ${#extra[@]} -gt 0 ]; then
        die "--without-cwmt and --extra-train contradict each other: pass one of them"
    elif [ -z "$without_cwmt" ] && [ ${#extra[@]} -eq 0 ]; then
        die "wmt17-zh-en: the papers' training data includes the CWMT corpora (casia2015, casict2011, casict2015, datum2015, datum2017, neu2017), which need registration and cannot be downloaded by script: pass each one with --extra-train PREFIX (PREFIX.zh / PREFIX.en), or pass --without-cwmt to go on with News Commentary v12 + UN v1.0 only (about 35% fewer training pairs than the papers')"
    fi
    [ -n "$without_cwmt" ] && cwmt_setting=" cwmt=without"
elif [ -n "$without_cwmt" ]; then
    die "--without-cwmt only applies to wmt17-zh-en, not $corpus"
fi
out=${out:-${FAIRSEQ_CTX_WORK:-work}/$corpus${reverse:+-reversed}}
check_settings "corpus=$corpus src=$src tgt=$tgt merges=$merges bpe=$bpe max_len=$max_len ratio=$ratio extra=${extra[*]:-none}$cwmt_setting"
splits=(train valid test)

do_raw() {
    local opts=(--corpus "$corpus" --outdir "$partial" "${extra[@]}")
    [ -n "$local_dir" ] && opts+=(--local-dir "$local_dir")
    [ -n "$offline" ] && opts+=(--offline)
    [ -n "$cache" ] && opts+=(--cache "$cache")
    [ -n "$reverse" ] && opts+=(--reverse)
    [ -n "$without_cwmt" ] && opts+=(--without-cwmt)
    [ -n "$checksums" ] && opts+=(--checksums "$checksums")
    $PY -m fairseq_ctx.data.corpora wmt "${opts[@]}"
}
do_tok() {
    tok_splits "$src" "$tgt" "${splits[@]}"
    mv "$partial/train.$src" "$partial/train.unclean.$src"; mv "$partial/train.$tgt" "$partial/train.unclean.$tgt"
    $PY -m fairseq_ctx.data.corpora clean --max-len "$max_len" --ratio "$ratio" \
        --src-in "$partial/train.unclean.$src" --tgt-in "$partial/train.unclean.$tgt" \
        --src-out "$partial/train.$src" --tgt-out "$partial/train.$tgt"
    rm "$partial/train.unclean.$src" "$partial/train.unclean.$tgt"
}
do_bpe() {
    local s l
    if [ "$bpe" = joint ]; then
        # joint BPE: merges learned on both sides' word counts together (what subword-nmt's
        # learn-joint-bpe-and-vocab learns), on $WORKERS processes
        $PY -m fairseq_ctx.data.bpe learn --symbols "$merges" --workers "$WORKERS" \
            --input "$out/tok/train.$src" "$out/tok/train.$tgt" --output "$partial/codes"
        for l in "$src" "$tgt"; do
            for s in "${splits[@]}"; do
                apply_bpe "$partial/codes" "$out/tok/$s.$l" "$partial/$s.$l"
            done
        done
    else
        bpe_separate "$merges" "$src" "$tgt" "${splits[@]}"
    fi
}
do_bin() {
    if [ "$bpe" = joint ]; then binarize bpe "$src" "$tgt" --joined-dictionary; else binarize bpe "$src" "$tgt"; fi
}

run_step raw do_raw
run_step tok do_tok
run_step bpe do_bpe
run_step bin do_bin
for s in "${splits[@]}"; do
    printf '%s: %-5s %9d pairs\n' "$prog" "$s" "$(wc -l < "$out/tok/$s.$src")"
done
echo "$prog: ready: $out/bin (raw references: $out/raw/test.$tgt)"
