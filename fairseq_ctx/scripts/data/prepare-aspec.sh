#!/usr/bin/env bash
# Prepare ASPEC-JE as in Iida et al. (2019): the 1M training pairs with the best
# alignment scores (train-1..3.txt), the official dev (1,790) / test (1,812), MeCab
# (fugashi + unidic-lite) for Japanese, Moses for English, SentencePiece 32K per language,
# fairseq-preprocess. ASPEC is licensed by application: it cannot be downloaded by script.
#
# Usage: scripts/data/prepare-aspec.sh --local-dir ASPEC/ASPEC-JE [--direction ja-en|en-ja]
#          [--out DIR] [--top 1000000] [--vocab-size 32000] [--length-eval]
#          [--length-eval-tokens 20000] [--checksums FILE]
#
# --length-eval also builds Section 4.3's per-length test sets from the held-out
# training pairs (buckets of 10 source words, --length-eval-tokens words each, the
# paper's 20,000 by default): binarized as extra test subsets listed in
# DIR/bin/length-subsets.tsv (subset name -> bucket).
# dev / test sentence counts are checked (1,790 / 1,812); --checksums FILE (a JSON
# manifest {"archives": {path in ASPEC-JE: md5}, "counts": {"aspec/<split>": n}})
# overrides them and adds md5 checks of the files.
# Idempotent / atomic steps and a settings check as in scripts/prepare-tatoeba.sh.
# Environment: WORKERS=N processes (default: the CPUs this job may use), FAIRSEQ_CTX_PROGRESS=0.
set -euo pipefail
prog=prepare-aspec
here=$(cd "$(dirname "$0")" && pwd)
source "$here/common.sh"

local_dir=; direction=ja-en; out=; top=1000000; vocab=32000; length_eval=; length_eval_tokens=20000; checksums=
while [ $# -gt 0 ]; do
    case "$1" in
        --local-dir) needs_value "$@"; local_dir=$2; shift 2 ;;
        --direction) needs_value "$@"; direction=$2; shift 2 ;;
        --out) needs_value "$@"; out=$2; shift 2 ;;
        --top) needs_value "$@"; top=$2; shift 2 ;;
        --vocab-size) needs_value "$@"; vocab=$2; shift 2 ;;
        --length-eval) length_eval=1; shift ;;
        --length-eval-tokens) needs_value "$@"; length_eval_tokens=$2; shift 2 ;;
        --checksums) needs_value "$@"; checksums=$2; shift 2 ;;
        -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
        *) die "unknown option $1 (see --help)" ;;
    esac
done
[ -n "$local_dir" ] || die "--local-dir is required (ASPEC is licensed by application and cannot be downloaded by script)"
[ -d "$local_dir" ] || die "missing input: ASPEC-JE directory $local_dir"
case "$direction" in ja-en|en-ja) ;; *) die "--direction must be ja-en or en-ja" ;; esac
case "$length_eval_tokens" in ''|*[!0-9]*|0) die "--length-eval-tokens must be a positive number" ;; esac
[ -z "$checksums" ] || [ -f "$checksums" ] || die "checksum manifest not found: $checksums"
src=${direction%-*}; tgt=${direction#*-}
out=${out:-${FAIRSEQ_CTX_WORK:-work}/aspec-$direction}
# the token budget is recorded only when it is not the paper's (older directories keep their settings)
budget=; [ -n "$length_eval" ] && [ "$length_eval_tokens" != 20000 ] && budget=" length_eval_tokens=$length_eval_tokens"
check_settings "direction=$direction top=$top vocab=$vocab length_eval=${length_eval:-0}$budget"

do_raw() {
    $PY -m fairseq_ctx.data.corpora aspec --local-dir "$local_dir" --outdir "$partial" \
        --direction "$direction" --top "$top" ${length_eval:+--length-eval} \
        --length-eval-tokens "$length_eval_tokens" ${checksums:+--checksums "$checksums"}
}
all_splits() { ls "$out/raw" | sed -n "s/\.$src\$//p" | sort; }
do_tok() { tok_splits "$src" "$tgt" $(all_splits); }
do_spm() {
    local s l
    for l in "$src" "$tgt"; do
        $PY -m fairseq_ctx.data.sentencepiece_model train --input "$out/tok/train.$l" \
            --model-prefix "$partial/spm.$l" --vocab-size "$vocab"
        spm_encode "$partial/spm.$l.model" "$out/tok" "$partial" "$l" $(all_splits)
    done
}
do_bin() {
    binarize spm "$src" "$tgt"
    local lens=($(all_splits | grep '^len' | sort -t n -k2 -n || true))
    if [ ${#lens[@]} -gt 0 ]; then
        local prefixes i=0
        prefixes=$(printf "$out/spm/%s," "${lens[@]}"); prefixes=${prefixes%,}
        mkdir -p "$partial/lengths"
        $FAIRSEQ_PREPROCESS --source-lang "$src" --target-lang "$tgt" --testpref "$prefixes" \
            --srcdict "$partial/dict.$src.txt" --tgtdict "$partial/dict.$tgt.txt" \
            --destdir "$partial/lengths" --workers "$WORKERS" > "$partial/preprocess-lengths.log" 2>&1 \
            || { cat "$partial/preprocess-lengths.log" >&2; return 1; }
        for s in "${lens[@]}"; do
            local name=test; [ $i -gt 0 ] && name=test$i
            for f in "$partial/lengths/$name.$src-$tgt".*; do mv "$f" "$partial/${f##*/}.tmp"; done
            printf '%s\t%s\n' "$([ $i -eq 0 ] && echo lentest || echo lentest$i)" "$s" >> "$partial/length-subsets.tsv"
            i=$((i + 1))
        done
        # the length subsets become gen-subsets lentest, lentest1, ... next to train/valid/test
        for f in "$partial"/*.tmp; do
            base=${f##*/}; base=${base%.tmp}; mv "$f" "$partial/len${base}"
        done
        rm -rf "$partial/lengths"
    fi
}

run_step raw do_raw
run_step tok do_tok
run_step spm do_spm
run_step bin do_bin
echo "$prog: ready: $out/bin (raw references: $out/raw/test.$tgt)"
