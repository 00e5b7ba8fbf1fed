#!/bin/bash
# The later seeds of readings.md's plan, two per session: bash run-seeds.sh 3 4 (then 5 6), the
# command of run-seeds1-2.sh with other seeds, into the same out-dir (finished runs there are
# scored, not trained again). After seeds 1-6: bash run-seeds.sh 1 2 3 4 5 6 writes the one report
# that reading.py --final reads (no training: every run finished).
set -u
[ $# -ge 1 ] || { echo "usage: $0 SEED [SEED ...]" >&2; exit 2; }
cd /work/main
export PATH=/work/main/.venv/bin:$PATH
O=work/ca-3000-cpu
TAG="seeds$(IFS=-; echo "$*")"
echo "start $(date -u +%T) seeds $*"
fairseq-ctx-quality-compare --data-dir work/demo/data --config-dir fairseq_ctx/configs/init_study \
    --common fairseq_ctx/configs/demo/train.common --configs '00-*' '02-*' --seeds "$@" \
    --updates 3000 --curve-updates 1200,2000 --threads 1 --jobs 2 --train-loss --keep-checkpoints \
    --out-dir $O --json $O/quality-$TAG.json \
    --markdown $O/table-$TAG.md --curve-png $O/curves-$TAG.png
echo "exit $? $(date -u +%T)"
