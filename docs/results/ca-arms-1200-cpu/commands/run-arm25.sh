#!/bin/bash
cd /work/main
export PATH=/work/main/.venv/bin:$PATH
fairseq-ctx-quality-compare --data-dir work/demo/data --config-dir fairseq_ctx/configs/init_study \
    --common fairseq_ctx/configs/demo/train.common --configs '00-*' '19-*' '22-*' '25-*' --seeds ${SEEDS:-1 2 3} \
    --import-runs docs/results/ca-arms-1200-cpu/quality-21-22-seeds1-5.json --import-other-versions \
    --pair 25-context_aware-projection_trained_context_stop_gradient=22-context_aware-half_zero_context_projection_trained \
    --pair 25-context_aware-projection_trained_context_stop_gradient=19-context_aware-frozen_half_zero_context \
    --updates 1200 --curve-updates 800 --threads 1 --jobs ${JOBS:-1} --train-loss --keep-checkpoints \
    --out-dir work/ca-arms-1200-25 --json work/ca-arms-1200-25/quality-25.json \
    --markdown work/ca-arms-1200-25/table-25.md --curve-png work/ca-arms-1200-25/curves-25.png
echo "exit $?"
