#!/bin/bash
cd /work/main
export PATH=/work/main/.venv/bin:$PATH
fairseq-ctx-quality-compare --data-dir work/demo/data --config-dir fairseq_ctx/configs/init_study \
    --common fairseq_ctx/configs/demo/train.common --configs '00-*' '19-*' '21-*' '24-*' --seeds 1 2 3 4 5 \
    --import-runs docs/results/ca-arms-1200-cpu/quality-21-22-seeds1-5.json --import-other-versions \
    --pair 24-context_aware-frozen_scale_half=19-context_aware-frozen_half_zero_context \
    --pair 21-context_aware-half_zero_context_gates_trained=24-context_aware-frozen_scale_half \
    --updates 1200 --curve-updates 800 --threads 1 --jobs 2 --train-loss --keep-checkpoints \
    --out-dir work/ca-arms-1200 --json work/ca-arms-1200/quality-24-seeds1-5.json \
    --markdown work/ca-arms-1200/table-24-seeds1-5.md --curve-png work/ca-arms-1200/curves-24-seeds1-5.png
echo "exit $?"
