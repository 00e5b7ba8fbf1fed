#!/bin/bash
# One GPU call of readings.md's study (written 2026-11-30, before any of its runs): the arms that
# took the context-aware remainder apart on the CPU at 1,200 updates (`19`, `21`, `22`), with the
# transformer `00` they pair with on the same machine, at 3,000 updates with --train-loss.
# 4 configs x 2 seeds = 8 runs a call (the 2026-11-27 calls: 8 runs in ~7-8 min on an H100 / H200).
# Calls: SEEDS="14 15", then "16 17", then "18" (five seeds; none of them used by an earlier GPU run).
# Run on the lent machine from the repository root, with .gpu/ (scripts/gpu/make-lease-kit.sh) and
# work/demo/data carried:  SEEDS="14 15" bash docs/results/gpu-ca-decomposition-3000/call.sh
set -u
export DEADLINE=${DEADLINE:-548} CONFIGS="00-* 19-* 21-* 22-*" SEEDS="${SEEDS:-14 15}" UPDATES=3000 CURVE=2000 VALID_BLEU= NO_BENCH=1
export STUDY="--train-loss --pair 21-context_aware-half_zero_context_gates_trained=19-context_aware-frozen_half_zero_context --pair 22-context_aware-half_zero_context_projection_trained=19-context_aware-frozen_half_zero_context"
bash docs/results/gpu-ca-study-2000/run.sh
