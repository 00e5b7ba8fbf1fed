#!/bin/bash
# arm 32 (28 with the sentence-wide query-side term's gradient through C stopped, its gradient into K kept:
# the fourth cell of the 2 x 2 with 28, 29 and 30; the forward is 28's, on 28's attention path) seeds 1-5,
# paired with 28 and 24; 00, 24 and 28 imported from the 28 report (same CPU type, AMD EPYC; this comment said
# "00, 24, 26 and 28" while it ran, corrected afterwards, the commands unchanged); 29 and 30
# combined from their reports in contrasts_from_reports.py. Niced: arm 31 was training when it started
cd /work/main
export PATH=/work/main/.venv/bin:$PATH
R=docs/results/ca-arms-1200-cpu
echo "start $(date -u +%T)"
nice -n 10 fairseq-ctx-quality-compare --data-dir work/demo/data --config-dir fairseq_ctx/configs/init_study \
    --common fairseq_ctx/configs/demo/train.common --configs '00-*' '24-*' '28-*' '32-*' --seeds 1 2 3 4 5 \
    --import-runs $R/quality-28-seeds1-5.json --import-other-versions \
    --pair 32-context_aware-query_only_deep_global_projection_trained_context_stop_gradient=28-context_aware-query_only_deep_global_projection_trained \
    --pair 32-context_aware-query_only_deep_global_projection_trained_context_stop_gradient=24-context_aware-frozen_scale_half \
    --updates 1200 --curve-updates 800 --threads 1 --jobs 2 --train-loss --keep-checkpoints \
    --out-dir work/ca-arms-1200-32 --json work/ca-arms-1200-32/quality-32.json \
    --markdown work/ca-arms-1200-32/table-32.md --curve-png work/ca-arms-1200-32/curves-32.png
echo "32 exit $? $(date -u +%T)"
