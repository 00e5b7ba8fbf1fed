#!/bin/bash
# arm 29 seed 1 trained again with the split form of --context-stop-key-gradient (e48a491 and later; the
# five 29 runs used the mask form, ca8180b): does the form alone move the valid loss by as much as
# 29 - 30 (+0.003)? 00 imported from the 28 report (the quality-compare pairs every arm with it)
cd /work/main
export PATH=/work/main/.venv/bin:$PATH
R=docs/results/ca-arms-1200-cpu
echo "start $(date -u +%T)"
nice -n 19 fairseq-ctx-quality-compare --data-dir work/demo/data --config-dir fairseq_ctx/configs/init_study \
    --common fairseq_ctx/configs/demo/train.common --configs '00-*' '29-*' --seeds 1 \
    --import-runs $R/quality-28-seeds1-5.json --import-other-versions \
    --updates 1200 --curve-updates 800 --threads 1 --jobs 1 --train-loss --keep-checkpoints \
    --out-dir work/ca-arms-1200-29split --json work/ca-arms-1200-29split/quality-29split.json \
    --markdown work/ca-arms-1200-29split/table-29split.md
echo "29 split exit $? $(date -u +%T)"
