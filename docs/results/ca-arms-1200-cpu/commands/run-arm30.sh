#!/bin/bash
# arm 30 (28 with the sentence-wide query-side term's gradient into K stopped, its gradient through C kept;
# the forward is 28's up to rounding) seeds 1-5, paired with 28 and 24; 00, 24, 26 and 28 imported from the
# 28 report (same CPU type, AMD EPYC); 29 (trained beside it) is combined in contrasts_from_reports.py
cd /work/main
export PATH=/work/main/.venv/bin:$PATH
R=docs/results/ca-arms-1200-cpu
echo "start $(date -u +%T)"
fairseq-ctx-quality-compare --data-dir work/demo/data --config-dir fairseq_ctx/configs/init_study \
    --common fairseq_ctx/configs/demo/train.common --configs '00-*' '24-*' '26-*' '28-*' '30-*' --seeds 1 2 3 4 5 \
    --import-runs $R/quality-28-seeds1-5.json --import-other-versions \
    --pair 30-context_aware-query_only_deep_global_projection_trained_key_gradient_stopped=28-context_aware-query_only_deep_global_projection_trained \
    --pair 30-context_aware-query_only_deep_global_projection_trained_key_gradient_stopped=24-context_aware-frozen_scale_half \
    --updates 1200 --curve-updates 800 --threads 1 --jobs 2 --train-loss --keep-checkpoints \
    --out-dir work/ca-arms-1200-30 --json work/ca-arms-1200-30/quality-30.json \
    --markdown work/ca-arms-1200-30/table-30.md --curve-png work/ca-arms-1200-30/curves-30.png
echo "30 exit $? $(date -u +%T)"
