#!/usr/bin/env bash
# The demo: real Tatoeba zh-en -> train every row of fairseq_ctx/configs/demo/*.args with the same
# data, the same update budget and the same training settings -> translate the whole
# test set -> a sacreBLEU table.
#
# Rows run DEMO_JOBS at a time (default: the number of cores), each on DEMO_THREADS
# threads (default: the cores divided among the rows that run together, so 1 when all
# cores are busy): on a small CPU machine this is faster than one row on all cores, and
# it avoids OpenMP threads of concurrent runs spinning against each other.
#
# Knobs (environment): DEMO_UPDATES (default 400), DEMO_ROWS (glob over row names,
# default all, e.g. DEMO_ROWS='00-*'), DEMO_DIR (default work/demo; $FAIRSEQ_CTX_WORK/demo where set), DEMO_SEED (1),
# DEMO_BEAM (default: the demo's evaluation setting, fairseq_ctx/evaluation/defaults.py), DEMO_JOBS, DEMO_THREADS, DEMO_PREP_ARGS (extra
# scripts/prepare-tatoeba.sh options, e.g. a smaller slice), DEMO_GEN_ARGS (extra
# fairseq-generate options), DEMO_ALL_GPUS=1 (see below). Rows already finished with the same
# settings are reused.
#
# GPUs: fairseq-train trains on every GPU it sees (data-parallel: N times the settings'
# tokens per update). On a node with several (nvidia-smi -L, or the entries of
# CUDA_VISIBLE_DEVICES), each row sees one of them, round-robin in row order, so that every
# row trains with the one-device batch of the table; DEMO_ALL_GPUS=1 gives every row all.
set -euo pipefail
# under the work directory where FAIRSEQ_CTX_WORK moves it, as every command's (fairseq-ctx-quality-compare
# looks for the demo's data in $FAIRSEQ_CTX_WORK/demo/data)
DEMO_DIR=${DEMO_DIR:-${FAIRSEQ_CTX_WORK:+$FAIRSEQ_CTX_WORK/demo}}
# a DEMO_DIR (or FAIRSEQ_CTX_WORK) given relative is the caller's (the script works from the checkout's root)
case "${DEMO_DIR:-/}" in /*) ;; *) DEMO_DIR=$PWD/$DEMO_DIR ;; esac
cd "$(dirname "$0")/.."
DEMO_UPDATES=${DEMO_UPDATES:-400}
DEMO_ROWS=${DEMO_ROWS:-*}
DEMO_DIR=${DEMO_DIR:-work/demo}
DEMO_SEED=${DEMO_SEED:-1}
DEMO_BEAM=${DEMO_BEAM:-}
DEMO_JOBS=${DEMO_JOBS:-$(nproc)}
DEMO_PREP_ARGS=${DEMO_PREP_ARGS:-}
DEMO_GEN_ARGS=${DEMO_GEN_ARGS:-}
PY=${PY:-python}
data=$DEMO_DIR/data
start=$(date +%s)

read -r -a prep_args <<< "$DEMO_PREP_ARGS"
read -r -a gen_args <<< "$DEMO_GEN_ARGS"
bash scripts/prepare-tatoeba.sh --pair zh-en --out "$data" "${prep_args[@]}"
read -r -a common < fairseq_ctx/configs/demo/train.common

rows=()
for file in fairseq_ctx/configs/demo/$DEMO_ROWS.args; do
    [ -f "$file" ] || { echo "demo: no row matches DEMO_ROWS=$DEMO_ROWS" >&2; exit 2; }
    rows+=("$(basename "$file" .args)")
done

if [ -z "${DEMO_THREADS:-}" ]; then
    together=$(( ${#rows[@]} < DEMO_JOBS ? ${#rows[@]} : DEMO_JOBS ))
    DEMO_THREADS=$(( $(nproc) / together > 0 ? $(nproc) / together : 1 ))
fi

gpus=()
if [ -n "${CUDA_VISIBLE_DEVICES+set}" ]; then  # set, even empty (no GPU at all): as listed
    IFS=, read -r -a gpus <<< "$CUDA_VISIBLE_DEVICES"
elif command -v nvidia-smi > /dev/null; then
    n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
    [ "${n:-0}" -gt 0 ] && gpus=($(seq 0 $((n - 1))))
fi
all_gpus=""
if [ "${#gpus[@]}" -lt 2 ]; then
    gpus=()  # one GPU or none: nothing to share out
elif [ "${DEMO_ALL_GPUS:-0}" = 1 ]; then
    all_gpus=" all_gpus=${#gpus[@]}"; gpus=()  # every row data-parallel on all of them
fi

# fairseq-train can exit non-zero at interpreter shutdown after it has finished (rc -6 from its batch
# thread under Python 3.11; fairseq_ctx/checkpoint_repair.py): its log says so and checkpoint_last.pt
# is whole at --max-update. Call right after the failed fairseq-train (reads its exit status).
finished_before_the_exit() {
    local rc=$? row=$1 dir=$2 done
    done=$($PY -c 'import sys; from fairseq_ctx.checkpoint_repair import finished_before_the_exit as f
with open(sys.argv[3], errors="replace") as log: print(f(sys.argv[1], int(sys.argv[2]), log.read()) or "")' \
        "$dir/checkpoints" "$DEMO_UPDATES" "$dir/train.log") || return 1
    [ -n "$done" ] || return 1
    echo "demo: $row: fairseq-train exited $rc after it had finished (checkpoint_last.pt whole at update $done): taken as finished" >&2
}

run_row() {
    local row=$1 dir=$DEMO_DIR/runs/$1 settings t0 t1
    local -a arch_args
    read -r -a arch_args < "fairseq_ctx/configs/demo/$row.args"
    settings="updates=$DEMO_UPDATES seed=$DEMO_SEED beam=$DEMO_BEAM gen=$DEMO_GEN_ARGS $(cat fairseq_ctx/configs/demo/train.common "fairseq_ctx/configs/demo/$row.args" | tr '\n' ' ')"
    # data-parallel rows (another batch) are never reused as one-device rows, nor the reverse
    settings="$settings$all_gpus"
    if [ -f "$dir/bleu.json" ] && [ "$(cat "$dir/settings" 2>/dev/null)" = "$settings" ]; then
        echo "demo: $row: done already"; return 0
    fi
    rm -rf "$dir"; mkdir -p "$dir"
    echo "demo: $row: training $DEMO_UPDATES updates ($(date +%T))${CUDA_VISIBLE_DEVICES:+ on CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES}"
    t0=$(date +%s)
    OMP_NUM_THREADS=$DEMO_THREADS fairseq-train "$data/bin" --user-dir fairseq_ctx "${common[@]}" "${arch_args[@]}" \
        --max-update "$DEMO_UPDATES" --seed "$DEMO_SEED" --save-dir "$dir/checkpoints" > "$dir/train.log" 2>&1 \
        || finished_before_the_exit "$row" "$dir" \
        || { tail -n 30 "$dir/train.log" >&2; echo "demo: $row: training failed (log: $dir/train.log)" >&2; return 1; }
    t1=$(date +%s)
    OMP_NUM_THREADS=$DEMO_THREADS $PY -m fairseq_ctx.evaluation --paper demo --data "$data/bin" \
        --save-dir "$dir/checkpoints" --src zh --tgt en --ref "$data/raw/test.en" \
        ${DEMO_BEAM:+--beam "$DEMO_BEAM"} --out-dir "$dir/eval" -- "${gen_args[@]}" > "$dir/eval.log" 2>&1 \
        || { cat "$dir/eval.log" >&2; echo "demo: $row: evaluation failed" >&2; return 1; }
    $PY -m fairseq_ctx.demo_table record --run-dir "$dir" --row "$row" --train-seconds $((t1 - t0)) \
        --eval-seconds $(( $(date +%s) - t1 ))
    echo "$settings" > "$dir/settings"
    echo "demo: $row: $(grep -m 1 "^BLEU" "$dir/eval.log")"
}

pids=()
i=0
for row in "${rows[@]}"; do
    while [ "$(jobs -rp | wc -l)" -ge "$DEMO_JOBS" ]; do wait -n || true; done
    if [ "${#gpus[@]}" -gt 0 ]; then
        (export CUDA_VISIBLE_DEVICES=${gpus[i % ${#gpus[@]}]}; run_row "$row") &
    else
        run_row "$row" &
    fi
    pids+=($!)
    i=$((i + 1))
done
failed=0
for pid in "${pids[@]}"; do wait "$pid" || failed=1; done

$PY -m fairseq_ctx.demo_table show --demo-dir "$DEMO_DIR" --rows "${rows[@]}"
echo "demo: finished in $(( $(date +%s) - start ))s (up to $DEMO_JOBS rows at a time, $DEMO_THREADS thread(s) each)"
exit "$failed"
