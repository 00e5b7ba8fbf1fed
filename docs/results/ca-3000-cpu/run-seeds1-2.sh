#!/bin/bash
# Does the GPU's 3,000-update valid-loss remainder of context-aware `gate_half` (`02` - `00`
# +0.016 [+0.009, +0.022], 13 seeds, H100 / H200) appear on this CPU type (AMD EPYC) at 3,000
# updates? Seeds 1-2 of a planned 6 (readings: readings.md, committed before any result).
# Valid loss every 400 updates (gcd of the curve points), test BLEU at 1,200 / 2,000 / 3,000,
# the train-set loss at 3,000, checkpoints kept (a later session continues or diagnoses them).
cd /work/main
export PATH=/work/main/.venv/bin:$PATH
O=work/ca-3000-cpu
echo "start $(date -u +%T)"
fairseq-ctx-quality-compare --data-dir work/demo/data --config-dir fairseq_ctx/configs/init_study \
    --common fairseq_ctx/configs/demo/train.common --configs '00-*' '02-*' --seeds 1 2 \
    --updates 3000 --curve-updates 1200,2000 --threads 1 --jobs 2 --train-loss --keep-checkpoints \
    --out-dir $O --json $O/quality-seeds1-2.json \
    --markdown $O/table-seeds1-2.md --curve-png $O/curves-seeds1-2.png
echo "exit $? $(date -u +%T)"
