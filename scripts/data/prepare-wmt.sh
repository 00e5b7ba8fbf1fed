#!/usr/bin/env bash
# Prepare a WMT corpus of the papers: raw -> Moses / jieba tokenisation -> train cleaning
# -> 32K BPE merges (subword-nmt) -> fairseq-preprocess.
#
# Usage: scripts/data/prepare-wmt.sh --corpus wmt14-en-de|wmt17-zh-en|wmt14-en-fr
#          [--out DIR] [--local-dir DIR] [--offline] [--cache DIR] [--reverse]
#          [--merges 32000] [--bpe joint|separate] [--max-len 250] [--ratio 1.5]
#          [--extra-train PREFIX]...
#
# Defaults follow the papers: 32K merges; joint BPE + joined dictionary for En-De / En-Fr
# (the papers' 88.0M base model needs ~42.8K embedding rows per side), separate BPE for
# Zh-En. --max-len 49 is Cao et al.'s "length < 50" filter for Zh-En. Cleaning (train
# only) is Moses clean-corpus-n as in fairseq's WMT scripts (1-250 tokens, ratio 1.5).
# Valid / test are never filtered. Downloads are cached (FAIRSEQ_CTX_CACHE), resumed,
# and checked against published md5 sums; --local-dir takes already-downloaded archives
# or their extracted files (offline clusters). Idempotent: each step is written to
# DIR/<step>.partial and renamed when complete; settings are recorded in DIR/settings.
set -euo pipefail
prog=prepare-wmt
here=$(cd "$(dirname "$0")" && pwd)
source "$here/common.sh"

corpus=; out=; local_dir=; offline=; cache=; reverse=; merges=32000; bpe=; max_len=250; ratio=1.5
extra=()
while [ $# -gt 0 ]; do
    case "$1" in
        --corpus) corpus=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        --local-dir) local_dir=$2; shift 2 ;;
        --offline) offline=1; shift ;;
        --cache) cache=$2; shift 2 ;;
        --reverse) reverse=1; shift ;;
        --merges) merges=$2; shift 2 ;;
        --bpe) bpe=$2; shift 2 ;;
        --max-len) max_len=$2; shift 2 ;;
        --ratio) ratio=$2; shift 2 ;;
        --extra-train) extra+=(--extra-train "$2"); shift 2 ;;
        -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
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
out=${out:-work/$corpus${reverse:+-reversed}}
check_settings "corpus=$corpus src=$src tgt=$tgt merges=$merges bpe=$bpe max_len=$max_len ratio=$ratio extra=${extra[*]:-none}"
splits=(train valid test)

do_raw() {
    local opts=(--corpus "$corpus" --outdir "$partial" "${extra[@]}")
    [ -n "$local_dir" ] && opts+=(--local-dir "$local_dir")
    [ -n "$offline" ] && opts+=(--offline)
    [ -n "$cache" ] && opts+=(--cache "$cache")
    [ -n "$reverse" ] && opts+=(--reverse)
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
        subword-nmt learn-joint-bpe-and-vocab -s "$merges" --input "$out/tok/train.$src" "$out/tok/train.$tgt" \
            -o "$partial/codes" --write-vocabulary "$partial/vocab.$src" "$partial/vocab.$tgt" 2> "$partial/learn-bpe.log" \
            || { cat "$partial/learn-bpe.log" >&2; return 1; }
        for l in "$src" "$tgt"; do
            for s in "${splits[@]}"; do
                subword-nmt apply-bpe -c "$partial/codes" < "$out/tok/$s.$l" > "$partial/$s.$l"
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
