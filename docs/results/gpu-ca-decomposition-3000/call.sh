#!/bin/bash
# One GPU call of readings.md's study (written 2026-11-30, before any of its runs): the arms that
# took the context-aware remainder apart on the CPU at 1,200 updates (`19`, `21`, `22`), with the
# transformer `00` they pair with on the same machine, at 3,000 updates with --train-loss.
# 4 configs x 2 seeds = 8 runs a call: the one 8-run call on record (2026-11-27, H200, 00/02/14/15 at
# 3,000 updates with --train-loss) took 466 s in all; on an H100 a 10-run call took 555 s, so an
# H100 call may be cut off by DEADLINE (then no quality.json comes back: run that call again with one
# seed). One call per lease: SEEDS="14 15", then "16 17", then "18" (4 runs), each in its own lease.
# Before a call: `status`; set DEADLINE to about budget_left_s - 60 and do not start below ~480 s.
# Run on the lent machine from the repository root, with .gpu/ (scripts/gpu/make-lease-kit.sh, run
# here first) and work/demo/data carried:
#   SEEDS="14 15" bash docs/results/gpu-ca-decomposition-3000/call.sh
# UPDATES / CURVE may be overridden for a dry run only (e.g. on a CPU: PY=.venv/bin/python
# SKIP_WHEELS=1 OUT=/tmp/dry UPDATES=20 CURVE=10 SEEDS=14); the study's calls use 3,000 / 2,000.
set -u
export DEADLINE=${DEADLINE:-548} CONFIGS="00-* 19-* 21-* 22-*" SEEDS="${SEEDS:-14 15}" UPDATES=${UPDATES:-3000} CURVE=${CURVE:-2000} VALID_BLEU= NO_BENCH=1
export STUDY="--train-loss --pair 21-context_aware-half_zero_context_gates_trained=19-context_aware-frozen_half_zero_context --pair 22-context_aware-half_zero_context_projection_trained=19-context_aware-frozen_half_zero_context"
bash docs/results/gpu-ca-study-2000/run.sh
