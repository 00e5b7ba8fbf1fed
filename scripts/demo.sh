#!/usr/bin/env bash
# The demo: real Tatoeba zh-en -> train every row of configs/demo/*.args with the same
# data, the same update budget and the same training settings -> translate the whole
# test set -> a sacreBLEU table.
#
# Knobs (environment): DEMO_UPDATES (default 500), DEMO_ROWS (glob over row names,
# default all, e.g. DEMO_ROWS='00-*'), DEMO_DIR (default work/demo), DEMO_SEED (1),
# DEMO_BEAM (5), DEMO_PREP_ARGS (extra scripts/prepare-tatoeba.sh options, e.g. a
# smaller slice), DEMO_GEN_ARGS (extra fairseq-generate options).
# Rows already trained with the same settings are not trained again.
set -euo pipefail
cd "$(dirname "$0")/.."
DEMO_UPDATES=${DEMO_UPDATES:-500}
DEMO_ROWS=${DEMO_ROWS:-*}
DEMO_DIR=${DEMO_DIR:-work/demo}
DEMO_SEED=${DEMO_SEED:-1}
DEMO_BEAM=${DEMO_BEAM:-5}
DEMO_PREP_ARGS=${DEMO_PREP_ARGS:-}
DEMO_GEN_ARGS=${DEMO_GEN_ARGS:-}
PY=${PY:-python}
data=$DEMO_DIR/data
start=$(date +%s)

read -r -a prep_args <<< "$DEMO_PREP_ARGS"
read -r -a gen_args <<< "$DEMO_GEN_ARGS"
bash scripts/prepare-tatoeba.sh --pair zh-en --out "$data" "${prep_args[@]}"
read -r -a common < configs/demo/train.common

rows=()
for file in configs/demo/$DEMO_ROWS.args; do
    [ -f "$file" ] || { echo "demo: no row matches DEMO_ROWS=$DEMO_ROWS" >&2; exit 2; }
    rows+=("$(basename "$file" .args)")
done

for row in "${rows[@]}"; do
    read -r -a arch_args < "configs/demo/$row.args"
    dir=$DEMO_DIR/runs/$row
    settings="updates=$DEMO_UPDATES seed=$DEMO_SEED beam=$DEMO_BEAM gen=$DEMO_GEN_ARGS $(cat configs/demo/train.common "configs/demo/$row.args" | tr '\n' ' ')"
    if [ -f "$dir/bleu.json" ] && [ "$(cat "$dir/settings" 2>/dev/null)" = "$settings" ]; then
        echo "demo: $row: done already"; continue
    fi
    rm -rf "$dir"; mkdir -p "$dir"
    echo "demo: $row: training $DEMO_UPDATES updates ($(date +%T))"
    t0=$(date +%s)
    fairseq-train "$data/bin" --user-dir fairseq_ctx "${common[@]}" "${arch_args[@]}" \
        --max-update "$DEMO_UPDATES" --seed "$DEMO_SEED" --save-dir "$dir/checkpoints" > "$dir/train.log" 2>&1 \
        || { tail -n 30 "$dir/train.log" >&2; echo "demo: $row: training failed (log: $dir/train.log)" >&2; exit 1; }
    t1=$(date +%s)
    $PY -m fairseq_ctx.evaluate --data "$data/bin" --path "$dir/checkpoints/checkpoint_last.pt" \
        --src zh --tgt en --ref "$data/raw/test.en" --beam "$DEMO_BEAM" --out-dir "$dir/eval" -- "${gen_args[@]}"
    $PY -m fairseq_ctx.demo_table record --run-dir "$dir" --row "$row" --train-seconds $((t1 - t0)) \
        --eval-seconds $(( $(date +%s) - t1 ))
    echo "$settings" > "$dir/settings"
done

$PY -m fairseq_ctx.demo_table show --demo-dir "$DEMO_DIR" --rows "${rows[@]}"
echo "demo: finished in $(( $(date +%s) - start ))s"
