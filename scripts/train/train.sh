#!/usr/bin/env bash
# Train one table row under one hardware setting:
#   scripts/train/train.sh <paper>/<row>.args SETTING --data BIN --save-dir DIR [options] [-- fairseq args]
# SETTING: p40 (8 GPUs x 4096 tokens, fp32) | cao (2 GPUs x 2048 tokens x update-freq 12) |
#          iida (2 GPUs x 2000 tokens; NAG lr 0.005, 20 epochs) | modern (bf16, same effective batch) | cpu
# Options: --launcher spawn|torchrun, --gpus N, --nnodes M --node-rank R --master-addr HOST
#          --master-port P (multi-node with torchrun: the same command on every node),
#          --launcher slurm (inside an sbatch allocation: one srun step, fairseq's own SLURM support),
#          --max-tokens-per-gpu N (modern), --reference p40|cao|iida (modern), --backend gloo, --dry-run.
# CONFIG: a path, or a shipped config by name (fairseq_ctx/configs/<paper>/<row>.args; the older
# configs/<paper>/<row>.args still resolves). Installed: fairseq-ctx-train. See fairseq_ctx/reproduce/train.py.
set -euo pipefail
PY=${PY:-python}
exec $PY -m fairseq_ctx.reproduce.train "$@"
