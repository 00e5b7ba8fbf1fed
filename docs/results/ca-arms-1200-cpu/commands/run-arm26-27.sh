#!/bin/bash
# after the seeds 1-4 invocation of arm 26 (pid given) ends: 26 seed 5 and 27 seeds 1-5 in one report
cd /work/main
export PATH=/work/main/.venv/bin:$PATH
R=docs/results/ca-arms-1200-cpu
while kill -0 "$1" 2>/dev/null; do sleep 20; done
echo "seeds 1-4 of 26 ended $(date -u +%T)"
fairseq-ctx-quality-compare --data-dir work/demo/data --config-dir fairseq_ctx/configs/init_study \
    --common fairseq_ctx/configs/demo/train.common --configs '00-*' '24-*' '26-*' '27-*' --seeds 1 2 3 4 5 \
    --import-runs $R/quality-24-seeds1-5.json --import-other-versions \
    --pair 26-context_aware-query_only_projection_trained=24-context_aware-frozen_scale_half \
    --pair 27-context_aware-key_only_projection_trained=24-context_aware-frozen_scale_half \
    --updates 1200 --curve-updates 800 --threads 1 --jobs 2 --train-loss --keep-checkpoints \
    --out-dir work/ca-arms-1200-26 --json work/ca-arms-1200-26/quality-26-27.json \
    --markdown work/ca-arms-1200-26/table-26-27.md --curve-png work/ca-arms-1200-26/curves-26-27.png
echo "26-27 exit $? $(date -u +%T)"
