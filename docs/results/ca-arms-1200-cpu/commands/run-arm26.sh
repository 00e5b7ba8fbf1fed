#!/bin/bash
# arm 26 (query-side context only, U_Q trained, gates frozen at 1/2) seeds 1-5, paired with 24;
# and 24 seed 1 again on this VM to 504 updates (its logged valid losses at 168 / 336 / 504 against
# the imported run's: is a run reproducible across VMs of this CPU type?)
cd /work/main
export PATH=/work/main/.venv/bin:$PATH
R=docs/results/ca-arms-1200-cpu
arm26() {  # $1 seeds, $2 jobs
fairseq-ctx-quality-compare --data-dir work/demo/data --config-dir fairseq_ctx/configs/init_study \
    --common fairseq_ctx/configs/demo/train.common --configs '00-*' '24-*' '26-*' --seeds $1 \
    --import-runs $R/quality-24-seeds1-5.json --import-other-versions \
    --pair 26-context_aware-query_only_projection_trained=24-context_aware-frozen_scale_half \
    --updates 1200 --curve-updates 800 --threads 1 --jobs $2 --train-loss --keep-checkpoints \
    --out-dir work/ca-arms-1200-26 --json work/ca-arms-1200-26/quality-26.json \
    --markdown work/ca-arms-1200-26/table-26.md --curve-png work/ca-arms-1200-26/curves-26.png
}
repro24() {
fairseq-ctx-quality-compare --data-dir work/demo/data --config-dir fairseq_ctx/configs/init_study \
    --common fairseq_ctx/configs/demo/train.common --configs '00-*' '24-*' --seeds 1 \
    --import-runs $R/quality-21-22-seeds1-5.json --import-other-versions \
    --updates 504 --threads 1 --jobs 1 \
    --out-dir work/repro-24 --json work/repro-24/quality-24-seed1.json \
    --markdown work/repro-24/table-24-seed1.md
}
echo "start $(date -u +%T)"
arm26 "1 2 3 4" 2; echo "arm26 1-4 exit $? $(date -u +%T)"
arm26 "5" 1 > work/arm26-seed5.log 2>&1 &
repro24 > work/repro24.log 2>&1; echo "repro24 exit $? $(date -u +%T)"
wait; echo "arm26 5 done $(date -u +%T)"
arm26 "1 2 3 4 5" 1; echo "report exit $? $(date -u +%T)"
