#!/bin/bash
# arm 31 (26, the whole query-side term: sentence-wide and per-position parts, with its gradient into K stopped;
# its gradient through C kept; the forward is 26's up to rounding) seeds 1-5, paired with 26 and 24; 00, 24, 26 imported from the
# 28 report (same CPU type, AMD EPYC); 28 and 30 are combined from their reports in contrasts_from_reports.py
cd /work/main
export PATH=/work/main/.venv/bin:$PATH
R=docs/results/ca-arms-1200-cpu
echo "start $(date -u +%T)"
fairseq-ctx-quality-compare --data-dir work/demo/data --config-dir fairseq_ctx/configs/init_study \
    --common fairseq_ctx/configs/demo/train.common --configs '00-*' '24-*' '26-*' '31-*' --seeds 1 2 3 4 5 \
    --import-runs $R/quality-28-seeds1-5.json --import-other-versions \
    --pair 31-context_aware-query_only_projection_trained_key_gradient_stopped=26-context_aware-query_only_projection_trained \
    --pair 31-context_aware-query_only_projection_trained_key_gradient_stopped=24-context_aware-frozen_scale_half \
    --updates 1200 --curve-updates 800 --threads 1 --jobs 2 --train-loss --keep-checkpoints \
    --out-dir work/ca-arms-1200-31 --json work/ca-arms-1200-31/quality-31.json \
    --markdown work/ca-arms-1200-31/table-31.md --curve-png work/ca-arms-1200-31/curves-31.png
echo "31 exit $? $(date -u +%T)"
