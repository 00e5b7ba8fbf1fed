#!/bin/bash
# arm 29 seeds 2-5 again in the split form of --context-stop-key-gradient (seed 1 done by
# run-arm29-split-seed1.sh), into the same out-dir; waits for arm 32's comparison to finish first.
# Its own autogroup at the lowest priority, so that other work on the VM (a CI run) goes first.
cd /work/main
echo 19 > /proc/self/autogroup 2>/dev/null
export PATH=/work/main/.venv/bin:$PATH
R=docs/results/ca-arms-1200-cpu
while pgrep -f run-arm32.sh > /dev/null; do sleep 60; done
echo "start $(date -u +%T)"
fairseq-ctx-quality-compare --data-dir work/demo/data --config-dir fairseq_ctx/configs/init_study \
    --common fairseq_ctx/configs/demo/train.common --configs '00-*' '29-*' --seeds 1 2 3 4 5 \
    --import-runs $R/quality-28-seeds1-5.json --import-other-versions \
    --updates 1200 --curve-updates 800 --threads 1 --jobs 2 --train-loss --keep-checkpoints \
    --out-dir work/ca-arms-1200-29split --json work/ca-arms-1200-29split/quality-29split-seeds1-5.json \
    --markdown work/ca-arms-1200-29split/table-29split-seeds1-5.md
echo "29 split seeds 2-5 exit $? $(date -u +%T)"
