#!/bin/bash
# arm 28 (query-side context, deep-global part only: one vector per sentence in every layer; U_Q
# trained, gates frozen at 1/2) seeds 1-5, paired with 24; 00, 24 and 26 imported from the 26 / 27 report
cd /work/main
export PATH=/work/main/.venv/bin:$PATH
R=docs/results/ca-arms-1200-cpu
echo "start $(date -u +%T)"
fairseq-ctx-quality-compare --data-dir work/demo/data --config-dir fairseq_ctx/configs/init_study \
    --common fairseq_ctx/configs/demo/train.common --configs '00-*' '24-*' '26-*' '28-*' --seeds 1 2 3 4 5 \
    --import-runs $R/quality-26-27-seeds1-5.json --import-other-versions \
    --pair 26-context_aware-query_only_projection_trained=24-context_aware-frozen_scale_half \
    --pair 28-context_aware-query_only_deep_global_projection_trained=24-context_aware-frozen_scale_half \
    --updates 1200 --curve-updates 800 --threads 1 --jobs 2 --train-loss --keep-checkpoints \
    --out-dir work/ca-arms-1200-28 --json work/ca-arms-1200-28/quality-28.json \
    --markdown work/ca-arms-1200-28/table-28.md --curve-png work/ca-arms-1200-28/curves-28.png
echo "28 exit $? $(date -u +%T)"
