#!/bin/bash
# arm 29 (28 with the sentence-wide query-side term's direct gradient into U only: C a constant and
# lambda C U_Q . K sending K no gradient; the forward is 28's) seeds 1-5, paired with 28 and 24;
# 00, 24, 26 and 28 imported from the 28 report (same CPU type, AMD EPYC)
cd /work/main
export PATH=/work/main/.venv/bin:$PATH
R=docs/results/ca-arms-1200-cpu
echo "start $(date -u +%T)"
fairseq-ctx-quality-compare --data-dir work/demo/data --config-dir fairseq_ctx/configs/init_study \
    --common fairseq_ctx/configs/demo/train.common --configs '00-*' '24-*' '26-*' '28-*' '29-*' --seeds 1 2 3 4 5 \
    --import-runs $R/quality-28-seeds1-5.json --import-other-versions \
    --pair 29-context_aware-query_only_deep_global_projection_trained_gradient_into_u_only=28-context_aware-query_only_deep_global_projection_trained \
    --pair 29-context_aware-query_only_deep_global_projection_trained_gradient_into_u_only=24-context_aware-frozen_scale_half \
    --updates 1200 --curve-updates 800 --threads 1 --jobs 2 --train-loss --keep-checkpoints \
    --out-dir work/ca-arms-1200-29 --json work/ca-arms-1200-29/quality-29.json \
    --markdown work/ca-arms-1200-29/table-29.md --curve-png work/ca-arms-1200-29/curves-29.png
echo "29 exit $? $(date -u +%T)"
